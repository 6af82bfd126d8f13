"""A dataset given as one folder (``data=path/to/dataset``): its layout found, read as the
tool that wrote it left it, and anything not COCO converted to COCO json once.

Recognised (docs/datasets.md has one section per layout):

- **YOLO**: an Ultralytics or Roboflow ``data.yaml``, a Darknet ``obj.data`` (CVAT's YOLO
  1.1), or ``images/`` and ``labels/`` with ``classes.txt`` or Label Studio's
  ``notes.json`` (:mod:`msdet.data.yolo_layouts`);
- **COCO**: json files named for their splits, Roboflow's ``train/ valid/ test/`` with
  ``_annotations.coco.json``, CVAT's ``annotations/instances_default.json``, Label
  Studio's ``result.json`` (:mod:`msdet.data.coco_layouts`);
- **Pascal VOC**: ``Annotations/``, ``JPEGImages/``, ``ImageSets/Main`` (:mod:`msdet.data.voc_folder`);
- **labelme**: one json per image (:mod:`msdet.data.labelme`).

A folder that holds two of these (a COCO json beside YOLO labels) is an error naming both
and the file that picks one (``data=FOLDER/data.yaml``, ``data=FOLDER/<the json>``): msdet
does not guess which one is current. ``data=`` may name that file itself: a yaml, a COCO
json, an ``obj.data``, or the ``classes.txt`` (``notes.json``) of ``images/`` and ``labels/``. A set without a val split gets one held out of train, 1 image in
5 by a hash of its name (:mod:`msdet.data.splits`), and says so.

Converted splits go to ``<data.cache_dir>/folders/`` and are converted again only when an
input file changes; an image whose labels are bad (or which cannot be read) is left out
with a warning naming it (:mod:`msdet.data.layout`).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

from msdet.common.cache import dataset_cache_dir
from msdet.data.coco_layouts import coco_files, read_coco_folder, read_single_coco, tool_of
from msdet.data.labelme import read_labelme, read_labelme_folder
from msdet.data.layout import DatasetFolderError, FolderLayout
from msdet.data.voc_folder import is_voc, read_voc_folder
from msdet.data.yolo_layouts import read_darknet, read_yolo_folders, read_yolo_yaml

__all__ = ["DatasetFolderError", "FolderLayout", "find_layout"]

SPLITS = ("train", "val")
YAML_NAMES = ("data.yaml", "dataset.yaml")
DARKNET_FILE = "obj.data"
CLASS_FILES = ("notes.json", "classes.txt")  # of images/ and labels/ (Label Studio's first)
# labelme files looked at to recognise a labelme folder (the first few of the folder).
LABELME_PROBE = 5


@dataclass
class Candidate:
    """A layout found in a folder: its format, the files that show it, the ``data=`` value
    that picks it, and how to read it."""

    kind: str  # YOLO | COCO | Pascal VOC | labelme
    evidence: str
    choose: str
    read: Callable[[str, tuple[str, ...]], FolderLayout]


def find_layout(path: str, cache_dir: str | None, splits: tuple[str, ...] = SPLITS) -> FolderLayout:
    """The layout of the dataset at ``path`` (a folder, or the file that picks its layout)
    for ``splits``; conversions go under ``cache_dir`` (None: msdet's cache root)."""
    path = os.path.abspath(path)
    cache = dataset_cache_dir(cache_dir)
    if os.path.isfile(path):
        return _from_file(path, cache, splits)
    if not os.path.isdir(path):
        raise DatasetFolderError(f"data={path}: no such folder")
    found = candidates(path)
    if not found:
        raise DatasetFolderError(
            f"data={path}: not a dataset msdet recognises: it looks for a YOLO data.yaml, "
            "obj.data or images/ and labels/ with classes.txt; COCO json files "
            "(annotations/*train*.json and *val*.json, train/_annotations.coco.json, one "
            "json for all); a VOC Annotations/ folder; labelme json files (docs/datasets.md)"
        )
    if len(found) > 1:
        raise DatasetFolderError(
            f"data={path} holds {len(found)} layouts: "
            + "; ".join(f"{c.kind} ({c.evidence})" for c in found)
            + ". msdet does not guess which one is current: choose one with "
            + " or ".join(f"data={c.choose}" for c in found)
        )
    return found[0].read(cache, splits)


def candidates(folder: str) -> list[Candidate]:
    """Every layout found in ``folder``, one per format (YOLO: a yaml before an obj.data
    before bare images/ and labels/)."""
    found = []
    yaml_file = _first_file(folder, YAML_NAMES)
    darknet = _first_file(folder, (DARKNET_FILE,))
    if yaml_file:
        found.append(Candidate("YOLO", _rel(yaml_file, folder), yaml_file,
                               lambda cache, splits: read_yolo_yaml(yaml_file, cache, splits)))  # fmt: skip
    elif darknet:
        found.append(Candidate("YOLO", _rel(darknet, folder), darknet,
                               lambda cache, splits: read_darknet(darknet, cache, splits)))  # fmt: skip
    elif all(os.path.isdir(os.path.join(folder, d)) for d in ("images", "labels")):
        names = _first_file(folder, CLASS_FILES) or folder
        found.append(Candidate("YOLO", "images/, labels/", names,
                               lambda cache, splits: read_yolo_folders(folder, cache, splits)))  # fmt: skip
    split_files, unsplit = coco_files(folder)
    coco = [*split_files.values(), *unsplit]
    if coco:
        shown = ", ".join(_rel(f, folder) for f in coco[:3])
        found.append(Candidate("COCO", shown, coco[0],
                               lambda cache, splits: read_coco_folder(folder, split_files, unsplit,
                                                                      cache, splits)))  # fmt: skip
    if is_voc(folder):
        found.append(Candidate("Pascal VOC", "Annotations/*.xml", folder,
                               lambda cache, splits: read_voc_folder(folder, cache, splits)))  # fmt: skip
    if _has_labelme_files(folder, set(coco)):
        found.append(Candidate("labelme", "one json per image", folder,
                               lambda cache, splits: read_labelme_folder(folder, cache, splits)))  # fmt: skip
    if len(found) > 1:  # only a file can pick one layout of several
        for c in found:
            if c.choose == folder:
                c.choose = f"{folder} after moving the other layout's files out"
    return found


def _from_file(path: str, cache: str, splits: tuple[str, ...]) -> FolderLayout:
    """``data=FILE``: the layout that file picks."""
    name = os.path.basename(path)
    if name.endswith((".yaml", ".yml")):
        return read_yolo_yaml(path, cache, splits)
    if name == DARKNET_FILE:
        return read_darknet(path, cache, splits)
    if name in CLASS_FILES:
        return read_yolo_folders(os.path.dirname(path), cache, splits)
    if name.endswith(".json"):
        folder = os.path.dirname(path)
        if os.path.basename(folder) == "annotations" or name == "_annotations.coco.json":
            folder = os.path.dirname(folder)
        split_files, _ = coco_files(folder)
        if path in split_files.values() and "train" in split_files:
            return read_coco_folder(folder, split_files, [], cache, splits)
        layout = FolderLayout(kind="coco", tool=tool_of([path]))
        return read_single_coco(folder, path, cache, splits, layout)
    raise DatasetFolderError(
        f"data={path}: a file given as data= must be a YOLO data.yaml, a COCO json, an "
        "obj.data or the classes.txt beside images/ and labels/; give the dataset's folder "
        "otherwise"
    )


def _first_file(folder: str, names: tuple[str, ...]) -> str | None:
    for name in names:
        candidate = os.path.join(folder, name)
        if os.path.isfile(candidate):
            return candidate
    return None


def _rel(path: str, folder: str) -> str:
    return os.path.relpath(path, folder)


def _has_labelme_files(folder: str, coco: set[str]) -> bool:
    """Whether labelme files are in ``folder`` or one level under it (a few looked at)."""
    looked = 0
    for base in [folder, *sorted(os.path.join(folder, d) for d in _subfolders(folder))]:
        for name in sorted(os.listdir(base)):
            path = os.path.join(base, name)
            if not name.lower().endswith(".json") or path in coco or not os.path.isfile(path):
                continue
            if read_labelme(path) is not None:
                return True
            looked += 1
            if looked >= LABELME_PROBE:
                return False
    return False


def _subfolders(folder: str) -> list[str]:
    return [
        d
        for d in os.listdir(folder)
        if not d.startswith(".") and os.path.isdir(os.path.join(folder, d))
    ]
