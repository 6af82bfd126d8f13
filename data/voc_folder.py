"""A Pascal VOC folder read as it is: ``Annotations/<id>.xml``, ``JPEGImages/``, and the
splits' image ids in ``ImageSets/Main/{train,val}.txt``.

Without ``val.txt`` the val split is held out of the train ids (``train.txt``, else
``trainval.txt``, else CVAT's ``default.txt``, else every xml file). The classes are
CVAT's ``labelmap.txt`` (``name:colour:parts:actions``, ``background`` left out) when
present, else the object names of the xml files, sorted: the 20 VOC classes come out in
VOC's own order. ``difficult`` objects become crowd regions, as
:func:`msdet.data.convert_labels.voc_to_coco` writes them.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Sequence

from msdet.data.convert_labels import voc_class_names, voc_files_to_coco
from msdet.data.layout import (
    DatasetFolderError,
    FolderLayout,
    cache_folder,
    converted,
    held_out_note,
    signature,
)
from msdet.data.splits import hold_out

LABELMAP = "labelmap.txt"
TRAIN_LISTS = ("train", "trainval", "default")


def is_voc(folder: str) -> bool:
    """Whether ``folder`` has ``Annotations/*.xml``."""
    return bool(glob.glob(os.path.join(folder, "Annotations", "*.xml")))


def read_voc_folder(folder: str, cache_dir: str, splits: Sequence[str]) -> FolderLayout:
    """The layout of the VOC folder ``folder`` (see the module docstring)."""
    lists_dir = os.path.join(folder, "ImageSets", "Main")
    ids: dict[str, list[str]] = {}
    train_list = next((n for n in TRAIN_LISTS if _list_file(lists_dir, n)), None)
    if train_list:
        ids["train"] = _read_ids(_list_file(lists_dir, train_list))
    else:
        xmls = sorted(glob.glob(os.path.join(folder, "Annotations", "*.xml")))
        ids["train"] = [os.path.splitext(os.path.basename(x))[0] for x in xmls]
    if _list_file(lists_dir, "val"):
        ids["val"] = _read_ids(_list_file(lists_dir, "val"))
    layout = FolderLayout(kind="voc", tool="a Pascal VOC folder (Annotations/, JPEGImages/)")
    if "val" not in ids:
        try:
            train, val = hold_out(ids["train"], str)
        except ValueError as err:
            raise DatasetFolderError(f"data={folder}: no val split, and {err}") from err
        layout.notes.append(
            held_out_note(
                f"{folder} (ImageSets/Main has no val.txt)",
                len(val),
                len(ids["train"]),
                "list their ids in ImageSets/Main/val.txt and the others in train.txt",
            )
        )
        ids = {"train": train, "val": val}
    names, where = _class_names(folder, [i for s in ids.values() for i in s])
    if not names:
        raise DatasetFolderError(f"data={folder}: no object in Annotations/*.xml has a name")
    layout.notes.append(f"classes from {where}: {', '.join(names[:20])}")
    img_dir = os.path.join(folder, "JPEGImages")
    if not os.path.isdir(img_dir):
        raise DatasetFolderError(f"data={folder}: no JPEGImages/ folder beside Annotations/")
    cache = cache_folder(cache_dir, folder)
    for split in splits:
        xmls = [os.path.join(folder, "Annotations", f"{i}.xml") for i in ids[split]]
        sign = signature([*names, split], xmls)

        def build(skipped: list[str], split_ids: list[str] = ids[split], s: str = split) -> dict:
            return voc_files_to_coco(folder, split_ids, names, skipped, f"reading VOC {s}")

        out = os.path.join(cache, f"voc-{split}.json")
        ann, layout.skipped[split] = converted(out, sign, build, f"{folder} ({split})")
        layout.splits[split] = (ann, img_dir)
    return layout


def _list_file(lists_dir: str, name: str) -> str | None:
    path = os.path.join(lists_dir, f"{name}.txt")
    return path if os.path.isfile(path) else None


def _read_ids(path: str) -> list[str]:
    with open(path, encoding="utf-8") as f:
        return [line.split()[0] for line in f if line.strip()]


def _class_names(folder: str, ids: list[str]) -> tuple[list[str], str]:
    labelmap = os.path.join(folder, LABELMAP)
    if os.path.isfile(labelmap):
        with open(labelmap, encoding="utf-8") as f:
            names = [
                line.split(":", 1)[0].strip()
                for line in f
                if line.strip() and not line.lstrip().startswith("#")
            ]
        names = [n for n in names if n and n != "background"]
        if names:
            return names, labelmap
    return voc_class_names(folder, ids), "the object names in Annotations/, sorted"
