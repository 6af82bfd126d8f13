"""Inference on real inputs: the :class:`Predictor` API, and predict.py's run over a source.

    from msdet.engine.inference.predictor import Predictor

    predictor = Predictor.load("runs/train/exp/checkpoints/best.ckpt")  # sets MindSpore up
    result = predictor.predict("image.jpg")  # or a uint8 BGR array [H, W, 3]
    result.boxes, result.scores, result.labels  # per detection; result.label_names too
    result.names  # the model's class names: result.names[result.labels[k]]

:func:`predict_source` is predict.py's loop over images, folders, globs, videos and a camera
(``data.media``), writing into the run folder. Importing this module does not import
MindSpore: :meth:`Predictor.load` prepares the process first (``engine.runtime``), as the
entry points do.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from msdet.common.config import load_config
from msdet.data.build import dataset_classes
from msdet.data.image_io import read_image, to_bgr_uint8
from msdet.data.transforms import letterbox
from msdet.data.visualize import draw_boxes
from msdet.engine.evaluation.detections import detection_records, detections_in_image
from msdet.engine.runtime.process import Runtime, setup_runtime

log = logging.getLogger("predict")


_process_runtime: Runtime | None = None  # what Predictor.load set up (once per process)


@dataclass
class Detections:
    """One image's detections in its own pixels, best score first.

    Per detection: ``boxes`` [n, 4] float32 x1, y1, x2, y2 (clipped to the image),
    ``scores`` [n], ``labels`` [n] the model's class indices, ``label_names`` [n] their
    class names and ``category_ids`` [n] their dataset ids (e.g. COCO's 1..90). For the
    image: ``image_hw`` (height, width) and ``names``, the model's class names, indexed by
    label (``names[labels[k]] == label_names[k]``).
    """

    boxes: np.ndarray
    scores: np.ndarray
    labels: np.ndarray
    label_names: list[str]
    category_ids: list[int]
    image_hw: tuple[int, int]
    names: list[str]

    def __len__(self) -> int:
        return len(self.scores)

    def records(self) -> list[dict[str, Any]]:
        """predict.py's records: ``bbox`` [x, y, w, h], ``score``, ``category_id``,
        ``category_name`` (the format of eval's detections.json, plus the name)."""
        xywh = np.concatenate((self.boxes[:, :2], self.boxes[:, 2:] - self.boxes[:, :2]), 1)
        # label_names and category_ids are per detection: detection k is "class" k here.
        return detection_records(
            xywh, self.scores, np.arange(len(self)), self.category_ids, self.label_names
        )

    def yolo_lines(self, with_score: bool = False) -> list[str]:
        """YOLO label lines ``class cx cy w h [score]``, box values normalised to 0..1 by
        the image size, as Ultralytics' ``save_txt`` (``%g``: 6 significant digits)."""
        h, w = self.image_hw
        lines = []
        for (x1, y1, x2, y2), score, label in zip(self.boxes, self.scores, self.labels):
            values = [(x1 + x2) / 2 / w, (y1 + y2) / 2 / h, (x2 - x1) / w, (y2 - y1) / h]
            if with_score:
                values.append(score)
            lines.append(" ".join([str(int(label))] + [f"{float(v):g}" for v in values]))
        return lines


class Predictor:
    """A model ready to detect: :meth:`predict` an image, :meth:`draw` the result. The
    model is a checkpoint or a file export.py wrote (``.mindir``, ``.onnx``: the same
    detections, see ``engine.inference.exported``).

    ``cfg`` is the composed config (``ckpt``, ``eval`` for NMS and input size, ``predict``
    for the score threshold); the runtime must be set up already (``rt``: where NMS runs and
    which CPU kernels the network is built with; None: on the device, no kernels).
    :meth:`load` does both from a checkpoint path alone.

    The network and its class names come from the checkpoint's (or file's) description. A
    checkpoint written before descriptions existed is built from ``cfg.model``; its class
    names come from a dataset named on the command line (``data=``, ``data.root=``,
    ``data.classes=``: read from its config or annotation file, never built), else they are
    numbered.
    """

    def __init__(self, cfg: Any, rt: Runtime | None = None, typed: dict[str, str] | None = None):
        import mindspore as ms

        from msdet.engine.inference.exported import load_inference_model

        typed = typed or {}
        self._ms = ms
        self.conf = float(cfg.predict.conf)
        if "eval.conf_thresh" in typed and "predict.conf" not in typed:
            log.warning(
                "eval.conf_thresh is eval.py's (mAP); predictions use predict.conf=%g: "
                "set predict.conf=%s instead",
                self.conf,
                typed["eval.conf_thresh"],
            )
        model = load_inference_model(cfg, typed, rt, conf_thresh=self.conf)
        self._warm = False
        self.img_size = model.img_size
        self.num_classes = model.num_classes
        self.net, self.nms = model.net, model.nms
        if model.class_names is not None:
            self.class_names, self.category_ids = model.class_names, model.category_ids
        else:
            self.class_names, self.category_ids = self._classes_without_description(cfg, typed)
        # The names a described model carries are its training data's (data.record).
        of_data = f" of {model.data['setting']}, its training data" if model.data else ""
        log.info(
            "%s: %s, %d classes (%s)%s; score >= %g",
            cfg.ckpt,
            model.summary,
            self.num_classes,
            ", ".join(self.class_names[:5]) + (", ..." if self.num_classes > 5 else ""),
            of_data,
            self.conf,
        )

    @classmethod
    def load(
        cls,
        ckpt: str,
        conf: float | None = None,
        device: str = "auto",
        overrides: Sequence[str] = (),
    ) -> Predictor:
        """A Predictor for ``ckpt`` (a checkpoint, or a ``.mindir``/``.onnx`` file export.py
        wrote) in a plain Python session: composes ``configs/`` as the entry points do and
        sets MindSpore up (``runtime.device=device``: auto = Ascend when present, else CPU;
        once per process, before MindSpore runs anything else).

        ``conf``: the score threshold (default ``predict.conf``, 0.25); ``overrides``:
        further config overrides as on predict.py's command line (``eval.nms_iou=0.5``,
        ``eval.img_size=640``, ``model=yolox_s`` for a checkpoint without description).
        """
        cfg = load_config("predict", [*overrides, f"ckpt={ckpt}", f"runtime.device={device}"])
        typed = dict(o.lstrip("+").partition("=")[::2] for o in overrides)
        if conf is not None:
            cfg.predict.conf, typed["predict.conf"] = float(conf), str(conf)
        return cls(cfg, _set_up_once(cfg.runtime), typed=typed)

    def warm_up(self) -> None:
        """Run the network once on a blank input, so that its compile (seconds, on the first
        call) is done; predict.py calls it before its progress starts timing images. Once per
        Predictor; :meth:`predict` works without it (its first call compiles then)."""
        if self._warm:
            return
        started = time.perf_counter()
        blank = np.full((1, 3, *self.img_size), 114.0, dtype=np.float32)
        self.nms(self.net(self._ms.Tensor(blank)))
        self._warm = True
        log.info(
            "network ready in %.1f s (compiled on a blank image)", time.perf_counter() - started
        )

    def predict(self, image: str | os.PathLike | np.ndarray) -> Detections:
        """Detect in an image file or array (uint8 BGR [H, W, 3], as ``cv2.imread`` gives;
        grey, 16-bit and BGRA arrays are converted). A file that cannot be read raises
        ``data.image_io.ImageReadError`` naming it."""
        if isinstance(image, np.ndarray):
            try:
                img = to_bgr_uint8(image)
            except ValueError as err:
                raise ValueError(
                    f"Predictor.predict: {err}; it takes an image as a uint8 BGR array "
                    "[H, W, 3] (as cv2.imread returns)"
                ) from err
        elif isinstance(image, (str, os.PathLike)):
            img = read_image(os.fspath(image))
        else:
            raise ValueError(
                "Predictor.predict takes an image file's path or an image array [H, W, 3], "
                f"got {type(image).__name__}"
            )
        boxed, scale = letterbox(img, self.img_size)
        batch = np.ascontiguousarray(boxed.transpose(2, 0, 1)[None], dtype=np.float32)
        dets, counts = self.nms(self.net(self._ms.Tensor(batch)))
        self._warm = True
        dets, counts = (d.asnumpy() if hasattr(d, "asnumpy") else d for d in (dets, counts))
        hw = (int(img.shape[0]), int(img.shape[1]))
        boxes, scores, labels = detections_in_image(dets[0], counts[0], scale, hw)
        return Detections(
            boxes=boxes,
            scores=scores,
            labels=labels,
            label_names=[str(self.class_names[k]) for k in labels],
            category_ids=[int(self.category_ids[k]) for k in labels],
            image_hw=hw,
            names=[str(n) for n in self.class_names],
        )

    def draw(self, img: np.ndarray, detections: Detections) -> np.ndarray:
        """A copy of ``img`` (the image :meth:`predict` was given, as an array) with the
        boxes, class names and scores of ``detections`` drawn."""
        if not isinstance(img, np.ndarray) or img.ndim != 3 or img.size == 0:
            shown = type(img).__name__ if not isinstance(img, np.ndarray) else f"shape {img.shape}"
            raise ValueError(
                "Predictor.draw takes the image as a uint8 BGR array [H, W, 3] (cv2.imread's; "
                f"read a file first), got {shown}"
            )
        if not isinstance(detections, Detections):
            raise ValueError(
                "Predictor.draw takes the Detections that predict returned, got "
                f"{type(detections).__name__}"
            )
        return draw_boxes(
            img, detections.boxes, detections.labels, self.class_names, detections.scores
        )

    def _classes_without_description(self, cfg: Any, typed: dict) -> tuple[list[str], list[int]]:
        numbered = [f"class{i}" for i in range(self.num_classes)], list(range(self.num_classes))
        if not any(k in ("data", "data.root", "data.classes") for k in typed):
            log.warning(
                "%s has no description (written before msdet described its checkpoints): "
                "classes are numbered; name a dataset (data=...) for its class names",
                cfg.ckpt,
            )
            return numbered
        try:
            names, ids = dataset_classes(cfg.data)
        except ValueError as err:
            log.warning("no class names (%s): classes are numbered", err)
            return numbered
        if len(names) != self.num_classes:
            log.warning(
                "data=%s has %d classes, the checkpoint %d: classes are numbered",
                cfg.data.name,
                len(names),
                self.num_classes,
            )
            return numbered
        return names, ids


def _set_up_once(runtime_cfg: Any) -> Runtime | None:
    """Set the process up by the first :meth:`Predictor.load` (later ones reuse it);
    returns its runtime (None where MindSpore was set up by someone else)."""
    global _process_runtime
    if _process_runtime is None:
        try:
            _process_runtime = setup_runtime(runtime_cfg, ".")
        except RuntimeError as err:
            if "has been initialized" not in str(err):  # e.g. no such device here
                raise
            # MindSpore ran a kernel before: its device is fixed for this process.
            log.warning(
                "Predictor.load could not set MindSpore up (%s): it predicts where MindSpore "
                "already runs; call Predictor.load before other MindSpore work to choose",
                (str(err).strip().splitlines() or [type(err).__name__])[0],
            )
            return None
    elif runtime_cfg.device not in ("auto", _process_runtime.device):
        log.warning(
            "MindSpore runs on %s in this process (set up by the first Predictor.load); "
            "device=%s is ignored",
            _process_runtime.device,
            runtime_cfg.device,
        )
    return _process_runtime
