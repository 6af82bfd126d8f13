"""What a split's annotations hold, read without decoding an image: the boxes training
sees (sizes on the network input), the class counts, and the few lines the trainer logs at
the start of a run (:func:`summarise_annotations`; ``python -m msdet.data.check`` is the whole
check).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from msdet.data.coco import CocoSource

STRIDES = (8, 16, 32)
# Objects under this many pixels (longer side) on the network input are hard to classify:
# the lesson of the shapes set (BENCHMARKS.md "The default run").
SMALL_OBJECT_PX = 16
# Box size bins (longer side on the input, px) for the reports.
SIZE_BINS = (0, 8, 16, 32, 64, 128, 256, math.inf)


@dataclass
class TrainingBoxes:
    """The boxes training uses (valid, non-crowd, clipped), sized on the network input."""

    labels: np.ndarray  # [N] training class index
    wh: np.ndarray  # [N, 2] width, height in input pixels (after the letterbox scale)
    centres: np.ndarray  # [N, 2] x, y as fractions of the image
    image_index: np.ndarray  # [N] source position of each box's image
    images_without_boxes: list[int]  # source positions

    def size_summary(self) -> dict[str, Any]:
        """Counts of boxes by longer side on the input: median, under stride 8, under
        :data:`SMALL_OBJECT_PX`, and per :data:`SIZE_BINS` bin."""
        side = self.wh.max(1) if len(self.wh) else np.zeros(0)
        bins = {}
        for lo, hi in zip(SIZE_BINS[:-1], SIZE_BINS[1:]):
            name = f"{lo:g}-{hi:g}" if math.isfinite(hi) else f">={lo:g}"
            bins[name] = int(((side >= lo) & (side < hi)).sum())
        return {
            "measure": "longer box side in pixels on the letterboxed network input",
            "median": float(np.median(side)) if len(side) else None,
            "under_stride_8": int((side < STRIDES[0]).sum()),
            f"under_{SMALL_OBJECT_PX}px": int((side < SMALL_OBJECT_PX).sum()),
            "histogram": bins,
        }


def training_boxes(source: CocoSource, img_size: Sequence[int]) -> TrainingBoxes:
    """The training boxes of ``source`` (its annotations, no image decoded) scaled as the
    letterbox to ``img_size`` ``(h, w)`` scales each image."""
    in_h, in_w = (int(v) for v in img_size)
    labels, wh, centres, index, empty = [], [], [], [], []
    for i in range(len(source)):
        info = source.image_info(i)
        boxes, lab = source.annotations(i)
        if not len(lab):
            empty.append(i)
            continue
        scale = min(in_h / info["height"], in_w / info["width"])
        labels.append(lab)
        index.append(np.full(len(lab), i, dtype=np.int64))
        wh.append((boxes[:, 2:] - boxes[:, :2]) * scale)
        size = np.array([info["width"], info["height"]], dtype=np.float32)
        centres.append((boxes[:, :2] + boxes[:, 2:]) / 2 / size)
    return TrainingBoxes(
        labels=np.concatenate(labels) if labels else np.zeros(0, np.int64),
        wh=np.concatenate(wh) if wh else np.zeros((0, 2), np.float32),
        centres=np.concatenate(centres) if centres else np.zeros((0, 2), np.float32),
        image_index=np.concatenate(index) if index else np.zeros(0, np.int64),
        images_without_boxes=empty,
    )


def class_counts(source: CocoSource, boxes: TrainingBoxes) -> dict[str, int]:
    """Training boxes per class, keyed by class name (``name (id N)`` for a name that two
    categories share, so that each keeps its own count)."""
    counts = np.bincount(boxes.labels, minlength=source.num_classes)
    return {name: int(n) for name, n in zip(class_keys(source), counts)}


def class_keys(source: CocoSource) -> list[str]:
    """Each class's name, with its category id added where another class has that name."""
    names = source.class_names
    return [
        f"{name} (id {cat_id})" if names.count(name) > 1 else name
        for name, cat_id in zip(names, source.category_ids)
    ]


def crowd_count(source: CocoSource) -> int:
    return sum(1 for ann in source.coco.dataset["annotations"] if ann.get("iscrowd", 0))


def format_class_counts(counts: Mapping[str, int], few: int = 10) -> str:
    if len(counts) <= few:
        return ", ".join(f"{name} {n}" for name, n in counts.items())
    ranked = sorted(counts.items(), key=lambda kv: -kv[1])
    most = ", ".join(f"{name} {n}" for name, n in ranked[:3])
    fewest = ", ".join(f"{name} {n}" for name, n in ranked[-3:])
    return f"most {most}; fewest {fewest}"


def class_table(counts: Mapping[str, int], columns: int = 4) -> list[str]:
    width = max((len(name) for name in counts), default=0)
    cells = [f"{name:<{width}} {n:>7}" for name, n in counts.items()]
    return [" | ".join(cells[i : i + columns]) for i in range(0, len(cells), columns)]


def summarise_annotations(
    source: CocoSource, img_size: Sequence[int], split: str = "train"
) -> list[str]:
    """A few log lines on ``source``'s annotations for the start of training: images,
    classes and boxes, boxes per class, box sizes on the ``img_size`` ``(h, w)`` input.

    Reads only what :class:`CocoSource` already holds (no image is decoded): a second or
    so for COCO train. Malformed annotations were already reported when it was built.
    """
    boxes = training_boxes(source, img_size)
    counts = class_counts(source, boxes)
    sizes = boxes.size_summary()
    n = len(boxes.labels)
    small = sizes[f"under_{SMALL_OBJECT_PX}px"]
    lines = [
        f"{split}: {len(source)} images ({len(boxes.images_without_boxes)} without boxes), "
        f"{source.num_classes} classes, {n} boxes ({crowd_count(source)} crowd regions, "
        "not trained on)",
        f"{split} boxes per class: {format_class_counts(counts)}",
    ]
    empty = [name for name, c in counts.items() if c == 0]
    if empty:
        more = f" and {len(empty) - 10} more" if len(empty) > 10 else ""
        lines.append(f"{split}: classes without boxes: {', '.join(empty[:10])}{more}")
    if n:
        h, w = (int(v) for v in img_size)
        lines.append(
            f"{split} box size on the {h}x{w} input (longer side): median {sizes['median']:.0f} px; "
            f"{small} ({100 * small / n:.1f}%) under {SMALL_OBJECT_PX} px, "
            f"{sizes['under_stride_8']} under stride {STRIDES[0]}"
        )
    return lines
