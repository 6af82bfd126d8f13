"""The deployable detector: YOLOX in inference mode plus optional in-graph NMS, and its export.

eval.py, predict.py and export.py share these pieces: :func:`load_detector` builds the
network from a checkpoint, :class:`InferenceNet` adds :class:`ops.nms.BatchedNMS`, and
:func:`export_network` / :func:`verify_mindir` write a MINDIR (or ONNX) file and check that
the file computes what the Cell computes.
"""

from __future__ import annotations

import logging
import os
from typing import Any

import mindspore as ms
import numpy as np
from mindspore import nn

from models.checkpoint import checkpoint_num_classes, load_weights, read_checkpoint
from models.description import Description, DescriptionError, contradictions, read_description
from models.yolox import YOLOX, build_model
from ops.nms import BatchedNMS, HostNMS

log = logging.getLogger(__name__)

EXPORT_FORMATS = ("MINDIR", "ONNX")
FILE_SUFFIX = {"MINDIR": ".mindir", "ONNX": ".onnx"}


class ExportError(RuntimeError):
    """The network could not be exported, or the exported file computes something else."""


def build_nms(
    eval_cfg: Any, num_classes: int, on_host: bool = False, conf_thresh: float | None = None
) -> BatchedNMS | HostNMS:
    """:class:`BatchedNMS` from the ``eval`` config group (conf_thresh, nms_iou, ...), or
    with ``on_host`` (``Runtime.host_nms``: the chip's NMSWithMask is float16 only) the
    same post-processing with the suppression on the host (:class:`ops.nms.HostNMS`).
    ``conf_thresh`` replaces ``eval.conf_thresh`` (predict.py: ``predict.conf``)."""
    kind = HostNMS if on_host else BatchedNMS
    return kind(
        num_classes,
        conf_thresh=float(eval_cfg.conf_thresh if conf_thresh is None else conf_thresh),
        iou_thresh=float(eval_cfg.nms_iou),
        pre_nms_topk=int(eval_cfg.pre_nms_topk),
        max_det=int(eval_cfg.max_det),
        class_agnostic=bool(eval_cfg.class_agnostic),
    )


def load_detector(
    model_cfg: Any, ckpt: str, num_classes: int | None = None, use_ema: bool = True
) -> tuple[YOLOX, bool]:
    """A YOLOX with a checkpoint's weights (EMA when present), in inference mode.

    The class count comes from ``model.num_classes``, else ``num_classes`` (the dataset),
    else the checkpoint's head. Returns the network and whether EMA weights were loaded.
    """
    if model_cfg.get("num_classes") is None and num_classes is None:
        num_classes = checkpoint_num_classes(ckpt)
    net = build_model(model_cfg, num_classes)
    used_ema = load_weights(net, ckpt, use_ema=use_ema)
    net.set_train(False)
    return net, used_ema


def load_described_detector(
    ckpt: str,
    fallback_model_cfg: Any,
    typed_overrides: dict[str, str] | None = None,
    num_classes: int | None = None,
    use_ema: bool = True,
) -> tuple[YOLOX, bool, Description | None]:
    """A checkpoint's detector built from its own description, in inference mode.

    ``typed_overrides``: the command line's ``key -> value`` as typed; a ``model`` override
    that contradicts the description is a :class:`DescriptionError` naming both (the
    composed ``model`` config cannot tell a default from a choice). A checkpoint without a
    description (written before msdet had them) is built from ``fallback_model_cfg`` and
    ``num_classes`` (else its head's class count), as before. Returns the network, whether
    EMA weights were loaded, and the description (None for such a checkpoint).
    """
    params = read_checkpoint(ckpt)
    description = read_description(params, ckpt)
    if description is None:
        net, used_ema = load_detector(fallback_model_cfg, ckpt, num_classes, use_ema)
        return net, used_ema, None
    problems = contradictions(description, typed_overrides or {})
    if problems:
        raise DescriptionError(f"{ckpt}: " + "; ".join(problems) + " (leave model=... out)")
    if num_classes is not None and num_classes != description.num_classes:
        raise DescriptionError(
            f"{ckpt} predicts {description.num_classes} classes, the data has {num_classes}"
        )
    net = build_model(description.model_config(), description.num_classes)
    used_ema = load_weights(net, ckpt, use_ema=use_ema, params=params)
    net.set_train(False)
    return net, used_ema, description


class InferenceNet(nn.Cell):
    """A detector in inference mode, optionally followed by NMS.

    ``construct(images [B, 3, H, W])`` returns ``(dets [B, max_det, 6], counts [B])`` with
    ``nms`` (see :class:`ops.nms.BatchedNMS`), else the decoded predictions
    ``[B, A, 5 + C]`` (cx, cy, w, h, objectness, class probabilities).
    """

    def __init__(self, detector: nn.Cell, nms: BatchedNMS | None = None):
        # No prefix: wrapping must not rename the detector's parameters ("detector.")
        # so that weights can still be loaded into it by name afterwards.
        super().__init__(auto_prefix=False)
        self.detector = detector
        self.with_nms = nms is not None
        # A Cell in both cases keeps the attribute's type fixed for the graph compiler;
        # ``with_nms`` is a constant there, so the unused branch is compiled away.
        self.nms = nms if nms is not None else nn.Identity()
        self.set_train(False)

    def construct(self, images):
        preds = self.detector(images)
        if self.with_nms:
            return self.nms(preds)
        return preds


def check_export_format(fmt: str) -> str:
    """The upper-cased ``export.format``, or ``ValueError`` naming the supported ones."""
    if str(fmt).upper() not in EXPORT_FORMATS:
        raise ValueError(f"export.format must be one of {EXPORT_FORMATS}, got {fmt!r}")
    return str(fmt).upper()


def sample_images(batch_size: int, img_hw: tuple[int, int], seed: int = 0) -> np.ndarray:
    """Random BGR 0-255 images ``[B, 3, H, W]`` float32: an export's example input."""
    rng = np.random.default_rng(seed)
    return rng.uniform(0, 255, (batch_size, 3, img_hw[0], img_hw[1])).astype(np.float32)


def export_network(net: nn.Cell, example: np.ndarray, path_stem: str, fmt: str = "MINDIR") -> str:
    """Export ``net`` traced on ``example`` with ``mindspore.export``; returns the file path.

    Raises :class:`ExportError` with MindSpore's reason when the format cannot express
    the network (e.g. an operator without an ONNX mapping).
    """
    fmt = check_export_format(fmt)
    path = path_stem + FILE_SUFFIX[fmt]
    try:
        ms.export(net, ms.Tensor(example), file_name=path_stem, file_format=fmt)
    except Exception as err:  # MindSpore raises RuntimeError/TypeError/ValueError here
        raise ExportError(f"{fmt} export failed: {first_line(err)}") from err
    if not os.path.isfile(path):
        raise ExportError(f"{fmt} export wrote no file {path}")
    return path


def run_cell(net: nn.Cell, example: np.ndarray) -> list[np.ndarray]:
    """The outputs of ``net`` (a Cell or GraphCell) on ``example`` as a list of arrays."""
    out = net(ms.Tensor(example))
    return [t.asnumpy() for t in (out if isinstance(out, (tuple, list)) else (out,))]


def max_abs_diff(a: list[np.ndarray], b: list[np.ndarray]) -> float:
    """Largest absolute difference between two lists of same-shaped arrays."""
    if len(a) != len(b) or any(x.shape != y.shape for x, y in zip(a, b)):
        raise ExportError(f"output shapes differ: {[x.shape for x in a]} vs {[y.shape for y in b]}")
    return max(
        float(np.abs(x.astype(np.float64) - y.astype(np.float64)).max(initial=0.0))
        for x, y in zip(a, b)
    )


def verify_mindir(net: nn.Cell, path: str, example: np.ndarray, atol: float = 1e-4) -> float:
    """Load ``path`` back (``mindspore.load`` + ``nn.GraphCell``), run it and ``net`` on
    ``example``; return the max absolute output difference, raising :class:`ExportError`
    when it exceeds ``atol``.
    """
    graph = nn.GraphCell(ms.load(path))
    expected = run_cell(net, example)
    got = run_cell(graph, example)
    diff = max_abs_diff(expected, got)
    if not np.isfinite(diff) or diff > atol:
        raise ExportError(
            f"{path} computes something else than the network: max abs diff {diff:.3g} > {atol}"
        )
    return diff


def verify_onnx(net: nn.Cell, path: str, example: np.ndarray, atol: float = 1e-4) -> float | None:
    """Run ``path`` with onnxruntime and ``net`` on ``example``; return the max absolute output
    difference (raising :class:`ExportError` above ``atol``), or None when onnxruntime is
    not installed (it is not a msdet requirement).
    """
    try:
        import onnxruntime
    except ImportError:
        log.warning("onnxruntime is not installed: %s was written but not verified", path)
        return None
    session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
    got = session.run(None, {session.get_inputs()[0].name: example})
    diff = max_abs_diff(run_cell(net, example), [np.asarray(g) for g in got])
    if not np.isfinite(diff) or diff > atol:
        raise ExportError(
            f"{path} computes something else than the network: max abs diff {diff:.3g} > {atol}"
        )
    return diff


def export_and_verify(
    net: nn.Cell, example: np.ndarray, path_stem: str, fmt: str
) -> dict[str, Any]:
    """Export ``net`` and check the file against the Cell; returns a report for export.json.

    The report holds ``file``, ``format``, ``input_shape``, ``output_shapes``,
    ``max_abs_diff`` (None: an ONNX file that could not be checked without onnxruntime) and,
    for a network with NMS, ``example_detections``: how many detections the compared
    outputs held (0 would make the check say nothing about the boxes).
    """
    path = export_network(net, example, path_stem, fmt)
    if fmt.upper() == "MINDIR":
        diff = verify_mindir(net, path, example)
    else:
        diff = verify_onnx(net, path, example)
    outputs = run_cell(net, example)
    report = {
        "file": path,
        "format": fmt.upper(),
        "input_shape": list(example.shape),
        "output_shapes": [list(o.shape) for o in outputs],
        "max_abs_diff": diff,
    }
    if len(outputs) == 2:  # (dets, counts)
        report["example_detections"] = int(outputs[1].sum())
    return report


def first_line(err: BaseException) -> str:
    """The first non-empty line of an exception message (MindSpore's run to pages)."""
    for line in str(err).splitlines():
        if line.strip():
            return f"{type(err).__name__}: {line.strip()}"
    return type(err).__name__
