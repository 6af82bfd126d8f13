"""Inference on real inputs: the :class:`Predictor` API, and predict.py's run over a source.

    from engine.predictor import Predictor

    predictor = Predictor.load("outputs/.../checkpoints/best.ckpt")  # sets MindSpore up
    result = predictor.predict("image.jpg")  # or a uint8 BGR array [H, W, 3]
    result.boxes, result.scores, result.labels, result.names

:func:`predict_source` is predict.py's loop over images, folders, globs, videos and a camera
(``data.media``), writing into the run folder. Importing this module does not import
MindSpore: :meth:`Predictor.load` prepares the process first (``engine.runtime``), as the
entry points do.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import cv2
import numpy as np

from data.build import dataset_classes
from data.image_io import ImageReadError, read_image, to_bgr_uint8
from data.media import Media, VideoReader, annotated_video_name, find_media, open_video_writer
from data.progress import Progress, progress
from data.transforms import letterbox
from data.visualize import draw_boxes
from engine.cli import apply_described_size, prepare_config
from engine.evaluator import detection_records, detections_in_image
from engine.runtime import Runtime, setup_runtime

log = logging.getLogger("predict")

CONFIG_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "configs")
PREDICTIONS_FILE = "predictions.json"
LABELS_DIR = "labels"
FRAMES_SUFFIX = ".frames.json"

_process_runtime: Runtime | None = None  # what Predictor.load set up (once per process)


@dataclass
class Detections:
    """One image's detections in its own pixels, best score first.

    ``boxes`` [n, 4] float32 x1, y1, x2, y2 (clipped to the image), ``scores`` [n],
    ``labels`` [n] the checkpoint's class indices, ``names`` and ``category_ids`` per
    detection (the dataset's ids, e.g. COCO's 1..90), ``image_hw`` (height, width).
    """

    boxes: np.ndarray
    scores: np.ndarray
    labels: np.ndarray
    names: list[str]
    category_ids: list[int]
    image_hw: tuple[int, int]

    def __len__(self) -> int:
        return len(self.scores)

    def records(self) -> list[dict[str, Any]]:
        """predict.py's records: ``bbox`` [x, y, w, h], ``score``, ``category_id``,
        ``category_name`` (the format of eval's detections.json, plus the name)."""
        xywh = np.concatenate((self.boxes[:, :2], self.boxes[:, 2:] - self.boxes[:, :2]), 1)
        # names and ids are per detection here: detection k is "class" k of the tables.
        return detection_records(
            xywh, self.scores, np.arange(len(self)), self.category_ids, self.names
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
    """A checkpoint ready to detect: :meth:`predict` an image, :meth:`draw` the result.

    ``cfg`` is the composed config (``ckpt``, ``eval`` for NMS and input size, ``predict``
    for the score threshold); the runtime must be set up already (``host_nms``: its
    ``Runtime.host_nms``). :meth:`load` does both from a checkpoint path alone.

    The network and its class names come from the checkpoint's description. A checkpoint
    written before descriptions existed is built from ``cfg.model``; its class names come
    from a dataset named on the command line (``data=``, ``data.root=``, ``data.classes=``:
    read from its config or annotation file, never built), else they are numbered.
    """

    def __init__(self, cfg: Any, host_nms: bool = False, typed: dict[str, str] | None = None):
        import mindspore as ms

        from models.inference import InferenceNet, build_nms, load_described_detector

        typed = typed or {}
        detector, used_ema, description = load_described_detector(cfg.ckpt, cfg.model, typed)
        apply_described_size(cfg, description, typed)
        self._ms = ms
        self.img_size = tuple(int(v) for v in cfg.eval.img_size)
        self.num_classes = detector.num_classes
        self.conf = float(cfg.predict.conf)
        if "eval.conf_thresh" in typed and "predict.conf" not in typed:
            log.warning(
                "eval.conf_thresh is eval.py's (mAP); predictions use predict.conf=%g: "
                "set predict.conf=%s instead",
                self.conf,
                typed["eval.conf_thresh"],
            )
        self.net = InferenceNet(detector)
        self.nms = build_nms(cfg.eval, self.num_classes, on_host=host_nms, conf_thresh=self.conf)
        if description is not None:
            self.class_names, self.category_ids = description.class_names, description.category_ids
        else:
            self.class_names, self.category_ids = self._classes_without_description(cfg, typed)
        log.info(
            "%s: %s%s weights, %d classes (%s); score >= %g",
            cfg.ckpt,
            description.model["name"] + " " if description else "",
            "EMA" if used_ema else "raw",
            self.num_classes,
            ", ".join(self.class_names[:5]) + (", ..." if self.num_classes > 5 else ""),
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
        """A Predictor for ``ckpt`` in a plain Python session: composes ``configs/`` as the
        entry points do and sets MindSpore up (``runtime.device=device``: auto = Ascend
        when present, else CPU; once per process, before MindSpore runs anything else).

        ``conf``: the score threshold (default ``predict.conf``, 0.25); ``overrides``:
        further config overrides as on predict.py's command line (``eval.nms_iou=0.5``,
        ``eval.img_size=640``, ``model=yolox_s`` for a checkpoint without description).
        """
        from hydra import compose, initialize_config_dir

        with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
            cfg = compose("config", overrides=list(overrides))
        prepare_config(cfg)
        # Set, not composed: a path may hold characters Hydra's override grammar parses.
        cfg.ckpt, cfg.runtime.device = str(ckpt), device
        typed = dict(o.lstrip("+~").partition("=")[::2] for o in overrides)
        if conf is not None:
            cfg.predict.conf, typed["predict.conf"] = float(conf), str(conf)
        return cls(cfg, host_nms=_set_up_once(cfg.runtime), typed=typed)

    def predict(self, image: str | os.PathLike | np.ndarray) -> Detections:
        """Detect in an image file or array (uint8 BGR [H, W, 3], as ``cv2.imread`` gives;
        grey, 16-bit and BGRA arrays are converted). A file that cannot be read raises
        ``data.image_io.ImageReadError`` naming it."""
        if isinstance(image, np.ndarray):
            img = to_bgr_uint8(image)
        else:
            img = read_image(os.fspath(image))
        boxed, scale = letterbox(img, self.img_size)
        batch = np.ascontiguousarray(boxed.transpose(2, 0, 1)[None], dtype=np.float32)
        dets, counts = self.nms(self.net(self._ms.Tensor(batch)))
        dets, counts = (d.asnumpy() if hasattr(d, "asnumpy") else d for d in (dets, counts))
        hw = (int(img.shape[0]), int(img.shape[1]))
        boxes, scores, labels = detections_in_image(dets[0], counts[0], scale, hw)
        return Detections(
            boxes=boxes,
            scores=scores,
            labels=labels,
            names=[str(self.class_names[k]) for k in labels],
            category_ids=[int(self.category_ids[k]) for k in labels],
            image_hw=hw,
        )

    def draw(self, img: np.ndarray, detections: Detections) -> np.ndarray:
        """A copy of ``img`` with the boxes, class names and scores drawn."""
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


def _set_up_once(runtime_cfg: Any) -> bool:
    """Set the process up by the first :meth:`Predictor.load` (later ones reuse it);
    returns whether NMS runs on the host (``Runtime.host_nms``)."""
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
            return False
    elif runtime_cfg.device not in ("auto", _process_runtime.device):
        log.warning(
            "MindSpore runs on %s in this process (set up by the first Predictor.load); "
            "device=%s is ignored",
            _process_runtime.device,
            runtime_cfg.device,
        )
    return _process_runtime.host_nms


def predict_source(
    predictor: Predictor,
    source: str | int,
    out_dir: str,
    save_txt: bool = False,
    save_conf: bool = False,
    max_frames: int | None = None,
) -> dict[str, Any]:
    """predict.py's run: detect in every input of ``source`` (``data.media.find_media``)
    and write into ``out_dir``, mirroring the source's relative paths:

    - each image annotated under its relative path; all images' records in
      ``predictions.json`` (``{relative path: [records]}``); unreadable images are
      reported and skipped;
    - each video (and a camera, ``camera<i>``) annotated as a video of that name (mp4v;
      MJPG for .avi) and its records per frame in ``<name>.frames.json``;
    - with ``save_txt``, YOLO labels ``labels/<relative path>.txt`` (a video's frame k:
      ``labels/<name>_<k>.txt``, k from 0, six digits), empty for nothing found, the score
      appended with ``save_conf``.

    ``max_frames`` stops each video and the camera after that many frames; Ctrl+C stops
    the run, keeping what was done (a camera's usual end). Returns counts for the log.
    """
    media = find_media(source)
    _warn_shared_names(media, save_txt)
    labels = os.path.join(out_dir, LABELS_DIR) if save_txt else None
    summary: dict[str, Any] = {"images": 0, "skipped": [], "videos": {}, "detections": 0}
    images = [m for m in media if m.kind == "image"]
    streams = [m for m in media if m.kind != "image"]
    results: dict[str, list[dict[str, Any]]] = {}
    try:
        for item in progress(images, len(images), "predict", "img", logger=log):
            try:
                img = read_image(item.path)
            except ImageReadError as err:
                log.warning("skipped: %s", err)
                summary["skipped"].append(item.path)
                continue
            dets = predictor.predict(img)
            _write_image(os.path.join(out_dir, item.rel), predictor.draw(img, dets))
            if labels:
                _write_labels(os.path.join(labels, _stem(item.rel) + ".txt"), dets, save_conf)
            results[item.rel] = dets.records()
            summary["detections"] += len(dets)
        for item in streams:
            frames = _predict_stream(predictor, item, out_dir, labels, save_conf, max_frames)
            if frames is not None:
                summary["videos"][item.rel] = len(frames)
                summary["detections"] += sum(len(f["detections"]) for f in frames)
    except KeyboardInterrupt:
        log.warning("interrupted: keeping what was done")
    if images:
        with open(os.path.join(out_dir, PREDICTIONS_FILE), "w", encoding="utf-8") as f:
            json.dump(results, f, indent=2)
    summary["images"] = len(results)
    return summary


def _predict_stream(
    predictor: Predictor,
    item: Media,
    out_dir: str,
    labels: str | None,
    save_conf: bool,
    max_frames: int | None,
) -> list[dict[str, Any]] | None:
    """One video or camera: the annotated video, ``<name>.frames.json``, labels per frame.
    Returns the frames' records, or None for a video that cannot be read (a camera that
    cannot be opened is an error)."""
    try:
        reader = VideoReader(item)
    except OSError as err:
        if item.kind == "camera":
            raise
        log.warning("skipped: %s", err)
        return None
    total = reader.frame_count
    if max_frames is not None:
        total = min(total, int(max_frames)) if total else int(max_frames)
    name = annotated_video_name(item.rel)
    frames: list[dict[str, Any]] = []
    writer, hw = None, (0, 0)
    bar = Progress(total, item.rel, "frame", logger=log)
    try:
        for k, frame in enumerate(reader.frames()):
            if max_frames is not None and k >= int(max_frames):
                break
            dets = predictor.predict(frame)
            if writer is None:
                hw = frame.shape[:2]
                writer = open_video_writer(os.path.join(out_dir, name), reader.fps, hw)
            writer.write(predictor.draw(frame, dets))
            if labels:
                path = os.path.join(labels, f"{_stem(item.rel)}_{k:06d}.txt")
                _write_labels(path, dets, save_conf)
            frames.append(
                {"frame": k, "time_s": round(k / reader.fps, 3), "detections": dets.records()}
            )
            bar.update()
    except KeyboardInterrupt:
        if item.kind != "camera":
            raise
        log.info("camera %s stopped after %d frames", item.path, len(frames))
    finally:
        bar.close()
        reader.release()
        if writer is not None:
            writer.release()
        if frames:
            _write_frames(out_dir, item, name, reader.fps, hw, frames)
    if not frames:
        log.warning("skipped: no frame could be read from %s", item.path)
        return None
    return frames


def _write_frames(
    out_dir: str, item: Media, name: str, fps: float, hw: Sequence[int], frames: list
) -> None:
    record = {"source": item.path, "video": name, "fps": fps, "width": hw[1], "height": hw[0]}
    record["frames"] = frames
    path = os.path.join(out_dir, _stem(item.rel) + FRAMES_SUFFIX)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(record, f, indent=1)


def _warn_shared_names(media: Sequence[Media], save_txt: bool) -> None:
    """x.jpg and x.png of one folder share labels/x.txt; x.mp4 and x.avi x.frames.json."""
    by_stem: dict[tuple[str, str], list[str]] = {}
    for item in media:
        if save_txt or item.kind != "image":
            by_stem.setdefault((item.kind == "image", _stem(item.rel)), []).append(item.rel)
    for names in by_stem.values():
        if len(names) > 1:
            log.warning("%s share their output names (labels/*.txt, *.frames.json): the last "
                        "one's are kept", " and ".join(names))  # fmt: skip


def _stem(rel: str) -> str:
    return os.path.splitext(rel)[0]


def _write_image(path: str, img: np.ndarray) -> None:
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    if not cv2.imwrite(path, img):
        raise OSError(f"cannot write {path}")


def _write_labels(path: str, detections: Detections, with_score: bool) -> None:
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    lines = detections.yolo_lines(with_score)
    with open(path, "w", encoding="utf-8") as f:
        f.write("".join(line + "\n" for line in lines))
