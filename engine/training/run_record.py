"""The run record: what a training run writes about each epoch, and how it is read back.

``results.csv`` holds one row per completed epoch (:data:`COLUMNS` first, in that order;
then, with mixed precision, ``loss_scale`` and ``skipped_steps``), ``results.png`` plots it.
The ``val_loss_*`` columns hold the loss on the val split where an epoch was evaluated by
one process (NaN elsewhere). The
trainer writes both after every epoch on rank 0; resuming reads the rows back; the
benchmarks and tests read them with :func:`read_results` instead of parsing the file
themselves. A row is a plain dict of numbers (``epoch`` an int, the rest floats; NaN where
an epoch was not evaluated).
"""

from __future__ import annotations

import csv
import math
import os
import shutil
from collections.abc import Sequence
from typing import Any

# The loss's terms, in the order the training step returns them (engine.training.step_stats
# sums them in this order). Defined here, in a module without MindSpore: train.py reads the
# run record before the process environment is set, and MindSpore must load after it.
LOSS_TERMS = ("total", "iou", "obj", "cls", "l1")
# The loss on the val split (engine.evaluation.val_loss): without the L1 term.
VAL_LOSS_TERMS = ("total", "iou", "obj", "cls")
RESULTS_CSV = "results.csv"
RESULTS_PNG = "results.png"
COLUMNS = (
    "epoch",
    *(f"loss_{k}" for k in LOSS_TERMS),
    "num_fg",
    "lr",
    "images_per_s",
    "epoch_s",
    "mAP",
    "mAP50",
    *(f"val_loss_{k}" for k in VAL_LOSS_TERMS),
)


def results_path(run_dir: str) -> str:
    """``<run_dir>/results.csv``."""
    return os.path.join(run_dir, RESULTS_CSV)


def read_results(run_dir: str) -> list[dict[str, Any]]:
    """The rows of ``<run_dir>/results.csv`` (``epoch`` as int, the rest float); [] when
    the run has none yet."""
    path = results_path(run_dir)
    if not os.path.isfile(path):
        return []
    with open(path, encoding="utf-8") as f:
        return [{k: _number(k, v) for k, v in row.items()} for row in csv.DictReader(f)]


def _number(key: str, text: str | None) -> float | int:
    if key == "epoch":
        return int(float(text))
    return float(text) if text not in (None, "") else math.nan


def write_results(rows: Sequence[dict[str, Any]], run_dir: str) -> None:
    """Write every row to ``results.csv`` (atomically) and plot them into ``results.png``.

    The header is the union of the rows' keys, :data:`COLUMNS` first: rows read back from
    a run written before a column existed get an empty cell there.
    """
    if not rows:
        return
    header = list(COLUMNS) + sorted({k for r in rows for k in r} - set(COLUMNS))
    path = results_path(run_dir)
    tmp = path + ".partial"
    with open(tmp, "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=header, restval="")
        writer.writeheader()
        writer.writerows(rows)
    os.replace(tmp, path)
    plot_results(rows, os.path.join(run_dir, RESULTS_PNG))


def plot_results(rows: Sequence[dict[str, Any]], path: str) -> None:
    """:func:`results_figure` of ``rows`` saved as ``path``."""
    import matplotlib.pyplot as plt

    fig = results_figure(rows)
    fig.savefig(path, dpi=80)
    plt.close(fig)


# The shading of the epochs without mosaic/mixup, where YOLOX adds the L1 term.
NO_AUG_LABEL = "mosaic/mixup off, L1 term on"
VAL_LABEL = "val split (no L1 term)"
# A loss panel's y axis ends at this multiple of the training loss's 95th percentile when
# val losses lie above it: an evaluation before BatchNorm settles scores val losses in the
# hundreds or thousands (docs/training.md), which would flatten the training curve.
CLIP_PERCENTILE = 95
CLIP_FACTOR = 2.0


def clipped_top(train: Sequence[float], val: Sequence[float]) -> float | None:
    """The top of a loss panel's y axis when some of the ``val`` losses would flatten the
    ``train`` curve (above :data:`CLIP_FACTOR` x the training losses' 95th percentile, or
    above every finite training loss when there is none); None when every value fits."""
    import numpy as np

    finite = [v for v in train if math.isfinite(v)]
    if not finite:
        return None
    top = CLIP_FACTOR * float(np.percentile(finite, CLIP_PERCENTILE))
    top = max(top, max(finite))
    return top if any(v > top for v in val) else None


def _clip_val(ax: Any, values: list[float], val: list[tuple[int, float]], top: float) -> None:
    """Cut the panel's y axis at ``top`` (``values``: every value it shows), mark the val
    losses above it at the top edge, and say so under the panel."""
    above = [(e, v) for e, v in val if v > top]
    low = min(v for v in values if v <= top)
    ax.set_ylim(low - 0.05 * (top - low), top)
    ax.plot([e for e, _ in above], [top] * len(above), linestyle="none", marker="^",
            color="tab:orange", clip_on=False)  # fmt: skip
    shown = ", ".join(str(e) for e, _ in above[:4]) + (", ..." if len(above) > 4 else "")
    ax.set_xlabel(
        f"epoch\nval above the axis (^) at epoch {shown}, max {max(v for _, v in above):,.0f}:\n"
        f"axis cut at {CLIP_FACTOR:g}x the training loss's {CLIP_PERCENTILE}th percentile",
        fontsize=7,
    )


def no_aug_start(rows: Sequence[dict[str, Any]]) -> int | None:
    """The first epoch of ``rows`` trained with the L1 term (YOLOX adds it, with mosaic
    and mixup off, in its last ``train.no_aug_epochs`` + 1 epochs); None before that."""
    for row in rows:
        if row.get("loss_l1", 0.0) > 0.0:
            return int(row["epoch"])
    return None


def results_figure(rows: Sequence[dict[str, Any]]) -> Any:
    """Loss terms (of the training batches and, where evaluated, of the val split), val mAP
    and the learning rate per epoch, one panel each. The epochs trained with the L1 term are
    shaded in the loss panels and the legend says so: the training loss jumps by that term
    there (while the other terms usually drop on the unaugmented images); the val loss
    leaves it out. Val losses far above the training losses (:func:`clipped_top`) are
    marked at the top edge of a cut axis, which the panel says."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    epochs = [r["epoch"] for r in rows]
    panels = [f"loss_{k}" for k in LOSS_TERMS] + ["mAP", "mAP50", "lr"]
    titles = {
        "loss_total": "loss_total",
        "loss_l1": "loss_l1 (YOLOX: no-aug epochs only)",
        "mAP": "val mAP",
        "mAP50": "val mAP50",
    }
    start = no_aug_start(rows)
    fig, axes = plt.subplots(2, 4, figsize=(14, 6))
    for ax, key in zip(axes.flat, panels):
        values = [r.get(key, math.nan) for r in rows]
        pts = [(e, v) for e, v in zip(epochs, values) if not math.isnan(v)]
        if pts:
            ax.plot(*zip(*pts), marker="o", markersize=3, label="training batches")
        val_key = "val_" + key
        val = [(r["epoch"], r[val_key]) for r in rows if not math.isnan(r.get(val_key, math.nan))]
        if val:
            ax.plot(*zip(*val), marker="s", markersize=3, label=VAL_LABEL)
            top = clipped_top([v for _, v in pts], [v for _, v in val])
            if top is not None:
                _clip_val(ax, [v for _, v in pts + val], val, top)
        if start is not None and key.startswith("loss_"):
            ax.axvspan(
                start - 0.5, max(epochs) + 0.5, color="tab:orange", alpha=0.15, label=NO_AUG_LABEL
            )
        ax.set_title(titles.get(key, key))
        if not ax.get_xlabel():  # a cut axis says so in its label
            ax.set_xlabel("epoch")
        ax.grid(alpha=0.3)
    labels = axes.flat[0].get_legend_handles_labels()[1]
    if len(labels) > 1:  # the val split's line or the shading beside the training batches
        axes.flat[0].legend(loc="best", fontsize=8)
    fig.tight_layout()
    return fig


def carry_history(ckpt_path: str, run_dir: str) -> None:
    """Resuming another run's checkpoint: bring its results.csv into this run folder."""
    old_dir = os.path.dirname(os.path.dirname(os.path.abspath(ckpt_path)))
    src, dst = os.path.join(old_dir, RESULTS_CSV), os.path.join(run_dir, RESULTS_CSV)
    if os.path.abspath(old_dir) != os.path.abspath(run_dir) and os.path.isfile(src):
        shutil.copy(src, dst)
