"""Labelling tools' exports, written file for file as each tool writes them, on a few small
real images (discs and squares drawn with OpenCV), for the dataset-folder tests.

Every layout holds the same two classes, ``disc`` and ``square``, so that one compiled
training step serves them all. Where each tool's format comes from:

- Roboflow (COCO and YOLOv5-v8): its export archives: ``train/ valid/ test/``, a category 0
  named for the dataset that groups the others, ids from 0, ``<stem>_jpg.rf.<hash>.jpg``
  names, ``data.yaml`` with ``../train/images`` and a ``roboflow:`` block;
- CVAT 2.x: its COCO 1.0 export (``annotations/instances_default.json``, ``images/``,
  ids from 1, ``attributes`` per annotation) and YOLO 1.1 (Datumaro's YOLO exporter:
  ``obj.data`` with Darknet's ``data/`` prefix, ``obj.names``, ``train.txt``,
  ``obj_train_data/`` with each label beside its image, values ``%.6f``);
- Label Studio: label-studio-converter 0.0.59's ``convert_to_yolo`` (``classes.txt``,
  ``notes.json``, ``images/``, ``labels/``) and ``convert_to_coco`` (``result.json`` with
  ids from 0, ``file_name`` ``images/<name>``, ``ignore`` and ``segmentation`` keys);
- labelme 6.3.1's ``write_label_file`` (``version``, ``flags``, ``shapes`` with
  ``label``, ``points``, ``group_id``, ``description``, ``shape_type``, ``flags``,
  ``mask``, then ``imagePath``, ``imageData``, ``imageHeight``, ``imageWidth``);
- Pascal VOC: VOC2007's xml and ``ImageSets/Main`` lists;
- Ultralytics: ``data.yaml`` with ``train:`` an image list (``./images/...`` lines, as its
  coco2017.txt) or a list of folders.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path

import cv2
import numpy as np

CLASSES = ("disc", "square")
# (height, width) of the images: small, not square, not all alike.
SIZES = ((72, 96), (96, 80), (64, 64), (80, 112))


def drawn(k: int) -> tuple[np.ndarray, list[tuple[int, tuple[int, int, int, int]]]]:
    """Image ``k`` (uint8 BGR, noisy background) and its objects: (class id, x, y, w, h)."""
    h, w = SIZES[k % len(SIZES)]
    rng = np.random.default_rng(k)
    img = rng.integers(60, 120, (h, w, 3), dtype=np.uint8)
    objects = []
    side = 18 + (k % 3) * 4
    x, y = 4 + (k * 7) % (w - side - 8), 4 + (k * 5) % (h - side - 8)
    cv2.circle(img, (x + side // 2, y + side // 2), side // 2, (40, 200, 240), -1)
    objects.append((0, (x, y, side, side)))
    if k % 2 == 0:  # every other image has a square too
        sx, sy = w - side - 3, h - side - 3
        cv2.rectangle(img, (sx, sy), (sx + side - 1, sy + side - 1), (230, 60, 60), -1)
        objects.append((1, (sx, sy, side, side)))
    return img, objects


def _save(path: Path, img: np.ndarray) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    ok, buf = cv2.imencode(path.suffix, img)
    assert ok, path
    path.write_bytes(buf.tobytes())


def _yolo_line(cls: int, box, w: int, h: int, fmt: str = "%.6f") -> str:
    x, y, bw, bh = box
    values = ((x + bw / 2) / w, (y + bh / 2) / h, bw / w, bh / h)
    return f"{cls} " + " ".join(fmt % v if fmt else str(v) for v in values)


def _json(path: Path, data, indent: int | None = None) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=indent))


def roboflow_coco(root: Path) -> Path:
    """Roboflow's "COCO" export: train/ (4), valid/ (2), test/ (1), each with its json."""
    ids = {"train": range(0, 4), "valid": range(4, 6), "test": range(6, 7)}
    for split, ks in ids.items():
        images, annotations = [], []
        for k in ks:
            img, objects = drawn(k)
            digest = hashlib.md5(f"img{k}".encode()).hexdigest()
            name = f"img{k}_jpg.rf.{digest}.jpg"
            _save(root / split / name, img)
            images.append({"id": len(images), "license": 1, "file_name": name,
                           "height": img.shape[0], "width": img.shape[1],
                           "date_captured": "2024-05-02T10:00:00+00:00"})  # fmt: skip
            for cls, box in objects:
                annotations.append({"id": len(annotations), "image_id": len(images) - 1,
                                    "category_id": cls + 1, "bbox": list(box),
                                    "area": box[2] * box[3], "segmentation": [],
                                    "iscrowd": 0})  # fmt: skip
        categories = [{"id": 0, "name": "shapes-x1y2", "supercategory": "none"}]
        categories += [{"id": c + 1, "name": n, "supercategory": "shapes-x1y2"}
                       for c, n in enumerate(CLASSES)]  # fmt: skip
        _json(root / split / "_annotations.coco.json", {
            "info": {"year": "2024", "version": "1", "description": "Exported from roboflow.com",
                     "contributor": "", "url": "https://public.roboflow.com/object-detection/x",
                     "date_created": "2024-05-02T10:00:00+00:00"},
            "licenses": [{"id": 1, "url": "https://creativecommons.org/licenses/by/4.0/",
                          "name": "CC BY 4.0"}],
            "categories": categories, "images": images, "annotations": annotations,
        })  # fmt: skip
    (root / "README.dataset.txt").write_text("# shapes > 2024-05-02\n")
    (root / "README.roboflow.txt").write_text("This dataset was exported via roboflow.com\n")
    return root


def roboflow_yolo(root: Path) -> Path:
    """Roboflow's "YOLOv8" export: data.yaml with ../train/images, train/ valid/ test/."""
    for split, ks in {"train": range(0, 4), "valid": range(4, 6), "test": range(6, 7)}.items():
        for k in ks:
            img, objects = drawn(k)
            stem = f"img{k}_jpg.rf.{hashlib.md5(str(k).encode()).hexdigest()}"
            _save(root / split / "images" / f"{stem}.jpg", img)
            h, w = img.shape[:2]
            lines = [_yolo_line(c, b, w, h, "") for c, b in objects]
            (root / split / "labels" / f"{stem}.txt").parent.mkdir(parents=True, exist_ok=True)
            (root / split / "labels" / f"{stem}.txt").write_text("\n".join(lines))
    (root / "data.yaml").write_text(
        "train: ../train/images\nval: ../valid/images\ntest: ../test/images\n\nnc: 2\n"
        "names: ['disc', 'square']\n\nroboflow:\n  workspace: me\n  project: shapes-x1y2\n"
        "  version: 1\n  license: CC BY 4.0\n"
        "  url: https://universe.roboflow.com/me/shapes-x1y2/dataset/1\n"
    )
    return root


def cvat_coco(root: Path) -> Path:
    """CVAT's "COCO 1.0" export of a task without subsets (8 images)."""
    images, annotations = [], []
    for k in range(8):
        img, objects = drawn(k)
        name = f"frame_{k:06d}.png"
        _save(root / "images" / name, img)
        images.append({"id": k + 1, "width": img.shape[1], "height": img.shape[0],
                       "file_name": name, "license": 0, "flickr_url": "", "coco_url": "",
                       "date_captured": 0})  # fmt: skip
        for cls, box in objects:
            annotations.append({"id": len(annotations) + 1, "image_id": k + 1,
                                "category_id": cls + 1, "segmentation": [],
                                "area": float(box[2] * box[3]), "bbox": [float(v) for v in box],
                                "iscrowd": 0,
                                "attributes": {"occluded": False, "rotation": 0.0}})  # fmt: skip
    _json(root / "annotations" / "instances_default.json", {
        "licenses": [{"name": "", "id": 0, "url": ""}],
        "info": {"contributor": "", "date_created": "", "description": "", "url": "",
                 "version": "", "year": ""},
        "categories": [{"id": c + 1, "name": n, "supercategory": ""}
                       for c, n in enumerate(CLASSES)],
        "images": images, "annotations": annotations,
    })  # fmt: skip
    return root


def cvat_yolo(root: Path) -> Path:
    """CVAT's "YOLO 1.1" export of a task without subsets (8 images)."""
    listed = []
    for k in range(8):
        img, objects = drawn(k)
        h, w = img.shape[:2]
        _save(root / "obj_train_data" / f"frame_{k:06d}.jpg", img)
        lines = "".join(_yolo_line(c, b, w, h) + "\n" for c, b in objects)
        (root / "obj_train_data" / f"frame_{k:06d}.txt").write_text(lines)
        listed.append(f"data/obj_train_data/frame_{k:06d}.jpg")
    (root / "obj.names").write_text("".join(f"{n}\n" for n in CLASSES))
    (root / "train.txt").write_text("".join(f"{p}\n" for p in listed))
    (root / "obj.data").write_text(
        "classes = 2\ntrain = data/train.txt\nnames = data/obj.names\nbackup = backup/\n"
    )
    return root


def label_studio_yolo(root: Path) -> Path:
    """Label Studio's "YOLO" export (label-studio-converter's convert_to_yolo), 8 images."""
    (root / "labels").mkdir(parents=True, exist_ok=True)
    for k in range(8):
        img, objects = drawn(k)
        h, w = img.shape[:2]
        name = f"{hashlib.md5(str(k).encode()).hexdigest()[:8]}-photo{k}"
        _save(root / "images" / f"{name}.jpg", img)
        # One value per write, a space between and a newline after the last, as it writes.
        text = "".join(_yolo_line(c, b, w, h, "") + "\n" for c, b in objects)
        (root / "labels" / f"{name}.txt").write_text(text)
    (root / "classes.txt").write_text("".join(f"{n}\n" for n in CLASSES))
    _json(root / "notes.json", {
        "categories": [{"id": c, "name": n} for c, n in enumerate(CLASSES)],
        "info": {"year": 2024, "version": "1.0", "contributor": "Label Studio"},
    }, indent=2)  # fmt: skip
    return root


def label_studio_coco(root: Path) -> Path:
    """Label Studio's "COCO" export (label-studio-converter's convert_to_coco), 8 images."""
    images, annotations = [], []
    for k in range(8):
        img, objects = drawn(k)
        name = f"images/{hashlib.md5(str(k).encode()).hexdigest()[:8]}-photo{k}.jpg"
        _save(root / name, img)
        images.append({"width": img.shape[1], "height": img.shape[0], "id": k,
                       "file_name": name})  # fmt: skip
        for cls, (x, y, bw, bh) in objects:
            annotations.append({"id": len(annotations), "image_id": k, "category_id": cls,
                                "segmentation": [], "bbox": [x, y, bw, bh], "ignore": 0,
                                "iscrowd": 0, "area": bw * bh})  # fmt: skip
    _json(root / "result.json", {
        "images": images,
        "categories": [{"id": c, "name": n} for c, n in enumerate(CLASSES)],
        "annotations": annotations,
        "info": {"year": 2024, "version": "1.0", "description": "", "contributor": "Label Studio",
                 "url": "", "date_created": "2024-05-02 10:00:00.000000"},
    }, indent=2)  # fmt: skip
    return root


def labelme(root: Path) -> Path:
    """labelme's per-image json beside each image (8): discs as polygons, squares as
    rectangles, and one point (not a box)."""
    for k in range(8):
        img, objects = drawn(k)
        _save(root / f"photo{k}.jpg", img)
        shapes = []
        for cls, (x, y, bw, bh) in objects:
            if cls == 0:
                cx, cy, r = x + bw / 2, y + bh / 2, bw / 2
                angles = np.linspace(0, 2 * np.pi, 12, endpoint=False)
                points = [[cx + r * np.cos(a), cy + r * np.sin(a)] for a in angles]
                kind = "polygon"
            else:  # the corners in the order they were dragged: bottom-right first
                points, kind = [[x + bw, y + bh], [x, y]], "rectangle"
            shapes.append({"label": CLASSES[cls], "points": [[float(a), float(b)] for a, b in points],
                           "group_id": None, "description": "", "shape_type": kind,
                           "flags": {}, "mask": None})  # fmt: skip
        if k == 0:
            shapes.append({"label": "disc", "points": [[5.0, 5.0]], "group_id": None,
                           "description": "", "shape_type": "point", "flags": {}, "mask": None})  # fmt: skip
        _json(root / f"photo{k}.json", {
            "version": "6.3.1", "flags": {}, "shapes": shapes, "imagePath": f"photo{k}.jpg",
            "imageData": None, "imageHeight": img.shape[0], "imageWidth": img.shape[1],
        }, indent=2)  # fmt: skip
    return root


VOC_XML = """<annotation>
\t<folder>VOC2007</folder>
\t<filename>{name}.jpg</filename>
\t<source>
\t\t<database>The VOC2007 Database</database>
\t\t<annotation>PASCAL VOC2007</annotation>
\t</source>
\t<size>
\t\t<width>{w}</width>
\t\t<height>{h}</height>
\t\t<depth>3</depth>
\t</size>
\t<segmented>0</segmented>
{objects}</annotation>
"""
VOC_OBJECT = """\t<object>
\t\t<name>{cls}</name>
\t\t<pose>Unspecified</pose>
\t\t<truncated>0</truncated>
\t\t<difficult>0</difficult>
\t\t<bndbox>
\t\t\t<xmin>{x1}</xmin>
\t\t\t<ymin>{y1}</ymin>
\t\t\t<xmax>{x2}</xmax>
\t\t\t<ymax>{y2}</ymax>
\t\t</bndbox>
\t</object>
"""


def voc(root: Path) -> Path:
    """A Pascal VOC folder: Annotations/, JPEGImages/, ImageSets/Main/{train,val}.txt."""
    names = []
    for k in range(6):
        img, objects = drawn(k)
        name = f"{2007_000000 + k:06d}"
        names.append(name)
        _save(root / "JPEGImages" / f"{name}.jpg", img)
        xml_objects = "".join(
            VOC_OBJECT.format(cls=CLASSES[c], x1=x + 1, y1=y + 1, x2=x + bw, y2=y + bh)
            for c, (x, y, bw, bh) in objects
        )
        text = VOC_XML.format(name=name, w=img.shape[1], h=img.shape[0], objects=xml_objects)
        (root / "Annotations").mkdir(parents=True, exist_ok=True)
        (root / "Annotations" / f"{name}.xml").write_text(text)
    (root / "ImageSets" / "Main").mkdir(parents=True)
    (root / "ImageSets" / "Main" / "train.txt").write_text("".join(f"{n}\n" for n in names[:4]))
    (root / "ImageSets" / "Main" / "val.txt").write_text("".join(f"{n}\n" for n in names[4:]))
    return root


def _ultralytics_images(root: Path, folder: str, ks: range) -> list[str]:
    written = []
    for k in ks:
        img, objects = drawn(k)
        h, w = img.shape[:2]
        _save(root / "images" / folder / f"{k}.jpg", img)
        label = root / "labels" / folder / f"{k}.txt"
        label.parent.mkdir(parents=True, exist_ok=True)
        label.write_text("".join(_yolo_line(c, b, w, h) + "\n" for c, b in objects))
        written.append(f"./images/{folder}/{k}.jpg")
    return written


def ultralytics_txt(root: Path) -> Path:
    """An Ultralytics data.yaml whose train and val are image lists (.txt)."""
    (root / "train.txt").write_text("\n".join(_ultralytics_images(root, "all", range(0, 4))))
    (root / "val.txt").write_text("\n".join(_ultralytics_images(root, "more", range(4, 6))))
    (root / "data.yaml").write_text(
        "path: .\ntrain: train.txt\nval: val.txt\nnames:\n  0: disc\n  1: square\n"
    )
    return root


def ultralytics_folders(root: Path) -> Path:
    """An Ultralytics data.yaml whose train is a list of two image folders."""
    _ultralytics_images(root, "day", range(0, 2))
    _ultralytics_images(root, "night", range(2, 4))
    _ultralytics_images(root, "val", range(4, 6))
    (root / "data.yaml").write_text(
        "path: .\ntrain:\n  - images/day\n  - images/night\nval: images/val\n"
        "names: [disc, square]\n"
    )
    return root


# layout -> (writer, the tool that data.folders should name, train and val image counts)
LAYOUTS: dict[str, tuple[Callable[[Path], Path], str, tuple[int, int]]] = {
    "roboflow_coco": (roboflow_coco, "Roboflow COCO export", (4, 2)),
    "roboflow_yolo": (roboflow_yolo, "Roboflow YOLO export", (4, 2)),
    "cvat_coco": (cvat_coco, "CVAT COCO export", (7, 1)),
    "cvat_yolo": (cvat_yolo, "CVAT's YOLO 1.1", (7, 1)),
    "label_studio_yolo": (label_studio_yolo, "Label Studio YOLO export", (7, 1)),
    "label_studio_coco": (label_studio_coco, "Label Studio COCO export", (7, 1)),
    "labelme": (labelme, "labelme json files", (7, 1)),
    "voc": (voc, "Pascal VOC folder", (4, 2)),
    "ultralytics_txt": (ultralytics_txt, "Ultralytics data.yaml", (4, 2)),
    "ultralytics_folders": (ultralytics_folders, "Ultralytics data.yaml", (4, 2)),
}


def objects_of(k: int) -> list[tuple[str, tuple[int, int, int, int]]]:
    """(class name, x, y, w, h) of image ``k``: what every layout's reader must find."""
    return [(CLASSES[c], box) for c, box in drawn(k)[1]]
