"""Convert YOLO txt and Pascal VOC xml labels to a COCO json that :class:`CocoSource` reads.

    python -m msdet.data.convert_labels yolo --images DIR --labels DIR --classes FILE --out ann.json
    python -m msdet.data.convert_labels voc --root VOC_DIR --split trainval --out ann.json

An existing ``--out`` is replaced only with ``--force``.

YOLO: one ``labels/<image stem>.txt`` per image with lines ``class cx cy w h`` normalised
to 0..1, or polygons ``class x1 y1 x2 y2 ...`` (their bounding boxes; an image without a
label file has no objects); ``--classes`` lists one class name per line, line k being class
k, which becomes category id k + 1. ``file_name`` is
the image path relative to ``--images`` (use that folder as ``img_dir``).

VOC: ``VOC_DIR/ImageSets/Main/<split>.txt``, ``Annotations/<id>.xml`` and the images in
``JPEGImages`` (``img_dir: JPEGImages``). VOC's pixel corners are 1-based and inclusive;
COCO boxes are 0-based ``[x, y, w, h]``: ``x = xmin - 1``, ``w = xmax - xmin + 1``.
Objects marked ``difficult`` become ``iscrowd: 1``: ignored in training and, as in VOC's
own metric, in evaluation. Categories are the 20 VOC classes (ids 1..20) unless
``--classes`` gives other names; an object of another class is an error naming it.

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
from collections.abc import Callable, Mapping, Sequence

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


ClassMap = Mapping[int, str]  # a label file's class id -> its name


def as_class_map(class_names: Sequence[str] | ClassMap) -> dict[int, str]:
    """``{class id: name}``: a list's positions (line k of a class list is class k), or a
    mapping as given (data.yaml's ``names: {0: a, 2: c}``: its keys are the ids)."""
    if isinstance(class_names, Mapping):
        return {int(k): str(v) for k, v in class_names.items()}
    return {k: str(name) for k, name in enumerate(class_names)}


def coco_categories(class_names: Sequence[str] | ClassMap) -> list[dict]:
    """COCO categories: class id k becomes category id k + 1, in the order of the ids."""
    classes = as_class_map(class_names)
    return [
        {"id": k + 1, "name": name, "supercategory": "object"}
        for k, name in sorted(classes.items())
    ]


def yolo_to_coco(
    images_dir: str,
    labels_dir: str,
    class_names: Sequence[str] | ClassMap,
    skipped: list[str] | None = None,
) -> dict:
    """A COCO dataset dict from the YOLO labels of the images under ``images_dir``, each
    ``labels_dir/<its relative path>.txt``; see :func:`yolo_files_to_coco`."""
    if not os.path.isdir(images_dir):
        raise ConversionError(f"image folder not found: {images_dir}")
    if not os.path.isdir(labels_dir):
        raise ConversionError(f"label folder not found: {labels_dir}")
    files = [os.path.join(images_dir, rel) for rel in _image_files(images_dir)]
    if not files:
        raise ConversionError(f"no images ({', '.join(IMAGE_EXTENSIONS)}) under {images_dir}")

    def label_of(image: str) -> str:
        rel = os.path.relpath(image, images_dir)
        return os.path.join(labels_dir, os.path.splitext(rel)[0] + ".txt")

    return yolo_files_to_coco(files, images_dir, class_names, skipped, label_of)


def ultralytics_label_path(image: str) -> str:
    """Ultralytics' rule: the label of ``.../images/.../x.jpg`` is ``.../labels/.../x.txt``
    (the last ``images`` folder of the path); an image with no ``images`` folder in its
    path has its label beside it (CVAT's and Darknet's layout)."""
    parts = image.split(os.sep)
    folders = parts[:-1]
    if "images" in folders:
        at = len(folders) - 1 - folders[::-1].index("images")
        parts[at] = "labels"
    return os.path.splitext(os.sep.join(parts))[0] + ".txt"


def yolo_files_to_coco(
    images: Sequence[str],
    root: str,
    class_names: Sequence[str] | ClassMap,
    skipped: list[str] | None = None,
    label_of: Callable[[str], str] = ultralytics_label_path,
) -> dict:
    """A COCO dataset dict from YOLO labels: one image per path of ``images`` (absolute),
    its ``file_name`` relative to ``root``, its label file ``label_of(image)`` (none: no
    objects); image sizes are read from the images. ``class_names``: a list (line k is
    class k) or ``{class id: name}`` (ids as the label files write them); class k becomes
    category k + 1. A polygon line (``class x1 y1 x2 y2 ...``, Ultralytics' segment labels)
    gives its bounding box, as Ultralytics trains detection on them.

    An image that cannot be read, or whose label file has a bad line, cannot be converted:
    without ``skipped`` that is a :class:`ConversionError` listing every such file (each
    bad line of it); with ``skipped`` (a list) the image is left out and its problem
    appended there, as Ultralytics skips a corrupt label, and only a set with nothing
    convertible is an error."""
    classes = as_class_map(class_names)
    out, annotations, problems = [], [], []
    for path in progress(images, len(images), "reading images", "img"):
        label_path = label_of(path)
        try:
            height, width = read_image(path).shape[:2]
            objects = []
            if os.path.isfile(label_path):
                objects = _read_yolo_labels(label_path, classes, width, height)
        except (ImageReadError, ConversionError) as err:
            problems.append(str(err))
            continue
        image_id = len(out) + 1
        rel = os.path.relpath(path, root)
        out.append({"id": image_id, "file_name": rel, "height": height, "width": width})
        for category_id, bbox in objects:
            annotations.append(_annotation(len(annotations) + 1, image_id, category_id, bbox))
    if not images:
        raise ConversionError(f"no images ({', '.join(IMAGE_EXTENSIONS)}) under {root}")
    if problems and (skipped is None or not out):
        counted = (
            f"none of the {len(images)} images can"
            if not out
            else f"{len(problems)} of {len(images)} images cannot"
        )
        raise ConversionError(
            f"{counted} be converted ({root}): "
            + "; ".join(problems[:MAX_LISTED])
            + (f"; and {len(problems) - MAX_LISTED} more" if len(problems) > MAX_LISTED else "")
        )
    if skipped is not None:
        skipped.extend(problems)
    return {"images": out, "annotations": annotations, "categories": coco_categories(classes)}


def image_files(folder: str) -> list[str]:
    """The image files under ``folder`` (recursively), absolute, sorted."""
    return [os.path.join(folder, rel) for rel in _image_files(folder)]


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
    path: str, classes: ClassMap, width: int, height: int
) -> list[tuple[int, list[float]]]:
    """(category id, COCO bbox in pixels) per line of a YOLO label file; a
    :class:`ConversionError` naming every bad line (``path:line: why``) otherwise."""
    objects, bad = [], []
    with open(path, encoding="utf-8") as f:
        for line_no, line in enumerate(f, start=1):
            if not line.split():
                continue
            try:
                objects.append(_yolo_object(line, classes, width, height))
            except ValueError as err:
                bad.append(f"{path}:{line_no}: {err}")
    if bad:
        more = len(bad) - MAX_LISTED
        raise ConversionError(
            "; ".join(bad[:MAX_LISTED]) + (f"; and {more} more" if more > 0 else "")
        )
    return objects


def _yolo_object(line: str, classes: ClassMap, width: int, height: int) -> tuple[int, list[float]]:
    """One label line as (category id, COCO bbox in pixels); ``ValueError`` saying why not.
    ``class cx cy w h``, or a polygon ``class x1 y1 x2 y2 x3 y3 ...`` (its bounding box)."""
    fields = line.split()
    polygon = len(fields) >= 7 and len(fields) % 2 == 1
    if len(fields) != 5 and not polygon:
        raise ValueError(
            f"expected 'class cx cy w h', got {len(fields)} values (a polygon is 'class x1 y1 "
            "x2 y2 x3 y3 ...')"
        )
    try:
        cls = int(fields[0])
        values = [float(v) for v in fields[1:]]
    except ValueError:
        raise ValueError(f"not numbers: {line.strip()!r}") from None
    if cls not in classes:
        raise ValueError(_unknown_class(cls, classes))
    if not all(math.isfinite(v) for v in values) or (not polygon and min(values[2:]) < 0):
        raise ValueError(f"invalid box {fields[1:]}")
    if not all(-FRACTION_SLACK <= v <= 1 + FRACTION_SLACK for v in values):
        raise ValueError(
            f"{'polygon' if polygon else 'box'} {' '.join(fields[1:])} is outside 0..1: YOLO "
            "labels give positions and sizes as fractions of the image's width and height "
            "(these look like pixels)"
        )
    if polygon:
        xs, ys = values[0::2], values[1::2]
        cx, cy = (min(xs) + max(xs)) / 2, (min(ys) + max(ys)) / 2
        w, h = max(xs) - min(xs), max(ys) - min(ys)
    else:
        cx, cy, w, h = values
    x1 = min(max((cx - w / 2) * width, 0.0), width)
    y1 = min(max((cy - h / 2) * height, 0.0), height)
    x2 = min(max((cx + w / 2) * width, 0.0), width)
    y2 = min(max((cy + h / 2) * height, 0.0), height)
    return cls + 1, [x1, y1, x2 - x1, y2 - y1]


def _unknown_class(cls: int, classes: ClassMap) -> str:
    ids = sorted(classes)
    if ids == list(range(len(ids))):
        return f"class {cls} outside 0..{len(ids) - 1}"
    return f"class {cls} is not one of the class ids {', '.join(map(str, ids))}"


def voc_split_ids(voc_root: str, split: str) -> list[str]:
    """The image ids of ``VOC_ROOT/ImageSets/Main/<split>.txt`` (the first word of a line)."""
    split_file = os.path.join(voc_root, "ImageSets", "Main", f"{split}.txt")
    if not os.path.isfile(split_file):
        raise ConversionError(f"split file not found: {split_file}")
    with open(split_file, encoding="utf-8") as f:
        return [line.split()[0] for line in f if line.strip()]


def voc_to_coco(voc_root: str, split: str, class_names: Sequence[str] = VOC_CLASSES) -> dict:
    """A COCO dataset dict from a VOC-layout folder (``file_name`` relative to JPEGImages)."""
    return voc_files_to_coco(voc_root, voc_split_ids(voc_root, split), class_names)


def voc_files_to_coco(
    voc_root: str,
    ids: Sequence[str],
    class_names: Sequence[str],
    skipped: list[str] | None = None,
    desc: str = "reading VOC annotations",
) -> dict:
    """A COCO dataset dict from ``Annotations/<id>.xml`` of ``ids``, ``class_names`` in
    category order (ids 1..K). Objects of another class are an error naming them, their
    count and ``--classes``; an unreadable xml file is too, unless ``skipped`` (a list)
    takes it: its image is then left out."""
    category_of = {name: k + 1 for k, name in enumerate(class_names)}
    images, annotations, unknown = [], [], {}
    for voc_id in progress(ids, len(ids), desc, "img"):
        xml_path = os.path.join(voc_root, "Annotations", f"{voc_id}.xml")
        try:
            image, objects = _read_voc_xml(xml_path, voc_root)
        except ConversionError as err:
            if skipped is None:
                raise
            skipped.append(str(err))
            continue
        image["id"] = len(images) + 1
        images.append(image)
        for name, bbox, difficult in objects:
            if name not in category_of:
                unknown.setdefault(name, xml_path)
                continue
            ann = _annotation(len(annotations) + 1, image["id"], category_of[name], bbox)
            ann["iscrowd"] = int(difficult)
            annotations.append(ann)
    if unknown:
        listed = ", ".join(repr(n) for n in sorted(unknown)[:MAX_LISTED])
        known = "the 20 VOC classes" if tuple(class_names) == VOC_CLASSES else "the class list"
        raise ConversionError(
            f"objects of {len(unknown)} classes not in {known}: {listed} (the first in "
            f"{unknown[sorted(unknown)[0]]}): give every class name, one per line, with "
            "--classes FILE"
        )
    if not images and ids:
        raise ConversionError(
            f"none of the {len(ids)} VOC annotations in {os.path.join(voc_root, 'Annotations')} "
            "can be read: " + "; ".join((skipped or [])[:3])
        )
    return {
        "images": images,
        "annotations": annotations,
        "categories": coco_categories(class_names),
    }


def voc_class_names(voc_root: str, ids: Sequence[str]) -> list[str]:
    """The class names the objects of ``Annotations/<id>.xml`` use, sorted (the 20 VOC
    classes come out in VOC's own order, which is alphabetical); unreadable files are
    left to the conversion to report."""
    names = set()
    for voc_id in ids:
        try:
            _, objects = _read_voc_xml(
                os.path.join(voc_root, "Annotations", f"{voc_id}.xml"), voc_root
            )
        except ConversionError:
            continue
        names.update(name for name, _, _ in objects)
    return sorted(names)


def _read_voc_xml(xml_path: str, voc_root: str) -> tuple[dict, list[tuple[str, list[float], bool]]]:
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
        objects.append((name, [x1, y1, x2 - x1, y2 - y1], difficult))
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
    for sub_parser in (yolo, voc):
        sub_parser.add_argument("--force", action="store_true", help="replace an existing --out")
    args = parser.parse_args(argv)
    if os.path.exists(args.out) and not args.force:
        parser.exit(1, f"error: --out {args.out} exists: pass --force to replace it\n")

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
