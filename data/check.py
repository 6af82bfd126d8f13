"""Check a COCO-format dataset before training on it.

    python -m data.check data=coco data.root=/data/coco [--out DIR] [--splits train val]

Trailing arguments are Hydra overrides of ``configs/config.yaml`` (``data=...``,
``data.root=...``, ``data.img_size=...``), as for training. Every image is decoded; the
report lists unreadable images, boxes outside the image or of zero area, unknown category
ids, malformed annotations, duplicate image ids and file names, images without boxes,
classes without boxes, the boxes per class, and box sizes on the network input (the
letterbox to ``data.img_size``) against the strides 8, 16, 32. It is printed and written
as ``data_check.json`` with ``labels.png`` (classes, box centres, box sizes) into ``--out``
(default ``outputs/data_check``).

Only what training cannot get past is an error (a missing or unreadable annotation file,
no images, no categories, broken image or category entries, train and val with different
categories, no readable image): structural ones raise before any image is decoded, and
the command exits with status 1 when the report holds an error. Everything else is a
warning: training skips, clips or replaces those items, which is what you want to know
about. :func:`summarise_annotations` is the light version for the start of training
(annotations only, no decoding).
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from data.build import dataset_root
from data.coco import CocoSource, _annotation_problem, _check_top_level
from data.config import available_cores, input_size
from data.image_io import ImageReadError, read_image

STRIDES = (8, 16, 32)
# Objects under this many pixels (longer side) on the network input are hard to classify:
# the lesson of the shapes set (README "The default run").
SMALL_OBJECT_PX = 16
# Boxes reaching this far past the border are left alone: annotation tools that use
# inclusive pixel coordinates put x + w at the image width + 1.
OUTSIDE_TOLERANCE = 1.0
# Box size bins (longer side on the input, px) for the report.
SIZE_BINS = (0, 8, 16, 32, 64, 128, 256, math.inf)
MAX_EXAMPLES = 10  # items listed per problem
REPORT_FILE = "data_check.json"
LABELS_FILE = "labels.png"
DEFAULT_OUT = "outputs/data_check"
CONFIG_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "configs")

# Each warning the report can hold, with what training does about it.
PROBLEMS = {
    "unreadable_image": "images that cannot be decoded (training replaces them with others)",
    "size_mismatch": "images whose pixels differ from the annotated width/height (boxes are rescaled)",
    "duplicate_image_id": "image entries repeating an earlier id (their annotations merge)",
    "duplicate_file_name": "image entries repeating an earlier file name",
    "malformed_annotation": "annotations training skips: no integer id, unknown image id, bad bbox",
    "unknown_category_id": "annotations whose category_id is not in 'categories' (skipped)",
    "zero_area_box": "boxes of zero width or height (skipped)",
    "box_outside_image": f"boxes reaching over {OUTSIDE_TOLERANCE:g} px past the image border (clipped)",
    "image_without_annotations": "images without a box to learn: background only (fine in moderation)",
    "empty_class": "categories without a single training box in this split",
    "small_object": f"boxes under {SMALL_OBJECT_PX} px (longer side) on the network input: hard to classify",
}


class DatasetError(ValueError):
    """The dataset cannot be trained on; the message names the file and the field."""


@dataclass
class Problem:
    """How many items have one problem, and the first few of them."""

    count: int = 0
    examples: list[str] = field(default_factory=list)

    def add(self, example: str) -> None:
        """Count one more item, keeping its description among the first few."""
        self.count += 1
        if len(self.examples) < MAX_EXAMPLES:
            self.examples.append(example)


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


def _class_counts(source: CocoSource, boxes: TrainingBoxes) -> dict[str, int]:
    counts = np.bincount(boxes.labels, minlength=source.num_classes)
    return {name: int(n) for name, n in zip(source.class_names, counts)}


def _crowd_count(source: CocoSource) -> int:
    return sum(1 for ann in source.coco.dataset["annotations"] if ann.get("iscrowd", 0))


def _format_class_counts(counts: Mapping[str, int], few: int = 10) -> str:
    if len(counts) <= few:
        return ", ".join(f"{name} {n}" for name, n in counts.items())
    ranked = sorted(counts.items(), key=lambda kv: -kv[1])
    most = ", ".join(f"{name} {n}" for name, n in ranked[:3])
    fewest = ", ".join(f"{name} {n}" for name, n in ranked[-3:])
    return f"most {most}; fewest {fewest}"


def _class_table(counts: Mapping[str, int], columns: int = 4) -> list[str]:
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
    counts = _class_counts(source, boxes)
    sizes = boxes.size_summary()
    n = len(boxes.labels)
    small = sizes[f"under_{SMALL_OBJECT_PX}px"]
    lines = [
        f"{split}: {len(source)} images ({len(boxes.images_without_boxes)} without boxes), "
        f"{source.num_classes} classes, {n} boxes ({_crowd_count(source)} crowd regions, "
        "not trained on)",
        f"{split} boxes per class: {_format_class_counts(counts)}",
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


def _read_json(ann_file: str) -> dict[str, Any]:
    if not os.path.isfile(ann_file):
        raise FileNotFoundError(f"annotation file not found: {ann_file}")
    try:
        with open(ann_file, encoding="utf-8") as f:
            dataset = json.load(f)
    except (OSError, UnicodeDecodeError) as err:
        raise DatasetError(f"cannot read annotation file {ann_file}: {err}") from err
    except json.JSONDecodeError as err:
        raise DatasetError(f"{ann_file} is not valid json: {err}") from err
    _check_top_level(dataset, ann_file)  # the checks CocoSource makes: same wording
    if not dataset["images"]:
        raise DatasetError(f"{ann_file}: no images ('images' is empty)")
    return dataset


def _check_entries(dataset: dict[str, Any], problems: dict[str, Problem]) -> list[dict]:
    """Duplicate ids and file names, bad annotations; returns the distinct image files."""
    seen_ids: dict[int, str] = {}
    seen_files: dict[str, int] = {}
    files = []
    for img in dataset["images"]:
        if img["id"] in seen_ids:
            problems["duplicate_image_id"].add(
                f"id {img['id']}: {seen_ids[img['id']]!r} and {img['file_name']!r}"
            )
        else:
            seen_ids[img["id"]] = img["file_name"]
        if img["file_name"] in seen_files:
            problems["duplicate_file_name"].add(
                f"{img['file_name']!r}: ids {seen_files[img['file_name']]} and {img['id']}"
            )
        else:
            seen_files[img["file_name"]] = img["id"]
            files.append(img)
    size_of = {}
    for img in dataset["images"]:
        size_of.setdefault(img["id"], (img["width"], img["height"], img["file_name"]))
    category_ids = {cat["id"] for cat in dataset["categories"]}
    for ann in dataset["annotations"]:
        problem = _annotation_problem(ann, set(size_of), category_ids)
        ann_id = ann.get("id", "?") if isinstance(ann, dict) else "?"
        if problem:
            key = "unknown_category_id" if problem.startswith("unknown category_id") else None
            where = f" in {size_of[ann['image_id']][2]!r}" if key else ""
            problems[key or "malformed_annotation"].add(f"annotation {ann_id}{where}: {problem}")
            continue
        x, y, w, h = (float(v) for v in ann["bbox"])
        width, height, file_name = size_of[ann["image_id"]]
        if w == 0 or h == 0:
            problems["zero_area_box"].add(
                f"annotation {ann_id} in {file_name!r}: bbox {ann['bbox']}"
            )
        tol = OUTSIDE_TOLERANCE
        if x < -tol or y < -tol or x + w > width + tol or y + h > height + tol:
            problems["box_outside_image"].add(
                f"annotation {ann_id} in {file_name!r} ({width}x{height}): bbox {ann['bbox']}"
            )
    return files


def _decode_images(
    img_dir: str,
    files: Sequence[Mapping[str, Any]],
    problems: dict[str, Problem],
    workers: int,
    progress: Callable[[int, int], None] | None,
) -> int:
    """Decode every file; returns how many could be read."""

    def decode(img: Mapping[str, Any]) -> tuple[Mapping[str, Any], str | None, tuple | None]:
        try:
            pixels = read_image(os.path.join(img_dir, img["file_name"]))
        except ImageReadError as err:
            return img, str(err), None
        return img, None, pixels.shape[:2]

    readable = 0
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:  # OpenCV releases the GIL
        for done, (img, error, hw) in enumerate(pool.map(decode, files), start=1):
            if error:
                problems["unreadable_image"].add(error)
            else:
                readable += 1
                if hw != (img["height"], img["width"]):
                    problems["size_mismatch"].add(
                        f"{img['file_name']!r}: {hw[1]}x{hw[0]} pixels, annotated "
                        f"{img['width']}x{img['height']}"
                    )
            if progress is not None:
                progress(done, len(files))
    return readable


@dataclass
class SplitCheck:
    """One split's findings: :meth:`to_json` is its part of ``data_check.json``."""

    split: str
    ann_file: str
    img_dir: str
    counts: dict[str, int]
    classes: dict[str, int]
    sizes: dict[str, Any]
    problems: dict[str, Problem]
    errors: list[str]
    class_names: list[str]
    category_ids: list[int]
    boxes: TrainingBoxes = field(repr=False)

    def to_json(self) -> dict[str, Any]:
        """Plain data: paths, counts, boxes per class, box sizes, problems and errors."""
        return {
            "ann_file": self.ann_file,
            "img_dir": self.img_dir,
            **self.counts,
            "boxes_per_class": self.classes,
            "box_sizes": self.sizes,
            "problems": {
                key: {"count": p.count, "description": PROBLEMS[key], "examples": p.examples}
                for key, p in self.problems.items()
                if p.count
            },
            "errors": self.errors,
        }


def check_split(
    root: str,
    ann_file: str,
    img_dir: str,
    img_size: Sequence[int],
    split: str = "train",
    workers: int | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> SplitCheck:
    """Check one split: ``root/ann_file`` (COCO json) and the images in ``root/img_dir``,
    box sizes on an ``img_size`` ``(h, w)`` network input.

    Raises ``FileNotFoundError`` (a missing file or folder) or :class:`DatasetError` /
    ``ValueError`` (unreadable json, no images, no categories, broken entries), naming the
    file and field, before any image is decoded. Decodes every distinct image file with
    ``workers`` threads (default: the available cores), calling ``progress(done, total)``.
    """
    ann_path = os.path.abspath(os.path.join(root, ann_file))
    img_path = os.path.abspath(os.path.join(root, img_dir))
    dataset = _read_json(ann_path)
    if not os.path.isdir(img_path):
        raise FileNotFoundError(f"image folder not found: {img_path}")
    problems = {key: Problem() for key in PROBLEMS}
    files = _check_entries(dataset, problems)
    counts = {"images": len(dataset["images"]), "annotations": len(dataset["annotations"])}
    del dataset  # COCO train's json is large; CocoSource reads its own copy

    # Training's own view of the annotations, so the counts are what it will see.
    coco_log = logging.getLogger("data.coco")
    level = coco_log.level
    coco_log.setLevel(logging.ERROR)  # its skipped-annotation warning is in this report
    try:
        source = CocoSource(root, ann_file, img_dir)
    finally:
        coco_log.setLevel(level)
    boxes = training_boxes(source, img_size)
    classes = _class_counts(source, boxes)
    for i in boxes.images_without_boxes:
        problems["image_without_annotations"].add(repr(source.image_info(i)["file_name"]))
    for name, n in classes.items():
        if n == 0:
            problems["empty_class"].add(name)
    side = boxes.wh.max(1) if len(boxes.wh) else np.zeros(0)
    for n in np.flatnonzero(side < SMALL_OBJECT_PX):
        file_name = source.image_info(int(boxes.image_index[n]))["file_name"]
        problems["small_object"].add(
            f"{source.class_names[boxes.labels[n]]} in {file_name!r}: "
            f"{boxes.wh[n, 0]:.1f}x{boxes.wh[n, 1]:.1f} px on the input"
        )
    counts.update(
        categories=source.num_classes,
        training_boxes=len(boxes.labels),
        crowd_regions=_crowd_count(source),
    )

    workers = available_cores() if workers is None else int(workers)
    readable = _decode_images(img_path, files, problems, workers, progress)
    errors = []
    if readable == 0:
        errors.append(f"{split}: none of the {len(files)} images in {img_path} can be read")
    return SplitCheck(
        split=split,
        ann_file=ann_path,
        img_dir=img_path,
        counts=counts,
        classes=classes,
        sizes=boxes.size_summary(),
        problems=problems,
        errors=errors,
        class_names=list(source.class_names),
        category_ids=list(source.category_ids),
        boxes=boxes,
    )


def check_dataset(
    data_cfg: Any,
    splits: Sequence[str] = ("train", "val"),
    workers: int | None = None,
    progress: Callable[[str, int, int], None] | None = None,
) -> list[SplitCheck]:
    """Check the ``splits`` of the ``data`` config group (``data.root``, ``data.img_size``,
    ``data.<split>.ann_file``/``img_dir``; the shapes set is generated if missing).

    The smaller val split is read first, so that its structural errors surface before a
    long decode of train. Train and val with different categories is an error in the
    first split's report (training refuses them).
    """
    root = dataset_root(data_cfg)
    img_size = input_size(data_cfg.img_size, "data.img_size")
    order = sorted(splits, key=lambda s: s != "val")
    checks = {}
    for split in order:
        split_cfg = data_cfg[split]
        checks[split] = check_split(
            root,
            str(split_cfg.ann_file),
            str(split_cfg.img_dir),
            img_size,
            split,
            workers,
            None if progress is None else lambda d, t, s=split: progress(s, d, t),
        )
    result = [checks[s] for s in splits]
    if len(result) > 1 and any(c.category_ids != result[0].category_ids for c in result[1:]):
        result[0].errors.append(
            "train and val have different categories: "
            + "; ".join(f"{c.split} has ids {c.category_ids}" for c in result)
        )
    return result


def format_report(checks: Sequence[SplitCheck], img_size: Sequence[int]) -> str:
    """The report as text: per split its counts, boxes per class, box sizes, problems;
    then the number of warnings and errors."""
    h, w = (int(v) for v in img_size)
    lines = [
        f"input {h}x{w} (data.img_size), strides {', '.join(map(str, STRIDES))}; box sizes "
        "after the letterbox to it (training's scale augmentation varies them further)"
    ]
    for c in checks:
        n = c.counts
        lines.append(f"{c.split}: {c.ann_file}, images in {c.img_dir}")
        lines.append(
            f"  {n['images']} images, {n['annotations']} annotations, {n['categories']} "
            f"categories; {n['training_boxes']} training boxes, {n['crowd_regions']} crowd regions"
        )
        if len(c.classes) <= 10:
            lines.append(f"  boxes per class: {_format_class_counts(c.classes)}")
        else:
            lines.append("  boxes per class:")
            lines.extend(f"    {row}" for row in _class_table(c.classes))
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


def plot_labels(check: SplitCheck, img_size: Sequence[int], path: str) -> None:
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


def write_report(
    checks: Sequence[SplitCheck], data_cfg: Any, img_size: Sequence[int], out_dir: str
) -> dict[str, str]:
    """Write ``data_check.json`` and ``labels.png`` (of the first split) into ``out_dir``;
    returns their paths."""
    os.makedirs(out_dir, exist_ok=True)
    report = {
        "dataset": str(data_cfg.name),
        "img_size": [int(v) for v in img_size],
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


def main(argv: Sequence[str] | None = None) -> int:
    """Check the dataset, print the report, write it to ``--out``. Returns the exit status:
    0 (warnings at most), 1 (an error in the report), 2 (the dataset cannot be read)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=DEFAULT_OUT, help=f"output folder (default {DEFAULT_OUT})")
    parser.add_argument("--splits", nargs="+", default=["train", "val"], choices=["train", "val"])
    parser.add_argument(
        "--workers", type=int, default=None, help="decoding threads (default: cores)"
    )
    parser.add_argument(
        "overrides", nargs="*", help="Hydra overrides, e.g. data=coco data.root=..."
    )
    args = parser.parse_args(argv)

    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=CONFIG_DIR, version_base=None):
        cfg = compose("config", overrides=list(args.overrides))

    def progress(split: str, done: int, total: int) -> None:
        step = max(1, total // 10)
        if total >= 1000 and (done % step == 0 or done == total):
            print(f"{split}: decoded {done}/{total} images", file=sys.stderr, flush=True)

    try:
        img_size = input_size(cfg.data.img_size, "data.img_size")
        checks = check_dataset(cfg.data, args.splits, args.workers, progress)
    except (OSError, ValueError) as err:
        print(f"data.check: error: {err}", file=sys.stderr)
        return 2
    print(format_report(checks, img_size))
    paths = write_report(checks, cfg.data, img_size, args.out)
    print(f"wrote {paths['report']} and {paths['labels']}")
    return 1 if any(c.errors for c in checks) else 0


if __name__ == "__main__":
    sys.exit(main())
