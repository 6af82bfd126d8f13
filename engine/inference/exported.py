"""Run what export.py wrote: a MINDIR file (MindSpore) or an ONNX file (onnxruntime) as the
network of eval.py and predict.py, in place of a checkpoint (``ckpt=model.onnx``).

export.py stores a description in the file itself (:data:`METADATA_KEY`: the model, its
class names and category ids, the input shape, whether NMS is inside and with which
settings, the output names), so the file alone is enough, as a described checkpoint is.
:class:`ExportedModel` runs the file and returns what :class:`models.inference.InferenceNet`
returns; :class:`ExportedNMS` takes the place of NMS for a file that has NMS inside.

Importing this module does not import MindSpore; running a MINDIR file does.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from msdet.engine.inference.onnx_graph import OnnxEditError, read_model_metadata
from msdet.models.description import ClassMismatchError, class_label_map, numbered_names

log = logging.getLogger("msdet")

METADATA_KEY = "msdet_export"
EXPORTED_SUFFIXES = {".mindir": "MINDIR", ".onnx": "ONNX"}
# The graph outputs, named in the ONNX file and described in the metadata.
OUTPUTS_WITH_NMS = {
    "detections": "[B, max_det, 6]: x1, y1, x2, y2 in input pixels, score, class index; "
    "best first, rows past num_detections are padding",
    "num_detections": "[B]: detections per image",
}
OUTPUTS_WITHOUT_NMS = {
    "predictions": "[B, A, 5 + C]: cx, cy, w, h in input pixels, objectness, class "
    "probabilities (score = objectness x class probability)",
}
INPUT_LAYOUT = "images [B, 3, H, W] float32, BGR 0-255, letterboxed (image top-left, pad 114)"


class ExportedModelError(ValueError):
    """An exported file that cannot be used as asked; the message names the file."""


def weights_format(path: str) -> str:
    """What ``ckpt=`` names, by its suffix: ``MINDIR``, ``ONNX`` or ``checkpoint``."""
    return EXPORTED_SUFFIXES.get(os.path.splitext(str(path))[1].lower(), "checkpoint")


@dataclass
class ExportInfo:
    """The description export.py stores in an exported file (see the module docstring)."""

    format: str
    model: str
    num_classes: int
    class_names: list[str] | None  # None: the checkpoint had no description
    category_ids: list[int] | None
    input_shape: list[int]  # [B, 3, H, W]
    with_nms: bool
    nms: dict[str, Any] | None  # the eval.* NMS settings inside the file
    outputs: dict[str, str]  # output name -> layout
    checkpoint: str  # the checkpoint's file name it was exported from
    ema_weights: bool
    data: dict[str, Any] | None = None  # the dataset its checkpoint trained on (data.record)

    @property
    def batch_size(self) -> int:
        return int(self.input_shape[0])

    @property
    def img_size(self) -> list[int]:
        return [int(self.input_shape[2]), int(self.input_shape[3])]

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str, path: str) -> ExportInfo:
        try:
            return cls(**json.loads(text))
        except (TypeError, ValueError) as err:
            raise ExportedModelError(f"{path}: unreadable {METADATA_KEY} metadata ({err})") from err


def read_export_info(path: str) -> ExportInfo:
    """The description inside an exported file, or :class:`ExportedModelError` saying why
    there is none (not found, not a model, exported before msdet described its exports)."""
    fmt = weights_format(path)
    if fmt == "checkpoint":
        raise ExportedModelError(f"{path} is not an exported model (.mindir or .onnx)")
    if not os.path.isfile(path):
        raise ExportedModelError(f"exported model not found: {path}")
    try:
        metadata = read_model_metadata(path)
    except OnnxEditError as err:
        raise ExportedModelError(f"{path} is not a {fmt} file: {err}") from err
    if METADATA_KEY not in metadata:
        raise ExportedModelError(
            f"{path} carries no msdet description (exported by another tool or an older "
            "msdet): export the checkpoint again with export.py"
        )
    info = ExportInfo.from_json(metadata[METADATA_KEY], path)
    if info.format != fmt:
        raise ExportedModelError(f"{path} holds a {info.format} model, its suffix says {fmt}")
    return info


def import_onnxruntime(purpose: str) -> Any:
    """The ``onnxruntime`` module, or :class:`ExportedModelError` saying that ``purpose``
    needs it and how to install it (a requirement of msdet that an environment installed
    without its dependencies, or on a platform without a wheel, can lack)."""
    try:
        import onnxruntime
    except ImportError as err:
        raise ExportedModelError(
            f"{purpose} needs onnxruntime, which is not installed here ({err}): "
            "pip install onnxruntime (one of msdet's requirements: pip install -e . installs it)"
        ) from err
    return onnxruntime


class ExportedModel:
    """An exported file ready to run: called with images ``[n, 3, H, W]`` (a Tensor or an
    array, ``n`` up to the file's batch size: smaller batches are padded) it returns what
    ``InferenceNet`` returns: the predictions as a Tensor for a file without NMS, else
    ``(detections, num_detections)`` as arrays.

    A MINDIR file runs in MindSpore (``mindspore.load`` + ``nn.GraphCell``, on the device
    the process set up), an ONNX file in onnxruntime on the CPU.
    """

    def __init__(self, path: str):
        self.path = path
        self.info = read_export_info(path)
        if self.info.format == "ONNX":
            onnxruntime = import_onnxruntime(f"{path}: running an ONNX model")
            self._session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
            self._input = self._session.get_inputs()[0].name
        else:
            import mindspore as ms
            from mindspore import nn

            self._ms = ms
            try:
                self._graph = nn.GraphCell(ms.load(path))
            except (RuntimeError, ValueError) as err:
                first = (str(err).strip().splitlines() or [type(err).__name__])[0]
                raise ExportedModelError(f"{path} does not load as MINDIR: {first}") from err

    def run(self, images: np.ndarray) -> list[np.ndarray]:
        """The file's outputs for ``images`` (float32 ``[n, 3, H, W]``) as arrays."""
        images = np.ascontiguousarray(images, dtype=np.float32)
        expected = self.info.input_shape
        n = images.shape[0]
        if list(images.shape[1:]) != expected[1:] or n > expected[0]:
            raise ExportedModelError(
                f"{self.path} takes input {expected}, got {list(images.shape)}"
            )
        if n < expected[0]:
            pad = np.zeros((expected[0] - n, *images.shape[1:]), np.float32)
            images = np.concatenate([images, pad])
        if self.info.format == "ONNX":
            outputs = self._session.run(None, {self._input: images})
        else:
            out = self._graph(self._ms.Tensor(images))
            outputs = [t.asnumpy() for t in (out if isinstance(out, (tuple, list)) else (out,))]
        return [np.asarray(o)[:n] for o in outputs]

    def __call__(self, images: Any) -> Any:
        array = images.asnumpy() if hasattr(images, "asnumpy") else np.asarray(images)
        outputs = self.run(array)
        if self.info.with_nms:
            return outputs[0], outputs[1]
        import mindspore as ms

        return ms.Tensor(outputs[0])


class ExportedNMS:
    """The NMS step for a file with NMS inside: the file's detections, those scoring under
    ``conf_thresh`` dropped (predict.py's ``predict.conf`` over the file's own threshold)."""

    def __init__(self, conf_thresh: float):
        self.conf_thresh = float(conf_thresh)

    def __call__(self, outputs: tuple[np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        dets, counts = (np.asarray(o) for o in outputs)
        rows = np.arange(dets.shape[1])[None, :]
        keep = (rows < counts.reshape(-1, 1)) & (dets[..., 4] >= self.conf_thresh)
        out = np.zeros_like(dets)
        for i in range(dets.shape[0]):
            kept = dets[i][keep[i]]
            out[i, : len(kept)] = kept
        return out, keep.sum(1).astype(counts.dtype)


def exported_nms(
    info: ExportInfo, path: str, eval_cfg: Any, typed: dict[str, str], conf_thresh: float | None
) -> ExportedNMS | None:
    """:class:`ExportedNMS` for a file with NMS inside (None without: the caller builds NMS
    from ``eval_cfg`` as for a checkpoint). NMS settings typed on the command line cannot
    change the file's: they are named in a warning, with the way to choose them."""
    if not info.with_nms:
        return None
    nms = info.nms or {}
    ignored = [
        f"eval.{key}={typed[f'eval.{key}']}"
        for key in ("nms_iou", "pre_nms_topk", "max_det", "class_agnostic")
        if f"eval.{key}" in typed and key in nms and str(nms[key]) != typed[f"eval.{key}"]
    ]
    if ignored:
        log.warning(
            "%s has NMS inside (%s): %s cannot change it; export with export.with_nms=false "
            "to choose NMS settings at run time",
            path,
            ", ".join(f"{k}={v}" for k, v in nms.items()),
            ", ".join(ignored),
        )
    threshold = float(eval_cfg.conf_thresh if conf_thresh is None else conf_thresh)
    inside = float(nms.get("conf_thresh", 0.0))
    if threshold < inside:
        log.warning(
            "%s drops detections scoring under %g inside the file: a threshold of %g "
            "keeps none below it",
            path,
            inside,
            threshold,
        )
    return ExportedNMS(max(threshold, inside))


def inference_size(
    cfg: Any,
    typed: dict[str, str],
    described: Sequence[int] | None = None,
    fixed: Sequence[int] | None = None,
    path: str = "",
) -> tuple[int, int]:
    """The input ``(h, w)`` a loaded model runs at, decided here alone (the config is not
    written back). ``fixed``: an exported file's static input, the only size it takes (a
    different ``eval.img_size`` typed on the command line is an error naming both);
    otherwise a typed ``eval.img_size``, then ``described`` (the size a checkpoint's
    description gives: its mAP was measured there), then ``eval.img_size`` as the config
    resolved it (null: ``data.img_size``). ``path`` names the model in errors."""
    from msdet.common.schema import SCHEMA

    size = [int(v) for v in cfg.eval.img_size]
    if fixed is not None:
        fixed = [int(v) for v in fixed]
        if "eval.img_size" in typed and size != fixed:
            raise ExportedModelError(
                f"{path} takes {fixed[0]}x{fixed[1]} images only "
                f"(eval.img_size={typed['eval.img_size']}): leave eval.img_size out or "
                "export again at that size"
            )
        size = fixed
    elif described and "eval.img_size" not in typed:
        size = SCHEMA["eval.img_size"].validate(f"{path}: its described input size", described)
    return size[0], size[1]


@dataclass
class InferenceModel:
    """What eval.py and predict.py run, from a checkpoint or an exported file: ``net``
    (images -> outputs), ``nms`` (outputs -> ``(dets, counts)``), the class count, names
    and category ids (None: not described), ``summary`` for the log line, the input to
    feed it: ``img_size`` ``(h, w)`` (:func:`inference_size`) and ``batch_size`` (an
    exported file's own, else ``eval.batch_size``), and ``data``: the dataset it trained on
    (``data.record``; None when not recorded)."""

    net: Any
    nms: Any
    num_classes: int
    class_names: list[str] | None
    category_ids: list[int] | None
    summary: str
    img_size: tuple[int, int]
    batch_size: int
    data: dict[str, Any] | None = None


def load_inference_model(
    cfg: Any,
    typed: dict[str, str],
    rt: Any = None,
    num_classes: int | None = None,
    conf_thresh: float | None = None,
) -> InferenceModel:
    """The network named by ``cfg.ckpt`` with its NMS: a checkpoint built from its
    description (its input size unless ``eval.img_size`` is typed), or an exported
    MINDIR/ONNX file run as it is (input size and batch from its input shape, NMS from the
    file when it has NMS inside); :func:`inference_size` decides the size, which the result
    carries. ``rt``: the process's Runtime (None: NMS on the device, no CPU
    kernels); ``num_classes``: the data's class count, which the model must have;
    ``conf_thresh`` replaces ``eval.conf_thresh`` (predict.py's ``predict.conf``)."""
    from msdet.engine.runtime.ascend import nms_on_host
    from msdet.models.inference import InferenceNet, build_nms
    from msdet.ops.cpu_kernels import NATIVE

    kernels = rt.kernels if rt is not None else NATIVE
    nms_args = {
        "conf_thresh": conf_thresh,
        "kernels": kernels,
        "max_boxes": rt.nms_max_boxes if rt is not None else None,
    }

    def host(classes: int, img_size: tuple[int, int]) -> bool:  # once the model is known
        return rt is not None and nms_on_host(rt, cfg.eval, classes, img_size)

    fmt = weights_format(cfg.ckpt)
    if fmt == "checkpoint":
        from msdet.models.weights import CheckpointError, load_described_detector

        try:
            detector, used_ema, description = load_described_detector(
                cfg.ckpt, cfg.model, typed, num_classes, kernels=kernels
            )
        except CheckpointError as err:
            if str(cfg.ckpt).lower().endswith(".ckpt") or "not found" in str(err):
                raise
            raise CheckpointError(
                f"{err}; ckpt= takes a MindSpore checkpoint (.ckpt) or a file export.py "
                "wrote (.mindir, .onnx); a PyTorch .pth converts with "
                "python -m msdet.models.convert_pytorch"
            ) from err
        described = description.input_size if description else None
        img_size = inference_size(cfg, typed, described=described, path=cfg.ckpt)
        name = description.model["name"] + " " if description else ""
        on_host = host(detector.num_classes, img_size)
        return InferenceModel(
            net=InferenceNet(detector),
            nms=build_nms(cfg.eval, detector.num_classes, on_host=on_host, **nms_args),
            num_classes=detector.num_classes,
            class_names=description.class_names if description else None,
            category_ids=description.category_ids if description else None,
            summary=f"{name}{'EMA' if used_ema else 'raw'} weights",
            img_size=img_size,
            batch_size=int(cfg.eval.batch_size),
            data=description.data if description else None,
        )
    model = ExportedModel(cfg.ckpt)
    info = model.info
    if num_classes is not None and num_classes != info.num_classes:
        raise ExportedModelError(
            f"{cfg.ckpt} predicts {info.num_classes} classes, the data has {num_classes}"
        )
    img_size = inference_size(cfg, typed, fixed=info.img_size, path=cfg.ckpt)
    nms = exported_nms(info, cfg.ckpt, cfg.eval, typed, conf_thresh)
    if nms is None:
        nms = build_nms(
            cfg.eval, info.num_classes, on_host=host(info.num_classes, img_size), **nms_args
        )
    return InferenceModel(
        net=model,
        nms=nms,
        num_classes=info.num_classes,
        class_names=info.class_names,
        category_ids=info.category_ids,
        summary=(
            f"{fmt} export of {info.model} ({info.checkpoint}, "
            f"{'EMA' if info.ema_weights else 'raw'} weights, "
            f"{'NMS inside' if info.with_nms else 'NMS here'}), input {info.input_shape}"
        ),
        img_size=img_size,
        batch_size=info.batch_size,
        data=info.data,
    )


def score_labels(
    model_names: Sequence[str] | None,
    num_classes: int,
    data_names: Sequence[str],
    class_map: str,
    model: str,
    data: str,
) -> list[int] | None:
    """How a model of ``num_classes`` classes named ``model_names`` (None: not described)
    is scored on a dataset whose classes are ``data_names``: the dataset's class of each of
    the model's (``eval.class_map``, :func:`~msdet.models.description.class_label_map`),
    None when they are the same. ``model`` and ``data`` (the checkpoint, the annotation
    file) name the two in messages. Names that differ are a :class:`ClassMismatchError`
    naming both lists: an mAP under the wrong names is never reported. A model without
    class names (a checkpoint written before msdet described them, or converted without
    names) is scored in order, with a warning, when it has the dataset's class count."""
    if model_names is None or numbered_names(model_names):
        if num_classes != len(data_names):
            raise ClassMismatchError(
                f"{model} predicts {num_classes} classes, {data} has {len(data_names)}"
            )
        if class_map == "by_name":
            raise ClassMismatchError(
                f"eval.class_map=by_name: {model} carries no class names to map by (written "
                "before msdet described its checkpoints, or converted without "
                "--class-names); leave eval.class_map out to score its classes in order"
            )
        log.warning(
            "%s carries no class names: its %d classes are scored as %s's, in their order "
            "(%s); check that this is the dataset it was trained on",
            model,
            num_classes,
            data,
            ", ".join(str(n) for n in data_names[:10]) + (", ..." if len(data_names) > 10 else ""),
        )
        return None
    labels = class_label_map(model_names, data_names, class_map, model, data)
    if labels == list(range(len(data_names))):
        return None
    left_out = [str(n) for n, label in zip(model_names, labels) if label < 0]
    log.info(
        "eval.class_map=by_name: %s's classes are scored as %s's of the same name%s",
        model,
        data,
        f"; {len(left_out)} that it lacks are not scored ({', '.join(left_out[:10])}"
        f"{', ...' if len(left_out) > 10 else ''})"
        if left_out
        else "",
    )
    return labels
