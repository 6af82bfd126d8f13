"""Check a dataset before training on it.

    python -m msdet.data.check data=path/to/dataset [--out DIR] [--splits train val]

Trailing arguments are settings (``key=value``) of ``configs/config.yaml`` (``data=...``,
``data.root=...``, ``data.img_size=...``, ``train.img_scale=...``), checked as for training.
Every image is decoded; the report says how a dataset folder was read (its layout, the
class ids it used, a val split it held out), then lists missing and unreadable images, bad
label files, boxes outside the image or of zero area, unknown category ids, malformed
annotations, duplicate file names, images without boxes, classes without boxes, the boxes
per class, and box sizes on the input training uses (the letterbox to ``train.input_size``:
``data.img_size`` x ``train.img_scale``) against the strides 8, 16, 32. It is printed and
written as ``data_check.json`` with ``labels.png`` (classes, box centres, box sizes) into
``--out`` (default ``run.dir``, else ``runs/data_check``, beside the run folders), whose
writability is checked before anything else.

Only what training cannot get past is an error (a missing or unreadable annotation file,
no images, no categories, broken image or category entries, duplicate image ids, two
categories of one name, train and val with different categories or names, no readable
image, more than half of the images missing, a train split without a usable box):
structural ones raise before any image is decoded, and the command exits with
status 1 when the report holds an error. Everything else is a
warning: training skips, clips or replaces those items, which is what you want to know
about. :func:`summarise_annotations` is the light version for the start of training
(annotations only, no decoding).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from msdet.common.config import load_config
from msdet.common.host import available_cores
from msdet.common.logs import printable
from msdet.data.build import MAX_MISSING_FRACTION, check_has_boxes, split_paths
from msdet.data.check_report import (
    DEFAULT_OUT,
    OUTSIDE_TOLERANCE,
    PROBLEMS,
    format_report,
    output_folder,
    unwritable,
    write_report,
)
from msdet.data.coco import CocoSource, _annotation_problem, _check_top_level, repeated_names
from msdet.data.image_io import ImageReadError, read_image
from msdet.data.summary import (
    SMALL_OBJECT_PX,
    TrainingBoxes,
    class_counts,
    crowd_count,
    training_boxes,
)

MAX_EXAMPLES = 10  # items listed per problem
MISSING = "missing"  # what the decoder reports for a file that is not there


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


def _check_entries(
    dataset: dict[str, Any], problems: dict[str, Problem], ann_file: str
) -> list[dict]:
    """Duplicate file names, bad annotations; returns the distinct image files. Duplicate
    image ids are an error (:class:`DatasetError`, listing the first ones)."""
    seen_ids: dict[int, str] = {}
    seen_files: dict[str, int] = {}
    files = []
    duplicates = Problem()
    for img in dataset["images"]:
        if img["id"] in seen_ids:
            duplicates.add(f"id {img['id']}: {seen_ids[img['id']]!r} and {img['file_name']!r}")
        else:
            seen_ids[img["id"]] = img["file_name"]
        if img["file_name"] in seen_files:
            problems["duplicate_file_name"].add(
                f"{img['file_name']!r}: ids {seen_files[img['file_name']]} and {img['id']}"
            )
        else:
            seen_files[img["file_name"]] = img["id"]
            files.append(img)
    if duplicates.count:
        raise DatasetError(
            f"{ann_file}: {duplicates.count} image entries reuse an earlier image's id "
            f"({'; '.join(duplicates.examples)}): give every image its own id"
        )
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
        if not os.path.isfile(os.path.join(img_dir, img["file_name"])):
            return img, MISSING, None
        try:
            pixels = read_image(os.path.join(img_dir, img["file_name"]))
        except ImageReadError as err:
            return img, str(err), None
        return img, None, pixels.shape[:2]

    readable = 0
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:  # OpenCV releases the GIL
        for done, (img, error, hw) in enumerate(pool.map(decode, files), start=1):
            if error == MISSING:
                problems["missing_image"].add(repr(img["file_name"]))
            elif error:
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
    notes: list[str] = field(default_factory=list)  # how the split was read (CocoSource)

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
            "notes": self.notes,
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
    files = _check_entries(dataset, problems, ann_path)
    counts = {"images": len(dataset["images"]), "annotations": len(dataset["annotations"])}
    del dataset  # COCO train's json is large; CocoSource reads its own copy

    # Training's own view of the annotations, so the counts are what it will see.
    coco_log = logging.getLogger("msdet.data.coco")
    level = coco_log.level
    coco_log.setLevel(logging.ERROR)  # its skipped-annotation warning is in this report
    try:
        source = CocoSource(root, ann_file, img_dir, unique_names=False)
    finally:
        coco_log.setLevel(level)
    # The file names as training reads them (Windows separators read as /).
    files = [{**img, "file_name": source.coco.imgs[img["id"]]["file_name"]} for img in files]
    boxes = training_boxes(source, img_size)
    classes = class_counts(source, boxes)
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
        crowd_regions=crowd_count(source),
    )

    workers = available_cores() if workers is None else int(workers)
    readable = _decode_images(img_path, files, problems, workers, progress)
    errors = []
    if split == "train":
        try:
            check_has_boxes(source)
        except ValueError as err:
            errors.append(str(err))
    repeated = repeated_names(source.coco.dataset["categories"])
    if repeated:
        errors.append(f"{ann_path}: {repeated}")
    missing = problems["missing_image"].count
    if readable == 0:
        errors.append(f"{split}: none of the {len(files)} images in {img_path} can be read")
    elif missing > MAX_MISSING_FRACTION * len(files):
        errors.append(
            f"{split}: {missing} of the {len(files)} images are not in {img_path} (e.g. "
            f"{', '.join(problems['missing_image'].examples[:3])}): a wrong image folder? "
            f"Training refuses a split missing more than {MAX_MISSING_FRACTION:.0%} of its files"
        )
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
        notes=list(source.notes),
    )


def check_dataset(
    data_cfg: Any,
    splits: Sequence[str] = ("train", "val"),
    workers: int | None = None,
    progress: Callable[[str, int, int], None] | None = None,
    img_size: Sequence[int] | None = None,
    notes: list[str] | None = None,
) -> list[SplitCheck]:
    """Check the ``splits`` of the ``data`` config group (``data.root``,
    ``data.<split>.ann_file``/``img_dir``; the shapes set is generated if missing), box
    sizes on an ``img_size`` ``(h, w)`` input (None: ``data.img_size``; the command gives
    training's, ``train.input_size``). ``notes`` receives what was done to read a dataset
    folder (:func:`msdet.data.build.split_paths`).

    The smaller val split is read first, so that its structural errors surface before a
    long decode of train. Train and val with different categories is an error in the
    first split's report (training refuses them).
    """
    skipped: dict[str, list[str]] = {}
    paths = split_paths(data_cfg, tuple(splits), skipped, notes)
    size = data_cfg.img_size if img_size is None else img_size
    img_size = (int(size[0]), int(size[1]))  # checked by the config
    order = sorted(splits, key=lambda s: s != "val")
    checks = {}
    for split in order:
        checks[split] = check_split(
            "",
            *paths[split],
            img_size,
            split,
            workers,
            None if progress is None else lambda d, t, s=split: progress(s, d, t),
        )
    for split, problems in skipped.items():
        for problem in problems:
            checks[split].problems["bad_label_file"].add(problem)
    result = [checks[s] for s in splits]
    first = result[0]
    if len(result) > 1 and any(c.category_ids != first.category_ids for c in result[1:]):
        first.errors.append(
            "train and val have different categories: "
            + "; ".join(f"{c.split} has ids {c.category_ids}" for c in result)
        )
    elif len(result) > 1 and any(c.class_names != first.class_names for c in result[1:]):
        differ = [
            f"id {cat_id}: {a!r} ({first.split}) / {b!r} ({c.split})"
            for c in result[1:]
            for cat_id, a, b in zip(c.category_ids, first.class_names, c.class_names)
            if a != b
        ]
        first.errors.append("train and val name their categories differently: " + "; ".join(differ))
    return result


def training_input(cfg: Any) -> tuple[tuple[int, int], str]:
    """The input size training letterboxes to (``train.input_size``) and where it comes
    from, in words."""
    h, w = (int(v) for v in cfg.train.input_size)
    dh, dw = (int(v) for v in cfg.data.img_size)
    if (h, w) == (dh, dw):
        return (h, w), "data.img_size, the training input"
    return (h, w), f"the training input: data.img_size {dh}x{dw} x train.img_scale"


def main(argv: Sequence[str] | None = None) -> int:
    """Check the dataset, print the report, write it to ``--out``. Returns the exit status:
    0 (warnings at most), 1 (an error in the report), 2 (the dataset cannot be read, or
    the report cannot be written: said before the check starts)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--out", default=None, help=f"output folder (default: run.dir, else {DEFAULT_OUT})"
    )
    parser.add_argument("--splits", nargs="+", default=["train", "val"], choices=["train", "val"])
    parser.add_argument(
        "--workers", type=int, default=None, help="decoding threads (default: cores)"
    )
    parser.add_argument(
        "overrides", nargs="*", help="settings, e.g. data=path/to/dataset data.img_size=[640,640]"
    )
    args = parser.parse_intermixed_args(argv)  # options before, between or after settings
    try:
        cfg = load_config("tool", list(args.overrides))
    except ValueError as err:
        print(f"data.check: error: {err}", file=sys.stderr)
        return 2
    out = output_folder(args.out, cfg.run)
    problem = unwritable(out)
    if problem:
        print(
            f"data.check: error: the report cannot be written into {out} ({problem}): choose "
            "a writable folder with --out DIR (or run.dir=DIR)",
            file=sys.stderr,
        )
        return 2

    def progress(split: str, done: int, total: int) -> None:
        step = max(1, total // 10)
        if total >= 1000 and (done % step == 0 or done == total):
            print(f"{split}: decoded {done}/{total} images", file=sys.stderr, flush=True)

    img_size, size_from = training_input(cfg)
    notes: list[str] = []
    try:
        checks = check_dataset(cfg.data, args.splits, args.workers, progress, img_size, notes)
    except (OSError, ValueError) as err:
        print(f"data.check: error: {err}", file=sys.stderr)
        return 2
    print(printable(format_report(checks, img_size, size_from, notes)))
    try:
        paths = write_report(checks, cfg.data, img_size, out, notes)
    except OSError as err:
        print(f"data.check: error: cannot write the report into {out} ({err.strerror or err}): "
              "choose another folder with --out DIR (or run.dir=DIR)", file=sys.stderr)  # fmt: skip
        return 2
    print(printable(f"wrote {paths['report']} and {paths['labels']}"))
    return 1 if any(c.errors for c in checks) else 0


if __name__ == "__main__":
    sys.exit(main())
