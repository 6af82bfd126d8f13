"""Export a detector to MINDIR or ONNX and check the file: it is reloaded (MindSpore for
MINDIR, onnxruntime for ONNX) and run on sample images beside the Cell it came from.
"""

from __future__ import annotations

import json
import logging
import os
from typing import Any

import mindspore as ms
import numpy as np
from mindspore import nn

log = logging.getLogger("export")

EXPORT_FORMATS = ("MINDIR", "ONNX")
FILE_SUFFIX = {"MINDIR": ".mindir", "ONNX": ".onnx"}


class ExportError(RuntimeError):
    """The network could not be exported, or the exported file computes something else."""


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


def export_checkpoint(cfg: Any, typed: dict[str, str], out_dir: str) -> dict:
    """export.py's work: the checkpoint ``cfg.ckpt`` built from its description, exported
    as ``cfg.export`` asks into ``out_dir``, verified, and described in ``export.json``
    beside the file. Returns that report; :class:`ExportError` when the file cannot be
    written or computes something else."""
    from omegaconf import OmegaConf

    from msdet.engine.cli import apply_described_size
    from msdet.models.inference import InferenceNet, build_nms
    from msdet.models.weights import load_described_detector

    fmt = check_export_format(cfg.export.format)
    detector, used_ema, description = load_described_detector(cfg.ckpt, cfg.model, typed)
    apply_described_size(cfg, description, typed)
    model_name = description.model["name"] if description else str(cfg.model.name)
    with_nms = bool(cfg.export.with_nms)
    net = InferenceNet(detector, build_nms(cfg.eval, detector.num_classes) if with_nms else None)
    h, w = (int(v) for v in cfg.eval.img_size)
    batch = int(cfg.export.batch_size)
    stem = os.path.join(out_dir, f"{model_name}_{h}x{w}_b{batch}" + ("_nms" if with_nms else ""))
    try:
        report = export_and_verify(net, sample_images(batch, (h, w)), stem, fmt)
    except ExportError as err:
        hint = (
            " (the plain network may still export: add export.with_nms=false)" if with_nms else ""
        )
        raise ExportError(f"{err}{hint}") from err
    report.update(
        checkpoint=os.path.abspath(cfg.ckpt),
        ema_weights=used_ema,
        model=model_name,
        class_names=description.class_names if description else None,
        num_classes=detector.num_classes,
        with_nms=with_nms,
        nms=OmegaConf.to_container(cfg.eval, resolve=True) if with_nms else None,
        outputs=(
            "dets [B, max_det, 6] (x1, y1, x2, y2 in input pixels, score, class index), counts [B]"
            if with_nms
            else "predictions [B, A, 5 + C] (cx, cy, w, h in input pixels, objectness, class probs)"
        ),
        input="BGR 0-255 float32 [B, 3, H, W], letterboxed (image top-left, pad 114)",
    )
    with open(os.path.join(out_dir, "export.json"), "w", encoding="utf-8") as f:
        json.dump(report, f, indent=2)
    return report
