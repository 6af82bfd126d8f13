"""Module-by-module comparison of msdet's YOLOX with the PyTorch original.

Each major module (stem, dark2..dark5, every neck block, every head branch per level,
the decoded output) is run on *the same input* in both frameworks: the input PyTorch's
module received is fed to the matching MindSpore cell. Differences then measure that
module alone, so a wrong weight mapping or a mis-ported layer shows up exactly where it
is, instead of being smeared over everything downstream by float32 rounding (which grows
through a deep network: PyTorch's own float32 output differs from its float64 output by
~1e-3 on a random-init YOLOX-nano).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

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


@dataclass
class ModuleDiff:
    """Difference of one module's output between msdet and the original."""

    module: str
    shape: tuple[int, ...]
    max_abs: float
    max_rel: float  # max |a - b| / max(|b|, 1): relative for large values, absolute near 0
    passed: bool

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["shape"] = list(self.shape)
        return d


def diff(module: str, ours: np.ndarray, ref: np.ndarray, atol: float, rtol: float) -> ModuleDiff:
    """Compare two arrays; passes when |a - b| <= atol + rtol * |b| everywhere."""
    ours = np.asarray(ours, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    if ours.shape != ref.shape:
        return ModuleDiff(module, tuple(ref.shape), float("inf"), float("inf"), False)
    err = np.abs(ours - ref)
    finite = np.isfinite(ours).all() and np.isfinite(ref).all()
    passed = bool(finite and (err <= atol + rtol * np.abs(ref)).all())
    max_abs = float(err.max()) if err.size else 0.0
    max_rel = float((err / np.maximum(np.abs(ref), 1.0)).max()) if err.size else 0.0
    return ModuleDiff(module, tuple(ref.shape), max_abs, max_rel, passed)


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


def _numpy(t) -> np.ndarray:
    return t.detach().cpu().numpy()


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
        ours = cells[name](ms.Tensor(_numpy(inp))).asnumpy()
        rows.append(diff(name, ours, _numpy(out), atol, rtol))
    # The decoded output: the head fed with the original's neck features.
    feats = tuple(ms.Tensor(_numpy(f)) for f in io["backbone"][1])
    decoded = ms_model.head(feats).asnumpy()
    rows.append(diff("head (decoded output)", decoded, _numpy(io["head"][1]), atol, rtol))
    return rows


def first_failure(rows: list[ModuleDiff]) -> ModuleDiff | None:
    """The first module, in execution order, whose output diverges."""
    return next((r for r in rows if not r.passed), None)


def format_table(rows: list[ModuleDiff]) -> str:
    """A fixed-width table of the comparison."""
    lines = [f"{'module':<34} {'shape':<22} {'max abs':>10} {'max rel':>10}  result"]
    for r in rows:
        shape = "x".join(str(s) for s in r.shape)
        lines.append(
            f"{r.module:<34} {shape:<22} {r.max_abs:>10.2e} {r.max_rel:>10.2e}  "
            f"{'ok' if r.passed else 'FAIL'}"
        )
    return "\n".join(lines)
