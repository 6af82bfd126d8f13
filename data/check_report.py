"""The dataset check's report: the text printed (:func:`format_report`), the JSON and the
labels picture written (:func:`write_report`), and where they go. The checks themselves are
``data.check``'s (its ``SplitCheck`` is what these read).
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from typing import Any

from msdet.data.labels_plot import LABELS_FILE, plot_labels
from msdet.data.summary import SMALL_OBJECT_PX, STRIDES, class_table, format_class_counts

# Boxes reaching this far past the border are left alone: annotation tools that use
# inclusive pixel coordinates put x + w at the image width + 1.
OUTSIDE_TOLERANCE = 1.0
REPORT_FILE = "data_check.json"
DEFAULT_OUT = "runs/data_check"

# Each warning the report can hold, with what training does about it.
PROBLEMS = {
    "missing_image": "image files not in the folder (training and evaluation leave them out)",
    "unreadable_image": "images that cannot be decoded (training replaces them with others)",
    "bad_label_file": "YOLO label files with a bad line, or images the conversion cannot read (training leaves them out)",
    "size_mismatch": "images whose pixels differ from the annotated width/height (boxes are rescaled)",
    "duplicate_file_name": "image entries repeating an earlier file name",
    "malformed_annotation": "annotations training skips: no integer id, unknown image id, bad bbox",
    "unknown_category_id": "annotations whose category_id is not in 'categories' (skipped)",
    "zero_area_box": "boxes of zero width or height (skipped)",
    "box_outside_image": f"boxes reaching over {OUTSIDE_TOLERANCE:g} px past the image border (clipped)",
    "image_without_annotations": "images without a box to learn: background only (fine in moderation)",
    "empty_class": "categories without a single training box in this split",
    "small_object": f"boxes under {SMALL_OBJECT_PX} px (longer side) on the network input: hard to classify",
}


def format_report(
    checks: Sequence[Any],
    img_size: Sequence[int],
    size_from: str = "data.img_size",
    notes: Sequence[str] = (),
) -> str:
    """The report as text: the input size (``size_from``: where it comes from), how the
    dataset was read (``notes``), per split its counts, boxes per class, box sizes,
    problems; then the number of warnings and errors."""
    h, w = (int(v) for v in img_size)
    lines = [
        f"input {h}x{w} ({size_from}), strides {', '.join(map(str, STRIDES))}; box sizes "
        "after the letterbox to it (training's scale augmentation varies them further)"
    ]
    lines += [f"read: {note}" for note in notes]
    for c in checks:
        n = c.counts
        lines.append(f"{c.split}: {c.ann_file}, images in {c.img_dir}")
        lines.append(
            f"  {n['images']} images, {n['annotations']} annotations, {n['categories']} "
            f"categories; {n['training_boxes']} training boxes, {n['crowd_regions']} crowd regions"
        )
        if len(c.classes) <= 10:
            lines.append(f"  boxes per class: {format_class_counts(c.classes)}")
        else:
            lines.append("  boxes per class:")
            lines.extend(f"    {row}" for row in class_table(c.classes))
        s = c.sizes
        if s["median"] is not None:
            total = n["training_boxes"]
            small = s[f"under_{SMALL_OBJECT_PX}px"]
            lines.append(
                f"  box size on the {h}x{w} input (longer side): median {s['median']:.0f} px; "
                f"under {SMALL_OBJECT_PX} px: {small} ({100 * small / total:.1f}%), "
                f"under stride {STRIDES[0]}: {s['under_stride_8']}"
            )
            lines.append(
                "    " + "  ".join(f"{name} px: {k}" for name, k in s["histogram"].items())
            )
        lines.extend(f"  read: {note}" for note in c.notes)
        found = [(key, p) for key, p in c.problems.items() if p.count]
        for key, p in found:
            lines.append(f"  warning: {key}: {p.count} - {PROBLEMS[key]}")
            lines.extend(f"      {example}" for example in p.examples)
            if p.count > len(p.examples):
                lines.append(f"      ... and {p.count - len(p.examples)} more")
        lines.extend(f"  ERROR: {e}" for e in c.errors)
        if not found and not c.errors:
            lines.append("  no problems found")
    warnings = sum(p.count for c in checks for p in c.problems.values())
    errors = sum(len(c.errors) for c in checks)
    lines.append(f"{warnings} warnings, {errors} errors")
    return "\n".join(lines)


def write_report(
    checks: Sequence[Any],
    data_cfg: Any,
    img_size: Sequence[int],
    out_dir: str,
    notes: Sequence[str] = (),
) -> dict[str, str]:
    """Write ``data_check.json`` and ``labels.png`` (of the first split) into ``out_dir``;
    returns their paths."""
    os.makedirs(out_dir, exist_ok=True)
    report = {
        "dataset": str(data_cfg.name),
        "img_size": [int(v) for v in img_size],
        "read": list(notes),
        "strides": list(STRIDES),
        "small_object_px": SMALL_OBJECT_PX,
        "splits": {c.split: c.to_json() for c in checks},
        "errors": [e for c in checks for e in c.errors],
        "warnings": sum(p.count for c in checks for p in c.problems.values()),
    }
    paths = {
        "report": os.path.join(out_dir, REPORT_FILE),
        "labels": os.path.join(out_dir, LABELS_FILE),
    }
    with open(paths["report"], "w", encoding="utf-8") as f:
        json.dump(report, f, indent=2)
    plot_labels(checks[0], img_size, paths["labels"])
    return paths


def output_folder(out: str | None, run_cfg: Any) -> str:
    """Where the report goes: ``--out``, else ``run.dir``, else ``<run.root>/data_check``."""
    return os.path.abspath(out or run_cfg.dir or os.path.join(str(run_cfg.root), "data_check"))


def unwritable(folder: str) -> str | None:
    """Why ``folder`` cannot be created and written (nothing is created to find out), or
    None when it can."""
    existing = os.path.abspath(folder)
    while not os.path.exists(existing):
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing):
        return f"{existing} is a file"
    if not os.access(existing, os.W_OK | os.X_OK):
        return f"{existing} is not writable"
    return None
