"""Inference rows: each major module fed the input the original's module received, and
the whole network against the original in float64."""

from __future__ import annotations

import copy
from typing import Any

import numpy as np

from porting.report import ModuleDiff, diff, rounding_aware_diff

BACKBONE = [f"backbone.backbone.{m}" for m in ("stem", "dark2", "dark3", "dark4", "dark5")]
NECK = [
    f"backbone.{m}"
    for m in (
        "lateral_conv0",
        "C3_p4",
        "reduce_conv1",
        "C3_p3",
        "bu_conv2",
        "C3_n3",
        "bu_conv1",
        "C3_n4",
    )
]
HEAD_BRANCHES = ("stems", "cls_convs", "cls_preds", "reg_convs", "reg_preds", "obj_preds")


def major_modules(num_levels: int = 3) -> list[str]:
    """Names of the compared modules in execution order (PyTorch and msdet share them)."""
    head = [f"head.{b}.{k}" for k in range(num_levels) for b in HEAD_BRANCHES]
    return BACKBONE + NECK + head


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
    """Per-module differences, in execution order, plus the decoded head output.

    ``ms_model`` must hold the converted weights and be in inference mode.
    """
    import mindspore as ms

    names = major_modules(len(ms_model.head.stems))
    io = capture_torch_io(torch_model, x, names + ["backbone", "head"])
    cells = dict(ms_model.cells_and_names())
    rows = []
    for name in names:
        inp, out = io[name]
        ours = cells[name](ms.Tensor(to_numpy(inp))).asnumpy()
        rows.append(diff(name, ours, to_numpy(out), atol, rtol))
    # The decoded output: the head fed with the original's neck features.
    feats = tuple(ms.Tensor(to_numpy(f)) for f in io["backbone"][1])
    decoded = ms_model.head(feats).asnumpy()
    rows.append(diff("head (decoded output)", decoded, to_numpy(io["head"][1]), atol, rtol))
    return rows


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
