"""COCO-format detection datasets: annotations read with pycocotools, images from a folder.

:class:`CocoSource` is the one reader behind every dataset msdet trains on (COCO itself,
the built-in shapes set, converted YOLO/VOC sets). It turns the json into per-image
training targets once, at start-up, and loads images on demand.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import math
import os
from typing import Any

import cv2
import numpy as np
from pycocotools.coco import COCO

from msdet.data.image_io import UnreadableImageStats, read_image

log = logging.getLogger(__name__)

# A box this thin (in pixels, after clipping to the image) carries no usable signal.
MIN_BOX_SIDE = 1.0
# How many malformed annotations are listed by id in the start-up warning.
MAX_LISTED_PROBLEMS = 10


class CocoSource:
    """A COCO-format dataset split: ``ann_file`` (json) and the images under ``img_dir``.

    Training indices of classes are contiguous, ordered by category id:
    ``category_ids[label]`` is the dataset's id of training class ``label``.
    Crowd annotations stay in :attr:`coco` (the evaluator needs them) but are not
    training targets; malformed annotation entries are skipped with one warning. Two
    categories of one name are an error (``unique_names=False``: data.check, which reports
    it with each one's boxes).
    """

    def __init__(self, root: str, ann_file: str, img_dir: str, unique_names: bool = True):
        self.ann_file = os.path.abspath(os.path.join(root, ann_file))
        self.img_dir = os.path.abspath(os.path.join(root, img_dir))
        if not os.path.isfile(self.ann_file):
            raise FileNotFoundError(f"annotation file not found: {self.ann_file}")
        if not os.path.isdir(self.img_dir):
            raise FileNotFoundError(f"image folder not found: {self.img_dir}")

        with open(self.ann_file, encoding="utf-8") as f:
            try:
                dataset = json.load(f)
            except json.JSONDecodeError as err:
                raise ValueError(f"{self.ann_file} is not valid json: {err}") from err
        _check_top_level(dataset, self.ann_file)
        _check_unique_ids(dataset, self.ann_file)
        repeated = repeated_names(dataset["categories"])
        if unique_names and repeated:
            raise ValueError(f"{self.ann_file}: {repeated}")
        dataset["annotations"], self.skipped_annotations = _drop_malformed_annotations(
            dataset, self.ann_file
        )
        # What was read differently from the file, each said in a line: data.check prints them.
        self.notes: list[str] = [
            *drop_grouping_categories(dataset),
            *_renumber_annotation_zero(dataset),
            *_local_file_names(dataset, self.img_dir),
        ]

        self.coco = COCO()
        self.coco.dataset = dataset
        with contextlib.redirect_stdout(io.StringIO()):  # pycocotools prints progress
            self.coco.createIndex()

        self.category_ids: list[int] = sorted(self.coco.getCatIds())
        self.class_names: list[str] = [self.coco.cats[c]["name"] for c in self.category_ids]
        self.num_classes = len(self.category_ids)
        self.image_ids: list[int] = list(self.coco.getImgIds())
        self._label_of = {cat_id: label for label, cat_id in enumerate(self.category_ids)}
        self._targets = [self._targets_of(img_id) for img_id in self.image_ids]
        # Shared with data workers: the engine reports how many images were replaced.
        self.unreadable = UnreadableImageStats()
        self._size_warned = False
        self._mismatches: list[tuple[int, tuple[int, int], tuple[int, int]]] | None = None
        self.size_mismatches_reported = False  # evaluation's one warning about them

    def __len__(self) -> int:
        return len(self.image_ids)

    def __repr__(self) -> str:
        return (
            f"CocoSource({self.ann_file}: {len(self)} images, {self.num_classes} classes, "
            f"{sum(len(t[1]) for t in self._targets)} boxes)"
        )

    def keep_images(self, positions: list[int]) -> None:
        """Keep only the images at ``positions`` (e.g. those whose file exists): the others
        are neither trained on nor evaluated. Their annotations stay in :attr:`coco`, which
        evaluation reads for the images it scores only."""
        self.image_ids = [self.image_ids[i] for i in positions]
        self._targets = [self._targets[i] for i in positions]
        self._mismatches = None

    def image_info(self, i: int) -> dict[str, Any]:
        """``{"id", "file_name", "height", "width"}`` of image ``i`` (a position, not an id)."""
        info = self.coco.imgs[self.image_ids[i]]
        return {
            "id": int(info["id"]),
            "file_name": str(info["file_name"]),
            "height": int(info["height"]),
            "width": int(info["width"]),
        }

    def image_path(self, i: int) -> str:
        """Absolute path of image ``i``."""
        return os.path.join(self.img_dir, self.coco.imgs[self.image_ids[i]]["file_name"])

    def annotations(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        """Training targets of image ``i``: boxes float32 [N, 4] xyxy in pixels, clipped to
        the image, and labels int64 [N] (training class indices). N may be 0."""
        boxes, labels = self._targets[i]
        return boxes.copy(), labels.copy()

    def has_objects(self, i: int) -> bool:
        """Whether image ``i`` has at least one training box."""
        return len(self._targets[i][1]) > 0

    def load(self, i: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Image ``i`` as uint8 BGR [H, W, 3] with its boxes and labels, the boxes scaled to
        the pixels when the image is not the size its annotation says (training's rule).

        Raises :class:`data.image_io.ImageReadError` naming the file when the image is
        missing, truncated or undecodable.
        """
        img = read_image(self.image_path(i))
        boxes, labels = self.annotations(i)
        info = self.coco.imgs[self.image_ids[i]]
        h, w = img.shape[:2]
        if (h, w) != (info["height"], info["width"]):
            if not self._size_warned:  # once per process: data.check counts them all
                self._size_warned = True
                log.warning(
                    "%s is %dx%d but annotated as %dx%d; its boxes are scaled to the pixels "
                    "(so are those of any other such image; python -m msdet.data.check "
                    "lists them)",
                    self.image_path(i),
                    w,
                    h,
                    info["width"],
                    info["height"],
                )
            sx, sy = w / info["width"], h / info["height"]
            boxes = boxes * np.array([sx, sy, sx, sy], dtype=np.float32)
        return img, boxes, labels

    def load_as_annotated(self, i: int) -> np.ndarray:
        """Image ``i`` at the size its annotation says (resized when the pixels differ):
        evaluation's rule, so that predictions are scored in the annotation's coordinates,
        the mirror of :meth:`load` scaling the boxes to the pixels."""
        img = read_image(self.image_path(i))
        info = self.coco.imgs[self.image_ids[i]]
        if img.shape[:2] != (info["height"], info["width"]):
            img = cv2.resize(img, (info["width"], info["height"]), interpolation=cv2.INTER_LINEAR)
        return img

    def size_mismatches(self) -> list[tuple[int, tuple[int, int], tuple[int, int]]]:
        """``(position, (w, h) of the pixels, (w, h) annotated)`` of every image whose file
        is not the size its annotation says, from the files' headers (read once)."""
        if self._mismatches is None:
            from PIL import Image  # matplotlib's own dependency: headers without decoding

            found = []
            for i, img_id in enumerate(self.image_ids):
                info = self.coco.imgs[img_id]
                try:
                    with Image.open(self.image_path(i)) as im:
                        size = tuple(im.size)
                except OSError:
                    continue  # unreadable: reported where it is read
                if size != (info["width"], info["height"]):
                    found.append((i, size, (info["width"], info["height"])))
            self._mismatches = found
        return self._mismatches

    def _targets_of(self, img_id: int) -> tuple[np.ndarray, np.ndarray]:
        info = self.coco.imgs[img_id]
        width, height = float(info["width"]), float(info["height"])
        boxes, labels = [], []
        for ann in self.coco.imgToAnns.get(img_id, []):
            if ann.get("iscrowd", 0):
                continue
            x, y, w, h = (float(v) for v in ann["bbox"])
            x1, y1 = min(max(x, 0.0), width), min(max(y, 0.0), height)
            x2, y2 = min(max(x + w, 0.0), width), min(max(y + h, 0.0), height)
            if x2 - x1 <= MIN_BOX_SIDE or y2 - y1 <= MIN_BOX_SIDE:
                continue
            boxes.append((x1, y1, x2, y2))
            labels.append(self._label_of[ann["category_id"]])
        return (
            np.asarray(boxes, dtype=np.float32).reshape(-1, 4),
            np.asarray(labels, dtype=np.int64),
        )


def _check_top_level(dataset: Any, ann_file: str) -> None:
    """Fail fast on a json that is not a COCO detection file or has broken image entries."""
    if not isinstance(dataset, dict):
        raise ValueError(f"{ann_file}: expected a COCO json object, got {type(dataset).__name__}")
    for key in ("images", "categories"):
        if not isinstance(dataset.get(key), list):
            raise ValueError(f"{ann_file}: missing or invalid '{key}' list")
    dataset.setdefault("annotations", [])
    if not dataset["categories"]:
        raise ValueError(f"{ann_file}: no categories")
    for cat in dataset["categories"]:
        if not isinstance(cat, dict) or not isinstance(cat.get("id"), int) or "name" not in cat:
            raise ValueError(
                f"{ann_file}: category entry needs an integer 'id' and a 'name': {cat}"
            )
    for img in dataset["images"]:
        ok = isinstance(img, dict) and isinstance(img.get("id"), int)
        ok = ok and isinstance(img.get("file_name"), str)
        ok = ok and all(isinstance(img.get(k), int) and img[k] > 0 for k in ("width", "height"))
        if not ok:
            raise ValueError(
                f"{ann_file}: image entry needs integer 'id', 'width', 'height' > 0 and a "
                f"'file_name': {img}"
            )


def _check_unique_ids(dataset: dict, ann_file: str) -> None:
    """Refuse a file whose ids repeat: pycocotools would silently keep one of the two."""
    seen: dict[int, str] = {}
    for img in dataset["images"]:
        # Two files under one id (two exports concatenated): one file would get both
        # files' boxes.
        if img["id"] in seen:
            raise ValueError(
                f"{ann_file}: image id {img['id']} is used by two images, {seen[img['id']]} "
                f"and {img['file_name']}: give every image its own id (python -m "
                "msdet.data.check lists them)"
            )
        seen[img["id"]] = img["file_name"]
    ann_ids: set = set()
    for ann in dataset["annotations"]:
        ann_id = ann.get("id") if isinstance(ann, dict) else None
        if isinstance(ann_id, int) and ann_id in ann_ids:
            raise ValueError(
                f"{ann_file}: annotation id {ann_id} is used twice (COCO evaluation would read "
                "one box twice and lose the other): give every annotation its own id"
            )
        ann_ids.add(ann_id)


def drop_grouping_categories(dataset: dict) -> list[str]:
    """Leave out a category that only groups the others: the supercategory of another
    category, itself under none, without a box. Roboflow's COCO exports put the dataset's
    name there as category 0; as a class it would have no box to learn and its own output."""
    used = {ann["category_id"] for ann in dataset["annotations"]}
    parents = {
        str(c.get("supercategory"))
        for c in dataset["categories"]
        if c.get("supercategory") not in (None, "", "none", c.get("name"))
    }
    grouping = [
        c
        for c in dataset["categories"]
        if str(c["name"]) in parents
        and c.get("supercategory") in (None, "", "none")
        and c["id"] not in used
    ]
    if not grouping or len(grouping) == len(dataset["categories"]):
        return []
    dataset["categories"] = [c for c in dataset["categories"] if c not in grouping]
    return [
        f"category {c['id']} {c['name']!r} groups the others (their supercategory) and has no "
        "box: it is not a class"
        for c in grouping
    ]


def _renumber_annotation_zero(dataset: dict) -> list[str]:
    """Number annotations from 1 when one has id 0 (Roboflow's and Label Studio's start
    there): pycocotools' evaluation records a match by the annotation's id and takes id 0
    for no match, so a detection of that box would count as a false positive."""
    annotations = dataset["annotations"]
    if not any(ann["id"] == 0 for ann in annotations):
        return []
    for k, ann in enumerate(annotations, start=1):
        ann["id"] = k
    return [
        "annotation ids start at 0: numbered from 1 for evaluation (pycocotools reads 0 as no match)"
    ]


def _local_file_names(dataset: dict, img_dir: str) -> list[str]:
    """Read ``file_name`` values written on Windows (``images\\x.jpg``) with ``/`` when
    only that name is a file here."""
    changed = 0
    for img in dataset["images"]:
        name = img["file_name"]
        if "\\" in name and not os.path.isfile(os.path.join(img_dir, name)):
            local = name.replace("\\", "/")
            if os.path.isfile(os.path.join(img_dir, local)):
                img["file_name"] = local
                changed += 1
    return [f"{changed} file names written with \\ (on Windows) read with /"] if changed else []


def repeated_names(categories: list[dict]) -> str | None:
    """Which categories share a name ("categories 1 and 5 are both named 'car'; ..."), with
    what to do; None when every name is its own. A model's classes are known by their names
    (checkpoints, predictions, evaluation tables), so two of one name cannot be told apart."""
    ids_of: dict[str, list[int]] = {}
    for cat in categories:
        ids_of.setdefault(str(cat["name"]), []).append(int(cat["id"]))
    shared = [
        f"categories {', '.join(map(str, ids[:-1]))} and {ids[-1]} are both named {name!r}"
        for name, ids in ids_of.items()
        if len(ids) > 1
    ]
    if not shared:
        return None
    return (
        "; ".join(shared) + ": give each category its own name (or merge them into one category id)"
    )


def _drop_malformed_annotations(dataset: dict, ann_file: str) -> tuple[list[dict], list[str]]:
    """The annotations pycocotools and training can use, and what was wrong with each of
    the others (``id N (why)``), which one warning lists."""
    image_ids = {img["id"] for img in dataset["images"]}
    category_ids = {cat["id"] for cat in dataset["categories"]}
    kept, problems = [], []
    for ann in dataset["annotations"]:
        problem = _annotation_problem(ann, image_ids, category_ids)
        if problem:
            ann_id = ann.get("id", "?") if isinstance(ann, dict) else "?"
            problems.append(f"id {ann_id} ({problem})")
        else:
            # COCOeval reads both keys; files written by other tools may omit them.
            ann.setdefault("area", float(ann["bbox"][2]) * float(ann["bbox"][3]))
            ann.setdefault("iscrowd", 0)
            kept.append(ann)
    if problems:
        listed = ", ".join(problems[:MAX_LISTED_PROBLEMS])
        more = len(problems) - MAX_LISTED_PROBLEMS
        log.warning(
            "%s: skipped %d malformed annotation(s): %s%s",
            ann_file,
            len(problems),
            listed,
            f" and {more} more" if more > 0 else "",
        )
    return kept, problems


def _annotation_problem(ann: Any, image_ids: set, category_ids: set) -> str | None:
    if not isinstance(ann, dict):
        return "not an object"
    if not isinstance(ann.get("id"), int):
        return "no integer id"
    for key, known in (("image_id", image_ids), ("category_id", category_ids)):
        value = ann.get(key)
        if value in known:
            continue
        if isinstance(value, str) and value.strip().lstrip("-").isdigit() and int(value) in known:
            # An exporter that wrote ids as text: COCO's are integers, as the images' are.
            owner = "images'" if key == "image_id" else "categories'"
            return f"{key} {value!r} is text: the {owner} ids are integers"
        return f"unknown {key} {value!r}"
    bbox = ann.get("bbox")
    if not isinstance(bbox, list | tuple) or len(bbox) != 4:
        return f"bbox must be [x, y, w, h], got {bbox!r}"
    if not all(isinstance(v, int | float) and math.isfinite(v) for v in bbox):
        return f"bbox values must be finite numbers, got {bbox!r}"
    if bbox[2] < 0 or bbox[3] < 0:
        return f"negative bbox size {bbox!r}"
    return None
