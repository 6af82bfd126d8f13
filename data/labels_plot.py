"""``labels.png`` of a dataset split: boxes per class, box centres, box sizes on the network
input against the strides, and the longer side against the small-object limit.

data.check draws it for the split it checked; :func:`write_labels_plot` draws it for a
training run's train split, from its annotations alone, into the run folder.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from msdet.data.coco import CocoSource
from msdet.data.summary import SMALL_OBJECT_PX, STRIDES, TrainingBoxes, class_counts, training_boxes

LABELS_FILE = "labels.png"


@dataclass
class SourceLabels:
    """A split's labels as :func:`plot_labels` reads them, from a :class:`CocoSource`."""

    split: str
    classes: Mapping[str, int]
    class_names: Sequence[str]
    boxes: TrainingBoxes


def write_labels_plot(source: CocoSource, img_size: Sequence[int], run_dir: str) -> str:
    """``<run_dir>/labels.png`` of ``source`` (a training run's train split), its boxes
    sized on the ``img_size`` ``(h, w)`` input training letterboxes to; returns the path.
    Reads annotations only: no image is decoded."""
    boxes = training_boxes(source, img_size)
    labels = SourceLabels("train", class_counts(source, boxes), list(source.class_names), boxes)
    path = os.path.join(run_dir, LABELS_FILE)
    plot_labels(labels, img_size, path)
    return path


class SplitLabels(Protocol):
    """What the plot reads of a split's check (``data.check.SplitCheck`` has it)."""

    split: str
    classes: Mapping[str, int]  # boxes per class name
    class_names: Sequence[str]
    boxes: TrainingBoxes


def plot_labels(check: SplitLabels, img_size: Sequence[int], path: str) -> None:
    """``labels.png``: boxes per class, box centres, box width x height on the input with
    the strides marked, and the longer-side histogram with the small-object limit."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.colors import LogNorm
    from matplotlib.figure import Figure

    boxes, names = check.boxes, check.class_names
    fig = Figure(figsize=(12, 9), dpi=100)
    FigureCanvasAgg(fig)
    (a, b), (c, d) = fig.subplots(2, 2)
    counts = list(check.classes.values())
    a.bar(range(len(counts)), counts, color="tab:blue")
    if len(names) <= 30:
        a.set_xticks(range(len(names)), names, rotation=90, fontsize=8)
    a.set_ylabel("boxes")
    a.set_title(f"{check.split}: {sum(counts)} training boxes, {len(names)} classes")

    # Empty bins white (cmin), a single box already clearly coloured (vmin below 1).
    if len(boxes.labels):
        b.hist2d(boxes.centres[:, 0], boxes.centres[:, 1], bins=50, range=[[0, 1], [0, 1]],
                 cmap="Blues", cmin=1, vmin=0)  # fmt: skip
    b.set_xlim(0, 1)
    b.set_ylim(1, 0)  # image coordinates: y down
    b.set_xlabel("x (fraction of width)")
    b.set_ylabel("y (fraction of height)")
    b.set_title("box centres")

    h, w = (int(v) for v in img_size)
    top = max(h, w)
    edges = np.geomspace(1, top, 40)
    if len(boxes.labels):
        wh = np.clip(boxes.wh, 1, top)
        c.hist2d(wh[:, 0], wh[:, 1], bins=[edges, edges], cmap="Blues", cmin=1,
                 norm=LogNorm(vmin=0.3))  # fmt: skip
    c.set_xscale("log")
    c.set_yscale("log")
    c.set_xlim(1, top)
    c.set_ylim(1, top)
    for stride in STRIDES:
        c.axvline(stride, color="grey", linestyle=":", linewidth=1)
        c.axhline(stride, color="grey", linestyle=":", linewidth=1)
    c.set_xlabel(f"width (px on the {h}x{w} input)")
    c.set_ylabel("height (px)")
    c.set_title(f"box sizes; dotted: strides {', '.join(map(str, STRIDES))}")

    side = boxes.wh.max(1) if len(boxes.wh) else np.zeros(0)
    d.hist(np.clip(side, 1, top), bins=edges, color="tab:blue")
    d.set_xscale("log")
    d.axvline(SMALL_OBJECT_PX, color="tab:red", linestyle="--",
              label=f"{SMALL_OBJECT_PX} px: {int((side < SMALL_OBJECT_PX).sum())} boxes under")  # fmt: skip
    d.axvline(STRIDES[0], color="grey", linestyle=":",
              label=f"stride {STRIDES[0]}: {int((side < STRIDES[0]).sum())} under")  # fmt: skip
    d.set_xlabel("longer side (px on the input)")
    d.set_ylabel("boxes")
    d.set_title("box size against the small-object limit")
    d.legend(fontsize=8)
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path)
