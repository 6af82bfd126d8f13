"""Export a detector to MINDIR or ONNX and check the file: it is reloaded (MindSpore for
MINDIR, onnxruntime for ONNX) and run on sample images beside the Cell it came from, then
(export.py) scored on the val split beside the checkpoint (``engine.inference.export_check``).

The file carries its own description (``engine.inference.exported.ExportInfo``: class
names, input shape, NMS settings, output names), so eval.py and predict.py take it as they
take a checkpoint; ONNX outputs are named ``detections`` and ``num_detections`` (with NMS)
or ``predictions``.
"""

from __future__ import annotations

import json
import logging
import os
from typing import Any

import mindspore as ms
import numpy as np
from mindspore import nn

from msdet.engine.inference.exported import (
    INPUT_LAYOUT,
    METADATA_KEY,
    OUTPUTS_WITH_NMS,
    OUTPUTS_WITHOUT_NMS,
    ExportedModelError,
    ExportInfo,
    import_onnxruntime,
    inference_size,
    weights_format,
)
from msdet.engine.inference.onnx_graph import OnnxEditError, label_onnx_model
from msdet.engine.runtime.mindspore_compat import set_mindir_user_info

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


def export_network(
    net: nn.Cell,
    example: np.ndarray,
    path_stem: str,
    fmt: str = "MINDIR",
    info: ExportInfo | None = None,
) -> str:
    """Export ``net`` traced on ``example`` with ``mindspore.export`` (MINDIR) or
    ``mindspore.onnx.export`` (ONNX); returns the file path.

    ``info``: the description stored in the file (MINDIR ``user_info``, ONNX
    ``metadata_props``, key ``METADATA_KEY``); an ONNX file's outputs are renamed to its
    output names. Raises :class:`ExportError` with MindSpore's reason when the format cannot
    express the network (e.g. an operator without an ONNX mapping).
    """
    fmt = check_export_format(fmt)
    path = path_stem + FILE_SUFFIX[fmt]
    extra: dict[str, Any] = {}
    if info is not None and fmt == "MINDIR":

        def describe(model: Any) -> None:
            set_mindir_user_info(model, METADATA_KEY, info.to_json())

        extra["custom_func"] = describe
    try:
        if fmt == "ONNX":
            ms.onnx.export(net, ms.Tensor(example), file_name=path)
        else:
            ms.export(net, ms.Tensor(example), file_name=path_stem, file_format=fmt, **extra)
    except Exception as err:  # MindSpore raises RuntimeError/TypeError/ValueError here
        raise ExportError(f"{fmt} export failed: {first_line(err)}") from err
    if not os.path.isfile(path):
        raise ExportError(f"{fmt} export wrote no file {path}")
    if info is not None and fmt == "ONNX":
        try:
            label_onnx_model(path, list(info.outputs), {METADATA_KEY: info.to_json()})
        except OnnxEditError as err:
            raise ExportError(f"ONNX export could not be labelled: {err}") from err
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


# What "the same outputs" means for a file checked against its network: |file - network|
# <= ATOL + RTOL * |network|. Box coordinates are input pixels (hundreds), so another
# runtime's float32 rounding of them exceeds any absolute bound that suits the scores.
ATOL, RTOL = 1e-4, 1e-5


def _by_score(dets: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """NMS outputs with each image's detections in one order whatever the order of equal
    scores: by score (to 1e-4), then class and corners; padding rows zeroed."""
    out = np.zeros_like(dets)
    for i, n in enumerate(counts.reshape(-1).astype(int)):
        rows = dets[i, :n]
        keys = (
            rows[:, 3],
            rows[:, 2],
            rows[:, 1],
            rows[:, 0],
            rows[:, 5],
            -np.round(rows[:, 4], 4),
        )
        out[i, :n] = rows[np.lexsort(keys)]
    return out


def check_outputs(path: str, expected: list[np.ndarray], got: list[np.ndarray]) -> float:
    """The max absolute difference between a file's outputs and its network's, or
    :class:`ExportError` when any element is outside ``ATOL + RTOL * |expected|``.

    NMS outputs (detections, counts) are compared in :func:`_by_score`'s order: detections
    of equal score (e.g. the letterbox's padding, the same features everywhere) come out in
    either order from another runtime."""
    if len(expected) == 2 and expected[0].ndim == 3 and max_abs_diff(expected[1:], got[1:]) == 0:
        expected = [_by_score(expected[0], expected[1]), expected[1]]
        got = [_by_score(got[0], got[1]), got[1]]
    diff = max_abs_diff(expected, got)
    close = all(
        np.allclose(g.astype(np.float64), e.astype(np.float64), rtol=RTOL, atol=ATOL)
        for e, g in zip(expected, got)
    )
    if not np.isfinite(diff) or not close:
        raise ExportError(
            f"{path} computes something else than the network: max abs diff {diff:.3g} "
            f"(tolerance {ATOL:g} + {RTOL:g} x |value|)"
        )
    return diff


def verify_mindir(net: nn.Cell, path: str, example: np.ndarray) -> float:
    """Load ``path`` back (``mindspore.load`` + ``nn.GraphCell``), run it and ``net`` on
    ``example``; return the max absolute output difference (:func:`check_outputs`)."""
    graph = nn.GraphCell(ms.load(path))
    return check_outputs(path, run_cell(net, example), run_cell(graph, example))


def verify_onnx(net: nn.Cell, path: str, example: np.ndarray) -> float:
    """Run ``path`` with onnxruntime and ``net`` on ``example``; return the max absolute output
    difference (:func:`check_outputs`)."""
    onnxruntime = _onnxruntime_for_export()
    session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
    got = session.run(None, {session.get_inputs()[0].name: example})
    return check_outputs(path, run_cell(net, example), [np.asarray(g) for g in got])


def export_and_verify(
    net: nn.Cell,
    example: np.ndarray,
    path_stem: str,
    fmt: str,
    info: ExportInfo | None = None,
) -> dict[str, Any]:
    """Export ``net`` and check the file against the Cell; returns the report on it.

    ``info``: the description stored in the file (see :func:`export_network`).
    The report holds ``file``, ``format``, ``input_shape``, ``output_shapes``,
    ``max_abs_diff`` and,
    for a network with NMS, ``example_detections``: how many detections the compared
    outputs held (0 would make the check say nothing about the boxes).
    """
    path = export_network(net, example, path_stem, fmt, info)
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


def _onnxruntime_for_export() -> Any:
    """onnxruntime, which checks every ONNX file written, or :class:`ExportError` naming
    the package to install."""
    try:
        return import_onnxruntime("export.format=ONNX (the written file is checked by running it)")
    except ExportedModelError as err:
        raise ExportError(str(err)) from err


def first_line(err: BaseException) -> str:
    """The first non-empty line of an exception message (MindSpore's run to pages)."""
    for line in str(err).splitlines():
        if line.strip():
            return f"{type(err).__name__}: {line.strip()}"
    return type(err).__name__


class ExportFolderError(ValueError):
    """``export.out`` (or the checkpoint's folder) cannot take the exported file."""


def export_folder(cfg: Any) -> str:
    """Where export.py writes: ``export.out``, else the checkpoint's own folder. A folder
    that is a file or cannot be made or written is an :class:`ExportFolderError` saying so."""
    folder = cfg.export.out or os.path.dirname(os.path.abspath(cfg.ckpt))
    setting = f"export.out={folder}" if cfg.export.out else f"the checkpoint's folder {folder}"
    if os.path.exists(folder) and not os.path.isdir(folder):
        raise ExportFolderError(
            f"{setting} is a file: export.out names the folder that takes the exported file "
            "and its report; name a folder (it is created if missing)"
        )
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError as err:
        raise ExportFolderError(
            f"{setting} cannot be created ({err.strerror}): name another folder with export.out="
        ) from err
    if not os.access(folder, os.W_OK):
        raise ExportFolderError(f"cannot write into {folder}: name another folder with export.out=")
    return folder


def report_path(model_file: str) -> str:
    """The JSON report export.py writes beside an exported file: ``<file>.json``."""
    return model_file + ".json"


def export_checkpoint(cfg: Any, typed: dict[str, str], run_dir: str, rt: Any = None) -> dict:
    """export.py's work: the checkpoint ``cfg.ckpt`` built from its description, exported
    as ``cfg.export`` asks into :func:`export_folder` as
    ``<checkpoint stem>_<model>_<h>x<w>_b<batch>[_nms].<mindir|onnx>``, verified on sample
    images, scored beside the checkpoint on the val split (``export.val``; the evaluations'
    files go to ``run_dir``), and described in :func:`report_path`. Returns that report;
    :class:`ExportError` when the file cannot be written or computes something else."""
    from omegaconf import OmegaConf, open_dict

    from msdet.data.record import RecordedDataError, names_dataset, recorded_data_config
    from msdet.engine.inference.export_check import compare_on_val
    from msdet.models.inference import InferenceNet, build_nms
    from msdet.models.weights import load_described_detector

    fmt = check_export_format(cfg.export.format)
    if fmt == "ONNX":
        _onnxruntime_for_export()  # before the export's minutes, not after them
    if weights_format(cfg.ckpt) != "checkpoint":
        raise ExportError(
            f"ckpt={cfg.ckpt} is an exported {weights_format(cfg.ckpt)} file already: "
            "export.py exports a checkpoint (.ckpt)"
        )
    detector, used_ema, description = load_described_detector(cfg.ckpt, cfg.model, typed)
    recorded = description.data if description else None
    data_named = names_dataset(typed)
    if cfg.export.val and recorded is not None and not data_named:
        # Before the export's minutes: a recorded dataset that is gone stops here.
        try:
            data_cfg, line = recorded_data_config(recorded, cfg.data, typed, cfg.ckpt)
        except RecordedDataError as err:
            raise RecordedDataError(f"{err}; export.val=false exports without the check") from err
        with open_dict(cfg):
            cfg.data = data_cfg
        log.info("%s", line)
        data_named = True
    described = description.input_size if description else None
    h, w = inference_size(cfg, typed, described=described, path=cfg.ckpt)
    model_name = description.model["name"] if description else str(cfg.model.name)
    with_nms = bool(cfg.export.with_nms)
    net = InferenceNet(detector, build_nms(cfg.eval, detector.num_classes) if with_nms else None)
    batch = int(cfg.export.batch_size)
    ckpt_stem = os.path.splitext(os.path.basename(cfg.ckpt))[0]
    name = f"{ckpt_stem}_{model_name}_{h}x{w}_b{batch}" + ("_nms" if with_nms else "")
    stem = os.path.join(export_folder(cfg), name)
    nms_settings = OmegaConf.to_container(cfg.eval, resolve=True) if with_nms else None
    if nms_settings is not None:
        nms_settings = {
            k: v
            for k, v in nms_settings.items()
            if k not in ("img_size", "batch_size", "class_map")
        }
    info = ExportInfo(
        format=fmt,
        model=model_name,
        num_classes=detector.num_classes,
        class_names=description.class_names if description else None,
        category_ids=description.category_ids if description else None,
        input_shape=[batch, 3, h, w],
        with_nms=with_nms,
        nms=nms_settings,
        outputs=dict(OUTPUTS_WITH_NMS if with_nms else OUTPUTS_WITHOUT_NMS),
        checkpoint=os.path.basename(cfg.ckpt),
        ema_weights=used_ema,
        data=recorded,
    )
    try:
        report = export_and_verify(net, sample_images(batch, (h, w)), stem, fmt, info)
    except ExportError as err:
        hint = (
            " (the plain network may still export: add export.with_nms=false)" if with_nms else ""
        )
        raise ExportError(f"{err}{hint}") from err
    report.update(
        checkpoint=os.path.abspath(cfg.ckpt),
        ema_weights=used_ema,
        model=model_name,
        class_names=info.class_names,
        num_classes=detector.num_classes,
        with_nms=with_nms,
        nms=nms_settings,
        outputs=info.outputs,
        input=INPUT_LAYOUT,
    )
    if cfg.export.val:
        report["val"] = compare_on_val(
            cfg, detector, report["file"], typed, rt, run_dir, data_named=data_named
        )
    with open(report_path(report["file"]), "w", encoding="utf-8") as f:
        json.dump(report, f, indent=2)
    val = report.get("val") or {}
    if val.get("agrees") is False:
        raise ExportError(val["verdict"])
    return report
