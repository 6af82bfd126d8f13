"""YOLO labels in the layouts the tools write them, each split converted to COCO json once.

- **An Ultralytics ``data.yaml``** (Roboflow's YOLOv5-v11 exports too): ``path`` (the root;
  relative to the yaml, which is the root when it is left out), ``train`` and ``val`` as an
  image folder, a ``.txt`` list of images, or a list of those; ``names`` as a list or as
  ``{class id: name}``, whose keys are the ids the label files use (``{0: a, 2: c}``:
  label 2 is ``c``, a label 1 is a bad line). Roboflow's ``train: ../train/images`` is read
  as ``train/images`` beside the yaml when only that exists, as Ultralytics does.
- **A Darknet ``obj.data``** (CVAT's YOLO 1.1 export): ``names`` (``obj.names``), one list
  per subset (``train = ...``, ``valid = ...``: lists of images), paths written with Darknet's
  ``data/`` prefix; each label beside its image (``obj_train_data/x.txt``).
- **``images/`` and ``labels/`` without a yaml**: split folders (``images/train``,
  ``images/val``) or one flat folder (Label Studio's YOLO export); class ids from Label
  Studio's ``notes.json`` when present, else ``classes.txt`` (line k is class k).

Labels are found by Ultralytics' rule (the last ``images`` folder of an image's path
replaced by ``labels``; beside the image without one) unless the layout says otherwise.
A set without a val split gets one held out (:mod:`msdet.data.splits`), said in the notes.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from typing import Any

import yaml

from msdet.common.paths import is_windows_path
from msdet.data.convert_labels import (
    IMAGE_EXTENSIONS,
    ConversionError,
    image_files,
    read_class_names,
    ultralytics_label_path,
    yolo_files_to_coco,
)
from msdet.data.layout import (
    DatasetFolderError,
    FolderLayout,
    cache_folder,
    converted,
    held_out_note,
    signature,
)
from msdet.data.splits import hold_out

# Folder and subset names a tool gives its splits, and the split each one is.
SPLIT_NAMES = {"train": "train", "val": "val", "valid": "val", "validation": "val"}
DARKNET_KEYS = ("classes", "names", "backup", "eval")  # obj.data's keys that are not subsets


def read_yolo_yaml(yaml_file: str, cache_dir: str, splits: Sequence[str]) -> FolderLayout:
    """The layout of an Ultralytics ``data.yaml`` (see the module docstring)."""
    try:
        with open(yaml_file, encoding="utf-8") as f:
            spec = yaml.safe_load(f) or {}
    except (OSError, yaml.YAMLError) as err:
        raise DatasetFolderError(f"{yaml_file}: not a readable YAML file ({err})") from err
    if not isinstance(spec, dict):
        raise DatasetFolderError(f"{yaml_file}: expected keys path, train, val, names")
    notes: list[str] = []
    classes = yaml_classes(spec.get("names"), spec.get("nc"), yaml_file, notes)
    here = os.path.dirname(os.path.abspath(yaml_file))
    root = here
    if spec.get("path"):
        root = _local(str(spec["path"]), here, yaml_file, "path", notes)
        if not os.path.isdir(root):
            raise DatasetFolderError(f"{yaml_file}: path: {spec['path']!r}: no folder {root}")
    lists = {}
    for key in ("train", "val"):
        if spec.get(key):
            lists[key] = _yaml_images(spec[key], root, yaml_file, key, notes)
    if "train" not in lists and ("train" in splits or "val" not in lists):
        raise DatasetFolderError(f"{yaml_file}: 'train' must name the training images")
    tool = "a Roboflow YOLO export" if "roboflow" in spec else "an Ultralytics data.yaml"
    layout = FolderLayout(kind="yolo", tool=f"{tool} ({os.path.basename(yaml_file)})")
    layout.notes += notes
    _convert(layout, root, lists, classes, cache_dir, splits, ultralytics_label_path,
             f"add val: to {os.path.basename(yaml_file)} (an image folder or a .txt list)")  # fmt: skip
    return layout


def yaml_classes(names: Any, nc: Any, where: str, notes: list[str]) -> dict[int, str]:
    """``{class id: name}`` of a yaml's ``names``: a list (position k is class k) or a
    mapping whose keys are the class ids as the label files write them. A mapping that
    cannot be honoured (a key that is not a whole number >= 0, two ids of one name) is an
    error naming the file and the key; ids other than 0..n-1 are honoured and noted."""
    if isinstance(names, list) and names:
        classes = {k: str(name) for k, name in enumerate(names)}
    elif isinstance(names, dict) and names:
        classes = {}
        for key, name in names.items():
            class_id = _class_id(key)
            if class_id is None:
                raise DatasetFolderError(
                    f"{where}: names key {key!r} ({name!r}) is not a class id: the keys of "
                    "'names' are the whole numbers >= 0 that the label files write (0: "
                    f"{name}), or give 'names' as a list in class order"
                )
            classes[class_id] = str(name)
    else:
        raise DatasetFolderError(
            f"{where}: 'names' must list the class names (a list, or {{class id: name}})"
        )
    ids_of: dict[str, list[int]] = {}
    for class_id, name in sorted(classes.items()):
        ids_of.setdefault(name, []).append(class_id)
    shared = {name: ids for name, ids in ids_of.items() if len(ids) > 1}
    if shared:
        name, ids = next(iter(shared.items()))
        raise DatasetFolderError(
            f"{where}: names keys {' and '.join(map(str, ids))} are both {name!r}: a model's "
            "classes are told apart by name; give each id its own name, or write one id in "
            "the label files for both"
        )
    ids = sorted(classes)
    if nc is not None and nc not in (len(ids), ids[-1] + 1):
        raise DatasetFolderError(
            f"{where}: nc is {nc} but names holds {len(ids)} classes (ids {_ids(ids)}): "
            "correct nc, or remove it (names alone is enough)"
        )
    if ids != list(range(len(ids))):
        missing = sorted(set(range(ids[-1] + 1)) - set(ids))
        notes.append(
            f"class ids are names' keys in {where}: "
            + ", ".join(f"{k} {classes[k]!r}" for k in ids[:10])
            + (" ..." if len(ids) > 10 else "")
            + (f"; no class has id {_ids(missing)}: such a label is a bad line" if missing else "")
        )
    return classes


def _class_id(key: Any) -> int | None:
    if isinstance(key, bool):
        return None
    if isinstance(key, int):
        return key if key >= 0 else None
    if isinstance(key, str) and key.strip().isdigit():
        return int(key.strip())
    return None


def _ids(ids: Sequence[int]) -> str:
    return ", ".join(map(str, ids[:10])) + (" ..." if len(ids) > 10 else "")


def _local(value: str, base: str, where: str, key: str, notes: list[str]) -> str:
    """``value`` (a yaml's or list's path) as an absolute path here: relative to ``base``;
    a Windows path is an error; Windows separators in a relative path are read as /."""
    if is_windows_path(value):
        raise DatasetFolderError(
            f"{where}: {key}: {value!r} is a Windows path, which does not exist on this "
            "machine: give the path here, or one relative to the file"
        )
    if "\\" in value:
        notes.append(f"{where}: {key}: {value!r} read as {value.replace(chr(92), '/')!r}")
        value = value.replace("\\", "/")
    return os.path.normpath(os.path.join(base, os.path.expanduser(value)))


def _yaml_images(value: Any, root: str, yaml_file: str, key: str, notes: list[str]) -> list[str]:
    """The images of a yaml's ``train``/``val``: a folder (searched recursively), a .txt
    list of image paths, or a list of those."""
    entries = value if isinstance(value, list) else [value]
    images: list[str] = []
    for entry in entries:
        if not isinstance(entry, str):
            raise DatasetFolderError(
                f"{yaml_file}: {key}: {entry!r} is not a path (an image folder or a .txt "
                "list of images, or a list of those)"
            )
        path = _local(entry, root, yaml_file, key, notes)
        if not os.path.exists(path) and entry.startswith("../"):
            beside = os.path.normpath(os.path.join(root, entry[3:]))
            if os.path.exists(beside):
                notes.append(
                    f"{yaml_file}: {key}: {entry!r} read as {entry[3:]!r} beside it (as "
                    "Ultralytics reads Roboflow's exports)"
                )
                path = beside
        if os.path.isdir(path):
            found = image_files(path)
        elif os.path.isfile(path) and path.endswith(".txt"):
            found = _listed_images(path, root, notes)
        else:
            raise DatasetFolderError(
                f"{yaml_file}: {key}: {entry!r} is not an image folder or a .txt list of "
                f"images (looked for {path})"
            )
        if not found:
            raise DatasetFolderError(
                f"{yaml_file}: {key}: no images ({', '.join(IMAGE_EXTENSIONS)}) in {path}"
            )
        images += found
    return list(dict.fromkeys(images))


def _listed_images(list_file: str, root: str, notes: list[str]) -> list[str]:
    """The images a .txt list names, one per line: ``./x`` relative to the list's folder
    (Ultralytics' rule), absolute paths as they are, other relative paths under the
    dataset's root, else the list's folder."""
    here = os.path.dirname(list_file)
    images = []
    with open(list_file, encoding="utf-8") as f:
        for line_no, line in enumerate(f, start=1):
            entry = line.strip()
            if not entry:
                continue
            where = f"{list_file}:{line_no}"
            if entry.startswith("./"):
                images.append(_local(entry, here, where, "image", notes))
                continue
            path = _local(entry, root, where, "image", notes)
            if not os.path.exists(path):
                path = _local(entry, here, where, "image", notes)
            images.append(path)
    return images


def read_darknet(obj_data: str, cache_dir: str, splits: Sequence[str]) -> FolderLayout:
    """The layout of a Darknet ``obj.data`` (CVAT's YOLO 1.1 export)."""
    root = os.path.dirname(os.path.abspath(obj_data))
    fields = {}
    with open(obj_data, encoding="utf-8") as f:
        for line in f:
            key, sep, value = line.split("#", 1)[0].partition("=")
            if sep:
                fields[key.strip()] = value.strip()
    names_file = _darknet_path(fields.get("names", "obj.names"), root)
    try:
        names = read_class_names(names_file)
    except ConversionError as err:
        raise DatasetFolderError(f"{obj_data}: names: {err}") from err
    if fields.get("classes", "").isdigit() and int(fields["classes"]) != len(names):
        raise DatasetFolderError(
            f"{obj_data}: classes = {fields['classes']} but {names_file} names {len(names)}"
        )
    lists, notes = {}, []
    for key, value in fields.items():
        split = SPLIT_NAMES.get(key.lower())
        if key in DARKNET_KEYS or split is None:
            continue
        list_file = _darknet_path(value, root)
        if not os.path.isfile(list_file):
            raise DatasetFolderError(f"{obj_data}: {key} = {value}: no file {list_file}")
        with open(list_file, encoding="utf-8") as f:
            lists[split] = [_darknet_path(entry.strip(), root) for entry in f if entry.strip()]
    if "train" not in lists and ("train" in splits or "val" not in lists):
        raise DatasetFolderError(f"{obj_data}: no 'train = <list of images>' line")
    layout = FolderLayout(kind="yolo", tool="a Darknet YOLO export (obj.data: CVAT's YOLO 1.1)")
    layout.notes += notes
    _convert(layout, root, lists, dict(enumerate(names)), cache_dir, splits, _beside,
             "give the CVAT task a Validation subset before exporting (obj.data then has a "
             "'valid' list)")  # fmt: skip
    return layout


def _darknet_path(value: str, root: str) -> str:
    """A path as Darknet files write them: relative to the folder Darknet runs from, where
    the dataset is ``data/``; read relative to the export's own folder."""
    value = value.replace("\\", "/")
    if os.path.isabs(value):
        return value
    if value.startswith("data/") and not os.path.exists(os.path.join(root, value)):
        value = value[len("data/") :]
    return os.path.normpath(os.path.join(root, value))


def _beside(image: str) -> str:
    return os.path.splitext(image)[0] + ".txt"


def read_yolo_folders(root: str, cache_dir: str, splits: Sequence[str]) -> FolderLayout:
    """The layout of ``images/`` and ``labels/`` without a yaml (see the module docstring)."""
    classes, where = _folder_classes(root)
    images = os.path.join(root, "images")
    lists = {}
    for name in sorted(os.listdir(images)):
        split = SPLIT_NAMES.get(name.lower())
        if split and split not in lists and os.path.isdir(os.path.join(images, name)):
            lists[split] = image_files(os.path.join(images, name))
    if not lists:
        lists["train"] = image_files(images)
    if not lists.get("train"):
        raise DatasetFolderError(f"data={root}: no training images in {images}")
    tool = "a Label Studio YOLO export" if where.endswith("notes.json") else "YOLO folders"
    layout = FolderLayout(kind="yolo", tool=f"{tool} (images/, labels/, class names in {where})")
    _convert(layout, root, lists, classes, cache_dir, splits, ultralytics_label_path,
             "move them to images/val and labels/val, the others to images/train and "
             "labels/train")  # fmt: skip
    return layout


def _folder_classes(root: str) -> tuple[dict[int, str], str]:
    """Class ids and names of an images/labels folder: Label Studio's notes.json (its ids
    need not follow classes.txt's order), else classes.txt."""
    notes_file, names_file = os.path.join(root, "notes.json"), os.path.join(root, "classes.txt")
    if os.path.isfile(notes_file):
        try:
            with open(notes_file, encoding="utf-8") as f:
                categories = json.load(f)["categories"]
            return {int(c["id"]): str(c["name"]) for c in categories}, notes_file
        except (OSError, ValueError, KeyError, TypeError) as err:
            if not os.path.isfile(names_file):
                raise DatasetFolderError(
                    f"{notes_file}: no categories with 'id' and 'name' ({err})"
                ) from err
    if not os.path.isfile(names_file):
        raise DatasetFolderError(
            f"data={root}: a YOLO folder (images/, labels/) needs its class names: a "
            "data.yaml with 'names', or classes.txt with one name per line"
        )
    try:
        return dict(enumerate(read_class_names(names_file))), names_file
    except ConversionError as err:
        raise DatasetFolderError(str(err)) from err


def _convert(
    layout: FolderLayout,
    root: str,
    lists: dict[str, list[str]],
    classes: dict[int, str],
    cache_dir: str,
    splits: Sequence[str],
    label_of: Callable[[str], str],
    how: str,
) -> None:
    """Convert each of ``splits`` (its images in ``lists``; val held out of train when
    missing) into the cache, filling ``layout``."""
    if "val" not in lists:  # the callers made sure there is a train split then
        train, val = _hold_out(lists["train"], root)
        layout.notes.append(held_out_note(root, len(val), len(lists["train"]), how))
        lists = {**lists, "train": train, "val": val}
    folder = cache_folder(cache_dir, root)
    names = [f"{k}:{v}" for k, v in sorted(classes.items())]
    for split in splits:
        images = lists[split]
        labels = [label_of(p) for p in images]
        if not any(os.path.isfile(p) for p in labels):
            raise DatasetFolderError(
                f"data={root}: none of the {len(images)} {split} images has a label file "
                f"(the first's would be {labels[0]})"
            )
        img_dir = os.path.commonpath([os.path.dirname(p) for p in images])
        out = os.path.join(folder, f"yolo-{split}.json")
        sign = signature([*names, split, label_of.__name__], [*images, *labels])

        def build(skipped: list[str], images: list[str] = images, img_dir: str = img_dir) -> dict:
            return yolo_files_to_coco(images, img_dir, classes, skipped, label_of)

        ann, layout.skipped[split] = converted(
            out, sign, build, f"the YOLO labels of {img_dir} ({split})"
        )
        layout.splits[split] = (ann, img_dir)


def _hold_out(images: list[str], root: str) -> tuple[list[str], list[str]]:
    try:
        return hold_out(images, lambda p: os.path.relpath(p, root))
    except ValueError as err:
        raise DatasetFolderError(f"data={root}: no val split, and {err}") from err
