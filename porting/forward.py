"""Inference rows: each major module fed the input the original's module received, and
the whole network against the original in float64."""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from msdet.porting.report import ModuleDiff, diff, rounding_aware_diff

BACKBONE = [f"backbone.backbone.{m}" for m in ("stem", "dark2", "dark3", "dark4", "dark5")]
HEAD_BRANCHES = ("stems", "cls_convs", "cls_preds", "reg_convs", "reg_preds", "obj_preds")


def major_modules(neck_blocks: Sequence[str] | None = None, num_levels: int = 3) -> list[str]:
    """Names of the compared modules in execution order (PyTorch and msdet share them).

    ``neck_blocks``: the neck's blocks, ``YOLOPAFPN.BLOCKS`` (nano ... x, the default) or
    ``YOLOFPN.BLOCKS`` (Darknet53); both backbones have stem and dark2..dark5.
    """
    if neck_blocks is None:
        # Imported here: the comparison tool imports this module before it prepares the
        # process for MindSpore (models import MindSpore).
        from msdet.models.neck import YOLOPAFPN

        neck_blocks = YOLOPAFPN.BLOCKS
    neck = [f"backbone.{m}" for m in neck_blocks]
    head = [f"head.{b}.{k}" for k in range(num_levels) for b in HEAD_BRANCHES]
    return BACKBONE + neck + head


def network_modules(ms_model) -> list[str]:
    """:func:`major_modules` of a msdet network (its neck's blocks, its head's levels)."""
    return major_modules(ms_model.backbone.BLOCKS, len(ms_model.head.stems))


def to_numpy(t) -> np.ndarray:
    return t.detach().cpu().numpy()


def capture_torch_io(torch_model, x: np.ndarray, names: list[str]) -> dict[str, tuple[Any, Any]]:
    """Run the PyTorch model once; record (input, output) of each named module."""
    import torch

    modules = dict(torch_model.named_modules())
    missing = [n for n in names if n not in modules]
    if missing:
        raise KeyError(f"modules not in the PyTorch model: {missing}")
    seen: dict[str, tuple[Any, Any]] = {}

    def recorder(name: str):
        def hook(module, inputs, output) -> None:  # returning a value would replace output
            seen.setdefault(name, (inputs[0], output))

        return hook

    hooks = [modules[n].register_forward_hook(recorder(n)) for n in names]
    try:
        torch_model.eval()
        with torch.no_grad():
            final = torch_model(torch.from_numpy(x))
    finally:
        for h in hooks:
            h.remove()
    seen["output"] = (None, final)
    return seen


def compare_modules(
    torch_model, ms_model, x: np.ndarray, atol: float = 1e-4, rtol: float = 1e-4
) -> list[ModuleDiff]:
    """Per-module differences (:func:`module_row`), in execution order, plus the decoded
    head output. ``ms_model`` must hold the converted weights and be in inference mode.
    """
    import mindspore as ms

    names = network_modules(ms_model)
    io = capture_torch_io(torch_model, x, names + ["backbone", "head"])
    cells = dict(ms_model.cells_and_names())
    modules = dict(torch_model.named_modules())
    rows = []
    for name in names:
        inp, out = io[name]
        ours = cells[name](ms.Tensor(to_numpy(inp))).asnumpy()
        rows.append(module_row(name, ours, modules[name], inp, out, atol, rtol))
    # The decoded output: the head fed with the original's neck features.
    feats = tuple(ms.Tensor(to_numpy(f)) for f in io["backbone"][1])
    decoded = ms_model.head(feats).asnumpy()
    rows.append(diff("head (decoded output)", decoded, to_numpy(io["head"][1]), atol, rtol))
    return rows


def module_row(
    name: str, ours: np.ndarray, module, inp, out, atol: float, rtol: float
) -> ModuleDiff:
    """One module's row: msdet's output ``ours`` against the original ``module``'s output
    ``out`` on the same input ``inp`` (torch tensors).

    It passes within ``atol``/``rtol`` of the original's float32 output. One that does not
    is judged again against the module run in float64, as whole-network rows are
    (:func:`porting.report.rounding_aware_diff`): a deep module can be that far from the
    original's float32 through the original's own rounding. Darknet53's dark5 (14
    convolutions, up to 1024 channels) is, on a random network at 64-96 px (measured:
    PyTorch float32 4.3e-4 from float64 at 64 px, msdet 9.2e-5).
    """
    row = diff(name, ours, to_numpy(out), atol, rtol)
    if not row.passed and math.isfinite(row.max_rel):
        ref64 = module_float64(module, inp)
        row = rounding_aware_diff(name, ours, to_numpy(out), ref64, atol, rtol)
    return row


def module_float64(module, inp) -> np.ndarray:
    """A module of the original run in float64 (eval mode) on its recorded input."""
    import torch

    with torch.no_grad():
        return to_numpy(copy.deepcopy(module).double().eval()(inp.double()))


def torch_float64(torch_model):
    """A float64 copy of the original: the rounding-free reference."""
    return copy.deepcopy(torch_model).double()


def compare_network_output(
    torch_model, ms_model, x: np.ndarray, atol: float, rtol: float, label: str
) -> tuple[ModuleDiff, np.ndarray]:
    """The whole network (inference mode, current MindSpore mode) against the original.

    Returns the row and the original's float32 decoded predictions (for the NMS row).
    """
    import mindspore as ms
    import torch

    ours = ms_model(ms.Tensor(x)).asnumpy()
    torch_model.eval()
    with torch.no_grad():
        ref32 = to_numpy(torch_model(torch.from_numpy(x)))
        ref64 = to_numpy(torch_float64(torch_model).eval()(torch.from_numpy(x).double()))
    return rounding_aware_diff(label, ours, ref32, ref64, atol, rtol), ref32
