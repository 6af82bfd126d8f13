"""Comparison rows: one difference per module or check, the table, the JSON report.

A row compares one result of msdet with the PyTorch original. Results that went through
the whole network accumulate float32 rounding, so they are compared with the original run
in float64 (:func:`rounding_aware_diff`); gradients are compared as vectors
(:func:`grad_diff`).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

# A whole-network row may be this many times further from float64 than PyTorch float32 is:
# MindSpore's float32 lands 2.5-4x further (measured on nano: conv accumulation order and
# its less accurate sigmoid/exp), a mis-ported layer lands orders of magnitude further.
ROUNDING_FACTOR = 10.0


@dataclass
class ModuleDiff:
    """Difference of one module's output between msdet and the original."""

    module: str
    shape: tuple[int, ...]
    max_abs: float
    max_rel: float  # max |a - b| / max(|b|, 1): relative for large values, absolute near 0
    passed: bool
    note: str = ""  # what the row compares, when it is not the module output vs PyTorch fp32

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["shape"] = list(self.shape)
        return d


def diff(module: str, ours: np.ndarray, ref: np.ndarray, atol: float, rtol: float) -> ModuleDiff:
    """Compare two arrays; passes when |a - b| <= atol + rtol * |b| everywhere."""
    ours = np.asarray(ours, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    if ours.shape != ref.shape:
        return ModuleDiff(
            module,
            tuple(ref.shape),
            float("inf"),
            float("inf"),
            False,
            f"shape {tuple(ours.shape)} vs original {tuple(ref.shape)}",
        )
    err = np.abs(ours - ref)
    finite = np.isfinite(ours).all() and np.isfinite(ref).all()
    passed = bool(finite and (err <= atol + rtol * np.abs(ref)).all())
    max_abs = float(err.max()) if err.size else 0.0
    max_rel = float((err / np.maximum(np.abs(ref), 1.0)).max()) if err.size else 0.0
    return ModuleDiff(module, tuple(ref.shape), max_abs, max_rel, passed)


def rounding_aware_diff(
    module: str,
    ours: np.ndarray,
    ref32: np.ndarray,
    ref64: np.ndarray,
    atol: float,
    rtol: float,
    factor: float = ROUNDING_FACTOR,
) -> ModuleDiff:
    """Compare a result that went through the whole network with the original in float64.

    Passes when within ``atol``/``rtol`` of ``ref64``, or when its max relative error is at
    most ``factor`` times that of the original's own float32 result ``ref32``.
    """
    row = diff(module, ours, ref64, atol, rtol)
    own = diff(module, ref32, ref64, atol, rtol)
    if math.isfinite(row.max_rel):
        finite = bool(np.isfinite(np.asarray(ours, dtype=np.float64)).all())
        row.passed = row.passed or (finite and row.max_rel <= factor * own.max_rel)
        row.note = f"vs original fp64; original fp32 max rel {own.max_rel:.2e}"
    return row


def norm(a) -> float:
    return float(np.sqrt(np.square(np.asarray(a, dtype=np.float64)).sum()))


def grad_diff(module: str, ours: np.ndarray, ref: np.ndarray, grad_rtol: float) -> ModuleDiff:
    """Gradients compared as vectors: max rel is |g - g_orig| / |g_orig| (Euclidean norms);
    element-wise tolerances suit gradients badly (many entries are near 0)."""
    ours = np.asarray(ours, dtype=np.float64).ravel()
    ref = np.asarray(ref, dtype=np.float64).ravel()
    if ours.shape != ref.shape:
        return ModuleDiff(module, (ref.size,), float("inf"), float("inf"), False, "size differs")
    delta = norm(ours - ref)
    rel = delta / norm(ref) if norm(ref) > 0 else delta
    finite = bool(np.isfinite(ours).all())
    max_abs = float(np.abs(ours - ref).max()) if ref.size else 0.0
    return ModuleDiff(module, (ref.size,), max_abs, rel, finite and rel <= grad_rtol)


def first_failure(rows: list[ModuleDiff]) -> ModuleDiff | None:
    """The first module, in execution order, whose output diverges."""
    return next((r for r in rows if not r.passed), None)


def format_table(rows: list[ModuleDiff]) -> str:
    """A fixed-width table of the comparison."""
    lines = [f"{'module':<34} {'shape':<22} {'max abs':>10} {'max rel':>10}  result"]
    for r in rows:
        shape = "x".join(str(s) for s in r.shape) or "scalar"
        line = (
            f"{r.module:<34} {shape:<22} {r.max_abs:>10.2e} {r.max_rel:>10.2e}  "
            f"{'ok' if r.passed else 'FAIL'}"
        )
        lines.append(f"{line}  {r.note}" if r.note else line)
    return "\n".join(lines)


def json_safe(value: Any) -> Any:
    """inf/nan (a shape mismatch, a non-finite output) become null: strict JSON for CI."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, list):
        return [json_safe(v) for v in value]
    return value


def build_report(rows: list[ModuleDiff], **info: Any) -> dict[str, Any]:
    """The JSON document: settings, overall result, first failure and every row."""
    failed = first_failure(rows)
    return {
        **info,
        "passed": failed is None,
        "first_failure": failed.module if failed else None,
        "rows": [r.as_dict() for r in rows],
    }
