"""Convert YOLO txt and Pascal VOC xml labels to a COCO json that :class:`CocoSource` reads.

    python -m msdet.data.convert_labels yolo --images DIR --labels DIR --classes FILE --out ann.json
    python -m msdet.data.convert_labels voc --root VOC_DIR --split trainval --out ann.json

YOLO: one ``labels/<image stem>.txt`` per image with lines ``class cx cy w h`` normalised
to 0..1 (an image without a label file has no objects); ``--classes`` lists one class
name per line, line k being class k, which becomes category id k + 1. ``file_name`` is
the image path relative to ``--images`` (use that folder as ``img_dir``).

VOC: ``VOC_DIR/ImageSets/Main/<split>.txt``, ``Annotations/<id>.xml`` and the images in
``JPEGImages`` (``img_dir: JPEGImages``). VOC's pixel corners are 1-based and inclusive;
COCO boxes are 0-based ``[x, y, w, h]``: ``x = xmin - 1``, ``w = xmax - xmin + 1``.
Objects marked ``difficult`` become ``iscrowd: 1``: ignored in training and, as in VOC's
own metric, in evaluation. Categories are the 20 VOC classes (ids 1..20) unless
``--classes`` gives other names.

Malformed input stops the conversion with an error naming every bad file (and line);
training, converting a YOLO folder itself, leaves such an image out with a warning instead
(``msdet.data.folders``).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import xml.etree.ElementTree as ET
from collections.abc import Sequence

from msdet.common.progress import progress
from msdet.data.image_io import ImageReadError, read_image

IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".bmp", ".webp", ".tif", ".tiff")
VOC_CLASSES = (
    "aeroplane", "bicycle", "bird", "boat", "bottle", "bus", "car", "cat", "chair", "cow",
    "diningtable", "dog", "horse", "motorbike", "person", "pottedplant", "sheep", "sofa",
    "train", "tvmonitor",
)  # fmt: skip


class ConversionError(ValueError):
    """Malformed input to a converter; the message names the file and line."""


def read_class_names(path: str) -> list[str]:
    """Class names, one per non-empty line of ``path``."""
    try:
        with open(path, encoding="utf-8") as f:
            names = [line.strip() for line in f if line.strip()]
    except OSError as err:
        raise ConversionError(f"cannot read class list {path}: {err}") from err
    if not names:
        raise ConversionError(f"{path}: no class names")
    if len(set(names)) != len(names):
        raise ConversionError(f"{path}: duplicate class names")
    return names


def coco_categories(names: Sequence[str]) -> list[dict]:
    """COCO categories with ids 1..K in the order of ``names``."""
    return [{"id": k + 1, "name": name, "supercategory": "object"} for k, name in enumerate(names)]


def yolo_to_coco(
    images_dir: str,
    labels_dir: str,
    class_names: Sequence[str],
    skipped: list[str] | None = None,
) -> dict:
    """A COCO dataset dict from YOLO labels; image sizes are read from the images.

    An image that cannot be read, or whose label file has a bad line, cannot be converted:
    without ``skipped`` that is a :class:`ConversionError` listing every such file (each
    bad line of it); with ``skipped`` (a list) the image is left out and its problem
    appended there, as Ultralytics skips a corrupt label, and only a folder with nothing
    convertible is an error."""
    if not os.path.isdir(images_dir):
        raise ConversionError(f"image folder not found: {images_dir}")
    if not os.path.isdir(labels_dir):
        raise ConversionError(f"label folder not found: {labels_dir}")
    images, annotations, problems = [], [], []
    files = _image_files(images_dir)
    for rel in progress(files, len(files), "reading images", "img"):
        label_path = os.path.join(labels_dir, os.path.splitext(rel)[0] + ".txt")
        try:
            height, width = read_image(os.path.join(images_dir, rel)).shape[:2]
            objects = []
            if os.path.isfile(label_path):
                objects = _read_yolo_labels(label_path, len(class_names), width, height)
        except (ImageReadError, ConversionError) as err:
            problems.append(str(err))
            continue
        image_id = len(images) + 1
        images.append({"id": image_id, "file_name": rel, "height": height, "width": width})
        for category_id, bbox in objects:
            annotations.append(_annotation(len(annotations) + 1, image_id, category_id, bbox))
    if not files:
        raise ConversionError(f"no images ({', '.join(IMAGE_EXTENSIONS)}) under {images_dir}")
    if problems and (skipped is None or not images):
        counted = (
            f"none of the {len(files)} images can"
            if not images
            else f"{len(problems)} of {len(files)} images cannot"
        )
        raise ConversionError(
            f"{counted} be converted ({images_dir}, labels in {labels_dir}): "
            + "; ".join(problems[:MAX_LISTED])
            + (f"; and {len(problems) - MAX_LISTED} more" if len(problems) > MAX_LISTED else "")
        )
    if skipped is not None:
        skipped.extend(problems)
    return {
        "images": images,
        "annotations": annotations,
        "categories": coco_categories(class_names),
    }


def _image_files(images_dir: str) -> list[str]:
    found = []
    for folder, _, files in os.walk(images_dir):
        for name in files:
            if name.lower().endswith(IMAGE_EXTENSIONS):
                found.append(os.path.relpath(os.path.join(folder, name), images_dir))
    return sorted(found)


# Rounding in labelling tools puts values a hair past 0 or 1; anything more is not a fraction.
FRACTION_SLACK = 1e-6
# Problems named in one error; the count says how many more there are.
MAX_LISTED = 10


def _read_yolo_labels(
    path: str, num_classes: int, width: int, height: int
) -> list[tuple[int, list[float]]]:
    """(category id, COCO bbox in pixels) per line of a YOLO label file; a
    :class:`ConversionError` naming every bad line (``path:line: why``) otherwise."""
    objects, bad = [], []
    with open(path, encoding="utf-8") as f:
        for line_no, line in enumerate(f, start=1):
            if not line.split():
                continue
            try:
                objects.append(_yolo_object(line, num_classes, width, height))
            except ValueError as err:
                bad.append(f"{path}:{line_no}: {err}")
    if bad:
        more = len(bad) - MAX_LISTED
        raise ConversionError(
            "; ".join(bad[:MAX_LISTED]) + (f"; and {more} more" if more > 0 else "")
        )
    return objects


def _yolo_object(line: str, num_classes: int, width: int, height: int) -> tuple[int, list[float]]:
    """One label line as (category id, COCO bbox in pixels); ``ValueError`` saying why not."""
    fields = line.split()
    if len(fields) != 5:
        kind = " (polygon labels are not supported)" if len(fields) > 5 else ""
        raise ValueError(f"expected 'class cx cy w h', got {len(fields)} values{kind}")
    try:
        cls = int(fields[0])
        cx, cy, w, h = (float(v) for v in fields[1:])
    except ValueError:
        raise ValueError(f"not numbers: {line.strip()!r}") from None
    if not 0 <= cls < num_classes:
        raise ValueError(f"class {cls} outside 0..{num_classes - 1}")
    if not all(math.isfinite(v) for v in (cx, cy, w, h)) or w < 0 or h < 0:
        raise ValueError(f"invalid box {fields[1:]}")
    if not all(-FRACTION_SLACK <= v <= 1 + FRACTION_SLACK for v in (cx, cy, w, h)):
        raise ValueError(
            f"box {' '.join(fields[1:])} is outside 0..1: YOLO labels give the centre and size "
            "as fractions of the image's width and height (these look like pixels)"
        )
    x1 = min(max((cx - w / 2) * width, 0.0), width)
    y1 = min(max((cy - h / 2) * height, 0.0), height)
    x2 = min(max((cx + w / 2) * width, 0.0), width)
    y2 = min(max((cy + h / 2) * height, 0.0), height)
    return cls + 1, [x1, y1, x2 - x1, y2 - y1]


def voc_to_coco(voc_root: str, split: str, class_names: Sequence[str] = VOC_CLASSES) -> dict:
    """A COCO dataset dict from a VOC-layout folder (``file_name`` relative to JPEGImages)."""
    split_file = os.path.join(voc_root, "ImageSets", "Main", f"{split}.txt")
    if not os.path.isfile(split_file):
        raise ConversionError(f"split file not found: {split_file}")
    with open(split_file, encoding="utf-8") as f:
        ids = [line.split()[0] for line in f if line.strip()]
    category_of = {name: k + 1 for k, name in enumerate(class_names)}
    images, annotations = [], []
    for voc_id in progress(ids, len(ids), f"reading {split}", "img"):
        xml_path = os.path.join(voc_root, "Annotations", f"{voc_id}.xml")
        image, objects = _read_voc_xml(xml_path, voc_root, category_of)
        image["id"] = len(images) + 1
        images.append(image)
        for category_id, bbox, difficult in objects:
            ann = _annotation(len(annotations) + 1, image["id"], category_id, bbox)
            ann["iscrowd"] = int(difficult)
            annotations.append(ann)
    return {
        "images": images,
        "annotations": annotations,
        "categories": coco_categories(class_names),
    }


def _read_voc_xml(
    xml_path: str, voc_root: str, category_of: dict[str, int]
) -> tuple[dict, list[tuple[int, list[float], bool]]]:
    try:
        root = ET.parse(xml_path).getroot()
    except (OSError, ET.ParseError) as err:
        raise ConversionError(f"cannot read VOC annotation {xml_path}: {err}") from err
    stem = os.path.splitext(os.path.basename(xml_path))[0]
    file_name = (root.findtext("filename") or f"{stem}.jpg").strip()
    width = _int_or_none(root.findtext("size/width"))
    height = _int_or_none(root.findtext("size/height"))
    if not width or not height:  # some VOC-style exports leave the size out or at 0
        try:
            height, width = read_image(os.path.join(voc_root, "JPEGImages", file_name)).shape[:2]
        except ImageReadError as err:
            raise ConversionError(f"{xml_path}: no <size> and {err}") from err
    objects = []
    for k, obj in enumerate(root.iter("object"), start=1):
        where = f"{xml_path}: object {k}"
        name = (obj.findtext("name") or "").strip()
        if name not in category_of:
            raise ConversionError(f"{where}: unknown class {name!r}")
        try:
            xmin, ymin, xmax, ymax = (
                float(obj.findtext(f"bndbox/{tag}")) for tag in ("xmin", "ymin", "xmax", "ymax")
            )
        except (TypeError, ValueError) as err:
            raise ConversionError(f"{where}: missing or non-numeric bndbox") from err
        if xmax < xmin or ymax < ymin:
            raise ConversionError(f"{where}: bndbox max < min")
        x1, y1 = max(xmin - 1, 0.0), max(ymin - 1, 0.0)
        x2, y2 = min(xmax, float(width)), min(ymax, float(height))
        difficult = (obj.findtext("difficult") or "0").strip() == "1"
        objects.append((category_of[name], [x1, y1, x2 - x1, y2 - y1], difficult))
    return {"file_name": file_name, "height": height, "width": width}, objects


def _int_or_none(text: str | None) -> int | None:
    try:
        return int(float(text)) if text is not None else None
    except ValueError:
        return None


def _annotation(ann_id: int, image_id: int, category_id: int, bbox: list[float]) -> dict:
    bbox = [round(v, 3) for v in bbox]
    return {
        "id": ann_id,
        "image_id": image_id,
        "category_id": category_id,
        "bbox": bbox,
        "area": round(bbox[2] * bbox[3], 3),
        "iscrowd": 0,
    }


def write_json(dataset: dict, out: str) -> None:
    """Write ``dataset`` to ``out`` (folders created; replaced only when complete)."""
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    tmp = f"{out}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(dataset, f)
    os.replace(tmp, out)


def main(argv: Sequence[str] | None = None) -> dict:
    """Command-line entry point; returns the written dataset dict."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="format", required=True)
    yolo = sub.add_parser("yolo", help="YOLO txt labels (class cx cy w h, normalised)")
    yolo.add_argument("--images", required=True, help="image folder")
    yolo.add_argument("--labels", required=True, help="label folder (<image stem>.txt)")
    yolo.add_argument("--classes", required=True, help="class names, one per line")
    yolo.add_argument("--out", required=True, help="COCO json to write")
    voc = sub.add_parser("voc", help="Pascal VOC xml annotations")
    voc.add_argument("--root", required=True, help="e.g. VOCdevkit/VOC2007")
    voc.add_argument("--split", default="trainval", help="ImageSets/Main/<split>.txt")
    voc.add_argument("--classes", default=None, help="class names (default: the 20 VOC)")
    voc.add_argument("--out", required=True, help="COCO json to write")
    args = parser.parse_args(argv)

    try:
        if args.format == "yolo":
            dataset = yolo_to_coco(args.images, args.labels, read_class_names(args.classes))
        else:
            names = read_class_names(args.classes) if args.classes else VOC_CLASSES
            dataset = voc_to_coco(args.root, args.split, names)
    except ConversionError as err:
        parser.exit(1, f"error: {err}\n")
    write_json(dataset, args.out)
    print(
        f"wrote {args.out}: {len(dataset['images'])} images, "
        f"{len(dataset['annotations'])} boxes, {len(dataset['categories'])} classes"
    )
    return dataset


if __name__ == "__main__":
    main()
