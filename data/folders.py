"""A dataset given as one folder (``data=path/to/dataset``): its layout found, YOLO labels
converted to COCO once.

Recognised, in this order:

- **a YOLO ``data.yaml``** (Ultralytics' format: ``path``, ``train``/``val`` image folders,
  ``names`` as a list or ``{index: name}``), given itself or found in the folder. Labels are
  beside the images with ``images`` replaced by ``labels`` in the path, as Ultralytics has
  them. Each split is converted (``msdet.data.convert_labels``) into
  ``<data.cache_dir>/folders/`` and converted again only when its labels change; an image
  whose label file is bad (or which cannot be read) is left out with a warning naming it.
- **COCO json files** in ``annotations/`` or the folder itself: the one named ``*train*``
  and the one named ``*val*``, each with the image folder that holds most of a sample of
  its images (``train2017/``, ``train/``, ``images/train/``, ``images/``, or the folder
  itself). A dataset written by ``python -m msdet.data.convert_labels`` or the built-in
  shapes set read this way too.
- **YOLO folders without a yaml**: ``images/{train,val}`` and ``labels/{train,val}`` with
  the class names in ``classes.txt`` (one per line).

Anything else is an error saying what was looked for.
"""

from __future__ import annotations

import glob
import hashlib
import json
import logging
import os
from dataclasses import dataclass, field

import yaml

from msdet.data.convert_labels import ConversionError, read_class_names, write_json, yolo_to_coco

log = logging.getLogger(__name__)

SPLITS = ("train", "val")
YAML_NAMES = ("data.yaml", "dataset.yaml")
# Images of an annotation file (spread over it) looked for when finding its image folder.
FOLDER_SAMPLE = 20
# Files left out of a YOLO split that its warning names; data.check counts them all.
MAX_WARNED = 10


class DatasetFolderError(ValueError):
    """A folder given as ``data=`` whose layout msdet cannot read."""


@dataclass
class FolderLayout:
    """Where each split's annotation file and images are (absolute paths), and how the
    layout was recognised (for the log)."""

    splits: dict[str, tuple[str, str]] = field(default_factory=dict)
    kind: str = "coco"  # coco | yolo
    # split -> the YOLO files its conversion left out, each with its problem
    skipped: dict[str, list[str]] = field(default_factory=dict)


def find_layout(path: str, cache_dir: str, splits: tuple[str, ...] = SPLITS) -> FolderLayout:
    """The layout of the dataset at ``path`` (a folder or a YOLO yaml) for ``splits``."""
    path = os.path.abspath(path)
    yaml_file = path if path.endswith((".yaml", ".yml")) else _first_file(path, YAML_NAMES)
    if yaml_file:
        return _from_yolo_yaml(yaml_file, cache_dir, splits)
    if not os.path.isdir(path):
        raise DatasetFolderError(f"data={path}: no such folder")
    coco = _coco_files(path)
    if coco:
        return _from_coco(path, coco, splits)
    if os.path.isdir(os.path.join(path, "images")) and os.path.isdir(os.path.join(path, "labels")):
        names_file = os.path.join(path, "classes.txt")
        if not os.path.isfile(names_file):
            raise DatasetFolderError(
                f"data={path}: a YOLO folder (images/, labels/) needs its class names: a "
                "data.yaml with 'names', or classes.txt with one name per line"
            )
        names = read_class_names(names_file)
        layout = FolderLayout(kind="yolo")
        for split in splits:
            images = os.path.join(path, "images", split)
            layout.splits[split], layout.skipped[split] = _converted(
                images, os.path.join(path, "labels", split), names, path, split, cache_dir
            )
        return layout
    raise DatasetFolderError(
        f"data={path}: not a dataset msdet recognises: it looks for a YOLO data.yaml, COCO "
        "json files (annotations/*train*.json and *val*.json), or images/ and labels/ with "
        "classes.txt"
    )


def _first_file(folder: str, names: tuple[str, ...]) -> str | None:
    for name in names:
        candidate = os.path.join(folder, name)
        if os.path.isfile(candidate):
            return candidate
    return None


def _coco_files(folder: str) -> dict[str, str]:
    """split -> the COCO json of that split under ``folder`` (``annotations/`` first; a file
    named for one split before one named for both, e.g. ``trainval``)."""
    files = [
        f
        for pattern in ("annotations/*.json", "*.json")
        for f in sorted(glob.glob(os.path.join(folder, pattern)))
    ]
    found: dict[str, str] = {}
    for split in SPLITS:
        named = [f for f in files if split in os.path.basename(f).lower() and _is_coco(f)]
        alone = [f for f in named if not any(o in os.path.basename(f).lower()
                                             for o in SPLITS if o != split)]  # fmt: skip
        if alone or named:
            found[split] = (alone or named)[0]
    return found


def _is_coco(file: str) -> bool:
    try:
        with open(file, encoding="utf-8") as f:
            head = f.read(4096)
    except OSError:
        return False
    return '"images"' in head or '"categories"' in head or '"annotations"' in head


def _from_coco(folder: str, files: dict[str, str], splits: tuple[str, ...]) -> FolderLayout:
    missing = [s for s in splits if s not in files]
    if missing:
        raise DatasetFolderError(
            f"data={folder}: no COCO json for {' and '.join(missing)} (found "
            f"{', '.join(os.path.relpath(f, folder) for f in files.values())}; the files are "
            "told apart by 'train' and 'val' in their names)"
        )
    layout = FolderLayout(kind="coco")
    for split in splits:
        ann = files[split]
        layout.splits[split] = (ann, _image_folder_of(folder, ann, split))
    return layout


def _image_folder_of(folder: str, ann_file: str, split: str) -> str:
    """The folder under ``folder`` that holds the most of a sample of the images
    ``ann_file`` names (a few files may be missing: one absent file decides nothing)."""
    with open(ann_file, encoding="utf-8") as f:
        images = json.load(f).get("images") or []
    if not images:
        raise DatasetFolderError(f"{ann_file}: no images")
    step = max(1, len(images) // FOLDER_SAMPLE)
    sample = [str(img.get("file_name", "")) for img in images[::step][:FOLDER_SAMPLE]]
    stem = os.path.splitext(os.path.basename(ann_file))[0]
    named = stem.split("_", 1)[1] if stem.startswith("instances_") else stem
    candidates = list(
        dict.fromkeys([named, split + "2017", split, os.path.join("images", split), "images", "."])
    )
    found = {}
    for candidate in candidates:
        img_dir = os.path.normpath(os.path.join(folder, candidate))
        found[img_dir] = sum(os.path.isfile(os.path.join(img_dir, name)) for name in sample)
    best = max(found, key=found.get)  # the first of equals: candidates in order of preference
    if found[best]:
        return best
    raise DatasetFolderError(
        f"data={folder}: none of {len(sample)} images of {os.path.relpath(ann_file, folder)} "
        f"(e.g. {', '.join(sample[:3])}) is in any of "
        f"{', '.join(c + '/' for c in candidates if c != '.')} or the folder itself; name "
        f"the folder with data.{split}.img_dir=..."
    )


def _from_yolo_yaml(yaml_file: str, cache_dir: str, splits: tuple[str, ...]) -> FolderLayout:
    try:
        with open(yaml_file, encoding="utf-8") as f:
            spec = yaml.safe_load(f) or {}
    except (OSError, yaml.YAMLError) as err:
        raise DatasetFolderError(f"{yaml_file}: not a readable YAML file ({err})") from err
    names = spec.get("names")
    if isinstance(names, dict):
        names = [names[k] for k in sorted(names, key=int)]
    if not isinstance(names, list) or not names:
        raise DatasetFolderError(f"{yaml_file}: 'names' must list the class names")
    here = os.path.dirname(os.path.abspath(yaml_file))
    root = spec.get("path") or here
    root = root if os.path.isabs(root) else os.path.normpath(os.path.join(here, root))
    layout = FolderLayout(kind="yolo")
    for split in splits:
        images = spec.get(split)
        if not isinstance(images, str):
            raise DatasetFolderError(
                f"{yaml_file}: '{split}' must name one image folder (lists and .txt files of "
                "image paths are not read), got {images!r}"
            )
        images = os.path.normpath(os.path.join(root, images))
        layout.splits[split], layout.skipped[split] = _converted(
            images, labels_folder(images), [str(n) for n in names], root, split, cache_dir
        )
    return layout


def labels_folder(images: str) -> str:
    """Ultralytics' rule: the labels of ``.../images/...`` are in ``.../labels/...``."""
    parts = images.split(os.sep)
    if "images" not in parts:
        raise DatasetFolderError(
            f"{images}: YOLO labels are found by replacing 'images' with 'labels' in the "
            "image folder's path, and this path has no 'images'"
        )
    at = len(parts) - 1 - parts[::-1].index("images")
    return os.sep.join([*parts[:at], "labels", *parts[at + 1 :]])


def _converted(
    images: str, labels: str, names: list[str], root: str, split: str, cache_dir: str
) -> tuple[tuple[str, str], list[str]]:
    """((COCO json, image folder), the files left out) of one YOLO split, converted unless
    its labels, images and class names are those of the last conversion. An image that
    cannot be converted (a bad label file, an unreadable image) is left out with a warning
    naming it, at every run; a split with nothing convertible is an error listing why."""
    signature = _signature(images, labels, names)
    key = hashlib.sha1(os.path.abspath(images).encode()).hexdigest()[:10]
    out = os.path.join(
        os.path.abspath(cache_dir), "folders", f"{os.path.basename(root)}-{key}", f"{split}.json"
    )
    stamp, left_out = out + ".signature", out + ".skipped"
    if os.path.isfile(out) and _read(stamp) == signature:
        skipped = json.loads(_read(left_out) or "[]")
    else:
        log.info("converting the YOLO labels of %s (%s) to COCO json: %s", root, split, out)
        skipped = []
        try:
            dataset = yolo_to_coco(images, labels, names, skipped)
        except ConversionError as err:
            raise DatasetFolderError(str(err)) from err
        write_json(dataset, out)
        with open(left_out, "w", encoding="utf-8") as f:
            json.dump(skipped, f)
        with open(stamp, "w", encoding="utf-8") as f:
            f.write(signature)
    if skipped:
        with open(out, encoding="utf-8") as f:
            kept = len(json.load(f)["images"])
        log.warning(
            "%d of %d images of %s are left out: their labels (or the images) cannot be read: %s%s",
            len(skipped),
            len(skipped) + kept,
            images,
            "; ".join(skipped[:MAX_WARNED]),
            f"; and {len(skipped) - MAX_WARNED} more (python -m msdet.data.check lists them)"
            if len(skipped) > MAX_WARNED
            else "",
        )
    return (out, images), skipped


def _signature(images: str, labels: str, names: list[str]) -> str:
    """Changes when a label or image file is added, removed or rewritten, or a name changes."""
    digest = hashlib.sha1("\n".join(names).encode())
    for folder in (images, labels):
        for base, _, files in sorted(os.walk(folder)):
            for name in sorted(files):
                stat = os.stat(os.path.join(base, name))
                digest.update(f"{base}/{name}:{stat.st_size}:{stat.st_mtime_ns}\n".encode())
    return digest.hexdigest()


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except OSError:
        return None
