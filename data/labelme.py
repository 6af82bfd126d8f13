"""labelme's per-image JSON files as a COCO dataset dict.

labelme saves one ``<image stem>.json`` per image: ``shapes`` (each with ``label``,
``points`` [[x, y], ...] in pixels and ``shape_type``), ``imagePath`` (the image, relative
to the json's folder), ``imageHeight`` and ``imageWidth``. A rectangle's two points are
opposite corners (either pair); a polygon, an oriented rectangle and a mask's box give
their points' bounding box; a circle (centre, a point on it) its square. Points, lines and
line strips are not boxes: each is counted and left out, with the count in the report.

labelme keeps no class list. Its ``--labels`` file (``labels.txt`` beside the json files,
one name per line, ``__ignore__`` and ``_background_`` not classes) gives the order when
present; else the classes are the labels found, sorted.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Sequence

from msdet.common.progress import progress
from msdet.data.convert_labels import ConversionError, coco_categories
from msdet.data.layout import (
    DatasetFolderError,
    FolderLayout,
    cache_folder,
    converted,
    held_out_note,
    signature,
)
from msdet.data.splits import hold_out

BOX_SHAPES = ("rectangle", "polygon", "oriented_rectangle", "mask", "circle")
# What labelme's own --labels files hold besides the classes (its examples start with them).
NOT_CLASSES = ("__ignore__", "_background_")
CLASS_LIST_FILE = "labels.txt"
NOT_BOXES_KEY = "labelme_shapes_left_out"  # in the converted json's info: {shape type: count}


def read_labelme(path: str) -> dict | None:
    """The labelme record in ``path``, or None when it is not one (not json, or no
    ``shapes`` list and ``imagePath``)."""
    try:
        with open(path, encoding="utf-8") as f:
            record = json.load(f)
    except (OSError, ValueError):
        return None
    ok = isinstance(record, dict) and isinstance(record.get("shapes"), list)
    return record if ok and "imagePath" in record else None


def labelme_files(folder: str) -> list[str]:
    """The labelme json files under ``folder`` (recursively), sorted; other json files
    (a COCO file, a tool's notes) are not among them."""
    found = []
    for base, dirs, files in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        found += [os.path.join(base, f) for f in sorted(files) if f.lower().endswith(".json")]
    return [f for f in found if read_labelme(f) is not None]


def labelme_class_names(files: Sequence[str], folder: str) -> tuple[list[str], str]:
    """(class names, where they came from): ``folder/labels.txt`` when present, else the
    labels of ``files`` sorted."""
    listed = os.path.join(folder, CLASS_LIST_FILE)
    if os.path.isfile(listed):
        with open(listed, encoding="utf-8") as f:
            names = [n.strip() for n in f if n.strip() and n.strip() not in NOT_CLASSES]
        if names:
            return names, listed
    names = set()
    for path in files:
        record = read_labelme(path) or {}
        names.update(str(s.get("label", "")) for s in record.get("shapes", []) if _is_box(s))
    return sorted(n for n in names if n), "the labels of the json files, sorted"


def labelme_to_coco(
    files: Sequence[str],
    root: str,
    class_names: Sequence[str],
    skipped: list[str] | None = None,
    not_boxes: dict[str, int] | None = None,
) -> dict:
    """A COCO dataset dict from labelme ``files``, ``file_name`` relative to ``root``,
    categories ``class_names`` (ids 1..K). A file whose image is missing or whose shapes
    are malformed is an error naming it, unless ``skipped`` (a list) takes it; shapes that
    are not boxes are counted by type into ``not_boxes``."""
    category_of = {name: k + 1 for k, name in enumerate(class_names)}
    images, annotations, problems = [], [], []
    for path in progress(files, len(files), "reading labelme files", "img"):
        try:
            image, boxes = _read_file(path, root, category_of, not_boxes)
        except ConversionError as err:
            problems.append(str(err))
            continue
        image["id"] = len(images) + 1
        images.append(image)
        for category_id, bbox in boxes:
            x, y, w, h = (round(v, 3) for v in bbox)
            annotations.append({"id": len(annotations) + 1, "image_id": image["id"],
                                "category_id": category_id, "bbox": [x, y, w, h],
                                "area": round(w * h, 3), "iscrowd": 0})  # fmt: skip
    if problems and (skipped is None or not images):
        raise ConversionError(
            f"{len(problems)} of {len(files)} labelme files cannot be read: "
            + "; ".join(problems[:10])
        )
    if skipped is not None:
        skipped.extend(problems)
    return {
        "images": images,
        "annotations": annotations,
        "categories": coco_categories(class_names),
    }


def _read_file(
    path: str, root: str, category_of: dict[str, int], not_boxes: dict[str, int] | None
) -> tuple[dict, list[tuple[int, list[float]]]]:
    record = read_labelme(path)
    if record is None:
        raise ConversionError(f"{path}: not a labelme file (no 'shapes' and 'imagePath')")
    image = os.path.normpath(
        os.path.join(os.path.dirname(path), str(record["imagePath"]).replace("\\", "/"))
    )
    if not os.path.isfile(image):
        raise ConversionError(f"{path}: its image {record['imagePath']!r} is not at {image}")
    width, height = record.get("imageWidth"), record.get("imageHeight")
    if not (isinstance(width, int) and isinstance(height, int) and width > 0 and height > 0):
        raise ConversionError(f"{path}: imageWidth and imageHeight must be positive integers")
    boxes = []
    for k, shape in enumerate(record["shapes"], start=1):
        kind = str(shape.get("shape_type") or "polygon")  # labelme's default type
        if not _is_box(shape):
            if not_boxes is not None:
                not_boxes[kind] = not_boxes.get(kind, 0) + 1
            continue
        label = str(shape.get("label", ""))
        if label not in category_of:
            raise ConversionError(f"{path}: shape {k}: label {label!r} is not a class")
        box = _box(shape.get("points"), kind)
        if box is None:
            raise ConversionError(f"{path}: shape {k} ({kind}): points must be [[x, y], ...]")
        x1, y1 = max(box[0], 0.0), max(box[1], 0.0)
        x2, y2 = min(box[2], float(width)), min(box[3], float(height))
        boxes.append((category_of[label], [x1, y1, max(x2 - x1, 0.0), max(y2 - y1, 0.0)]))
    rel = os.path.relpath(image, root)
    return {"file_name": rel, "height": height, "width": width}, boxes


def _is_box(shape: dict) -> bool:
    return isinstance(shape, dict) and str(shape.get("shape_type") or "polygon") in BOX_SHAPES


def _box(points: object, kind: str) -> tuple[float, float, float, float] | None:
    """x1, y1, x2, y2 of a shape's points (a circle: its centre and a point on it)."""
    if not isinstance(points, list) or not points:
        return None
    try:
        xy = [(float(p[0]), float(p[1])) for p in points]
    except (TypeError, ValueError, IndexError):
        return None
    if not all(math.isfinite(v) for p in xy for v in p):
        return None
    if kind == "circle":
        if len(xy) != 2:
            return None
        (cx, cy), (px, py) = xy
        r = math.hypot(px - cx, py - cy)
        return cx - r, cy - r, cx + r, cy + r
    xs, ys = [p[0] for p in xy], [p[1] for p in xy]
    return min(xs), min(ys), max(xs), max(ys)


def read_labelme_folder(folder: str, cache_dir: str, splits: Sequence[str]) -> FolderLayout:
    """A folder of labelme files as a dataset: the files under ``train/`` and ``val/`` (or
    ``valid/``) as those splits, else all of them with the val split held out."""
    files = labelme_files(folder)
    by_split: dict[str, list[str]] = {}
    for path in files:
        first = os.path.relpath(path, folder).split(os.sep)[0].lower()
        split = {"train": "train", "val": "val", "valid": "val"}.get(first)
        if split:
            by_split.setdefault(split, []).append(path)
    layout = FolderLayout(kind="labelme", tool="labelme json files (one per image)")
    if "train" not in by_split:
        by_split = {"train": files}
    if "val" not in by_split:
        try:
            train, val = hold_out(by_split["train"], lambda p: os.path.relpath(p, folder))
        except ValueError as err:
            raise DatasetFolderError(f"data={folder}: no val split, and {err}") from err
        layout.notes.append(
            held_out_note(
                folder, len(val), len(by_split["train"]), "put the files in train/ and val/ folders"
            )  # fmt: skip
        )
        by_split = {"train": train, "val": val}
    names, where = labelme_class_names(files, folder)
    if not names:
        raise DatasetFolderError(f"data={folder}: no box (rectangle, polygon) in its labelme files")
    layout.notes.append(f"classes from {where}: {', '.join(names[:20])}")
    cache = cache_folder(cache_dir, folder)
    for split in splits:
        split_files = by_split[split]
        sign = signature([*names, split], [*split_files, *_images_of(split_files)])

        def build(skipped: list[str], split_files: list[str] = split_files) -> dict:
            not_boxes: dict[str, int] = {}
            dataset = labelme_to_coco(split_files, folder, names, skipped, not_boxes)
            return {**dataset, "info": {NOT_BOXES_KEY: not_boxes}}

        out = os.path.join(cache, f"labelme-{split}.json")
        ann, layout.skipped[split] = converted(out, sign, build, f"{folder} ({split})")
        layout.splits[split] = (ann, folder)
        with open(ann, encoding="utf-8") as f:
            not_boxes = json.load(f)["info"][NOT_BOXES_KEY]
        if not_boxes:
            layout.notes.append(
                f"{split}: shapes that are not boxes are left out: "
                + ", ".join(f"{n} {kind}" for kind, n in sorted(not_boxes.items()))
            )
    return layout


def _images_of(files: Sequence[str]) -> list[str]:
    images = []
    for path in files:
        record = read_labelme(path) or {}
        rel = str(record.get("imagePath", "")).replace("\\", "/")
        images.append(os.path.normpath(os.path.join(os.path.dirname(path), rel)))
    return images
