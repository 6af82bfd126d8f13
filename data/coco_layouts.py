"""COCO json files in the layouts the tools write them.

- **Split files**: ``annotations/*.json`` or ``*.json`` named for their split (``train``,
  ``val``, ``valid``, ``validation`` in the name: ``instances_train2017.json``, CVAT's
  ``instances_Train.json``); a file named for one split is preferred to ``trainval``.
- **Roboflow's COCO export**: ``train/``, ``valid/`` (and ``test/``, not used), each with
  ``_annotations.coco.json`` and its images beside it.
- **One file for everything**: CVAT's ``annotations/instances_default.json`` (a task
  without subsets), Label Studio's ``result.json`` (its ``file_name`` starts with
  ``images/``): the val split is held out of it (:mod:`msdet.data.splits`).

Each file's images are in the folder that holds most of a sample of them (``train2017/``,
``train/``, ``images/train/``, ``images/``, the file's own folder, or the dataset's).
"""

from __future__ import annotations

import glob
import json
import os
from collections.abc import Sequence

from msdet.common.paths import is_windows_path
from msdet.data.coco import _check_top_level
from msdet.data.layout import (
    DatasetFolderError,
    FolderLayout,
    cache_folder,
    converted,
    held_out_note,
    signature,
)
from msdet.data.splits import split_coco

SPLITS = ("train", "val")
# The words of a file or folder name that say its split ("valid" and "validation" hold "val").
SPLIT_WORDS = {"train": ("train",), "val": ("val",)}
ROBOFLOW_FILE = "_annotations.coco.json"
# Images of an annotation file (spread over it) looked for when finding its image folder.
FOLDER_SAMPLE = 20
# A json this large is taken as COCO by its first bytes; a smaller one is read whole.
READ_WHOLE_BYTES = 50 << 20


def is_coco(path: str) -> bool:
    """Whether ``path`` is a COCO json: an object with ``images`` and ``categories`` lists
    (a large file: both keys in its first MiB)."""
    try:
        if os.path.getsize(path) > READ_WHOLE_BYTES:
            with open(path, encoding="utf-8", errors="replace") as f:
                head = f.read(1 << 20)
            return '"images"' in head and '"categories"' in head
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError):
        return False
    return isinstance(data, dict) and all(
        isinstance(data.get(k), list) for k in ("images", "categories")
    )


def coco_files(folder: str) -> tuple[dict[str, str], list[str]]:
    """The COCO json files of ``folder``: ``{split: file}`` for files named (or, Roboflow's,
    in a folder named) for a split, and the files named for none (a test split's aside)."""
    files = [
        f
        for pattern in ("annotations/*.json", "*.json", f"*/{ROBOFLOW_FILE}")
        for f in sorted(glob.glob(os.path.join(folder, pattern)))
    ]
    files = [f for f in dict.fromkeys(files) if is_coco(f)]
    found: dict[str, str] = {}
    for split in SPLITS:
        named = [f for f in files if split in _split_name(f)]
        alone = [f for f in named if not any(o in _split_name(f) for o in SPLITS if o != split)]
        if alone or named:
            found[split] = (alone or named)[0]
    unsplit = [f for f in files if not _split_name(f)]
    return found, unsplit


def _split_name(path: str) -> str:
    """The name that says a file's split: Roboflow's folder, else the file's own name."""
    name = os.path.basename(path)
    if name == ROBOFLOW_FILE:
        return os.path.basename(os.path.dirname(path)).lower()
    stem = os.path.splitext(name)[0].lower()
    return stem if any(w in stem for w in ("train", "val", "test")) else ""


def tool_of(files: Sequence[str]) -> str:
    """The tool whose layout ``files`` look like, in words."""
    names = {os.path.basename(f) for f in files}
    if ROBOFLOW_FILE in names:
        return "a Roboflow COCO export (train/, valid/, test/ with _annotations.coco.json)"
    if "instances_default.json" in names:
        return "a CVAT COCO export (annotations/instances_default.json, images/)"
    if "result.json" in names:
        return "a Label Studio COCO export (result.json, images/)"
    return "COCO json files"


def read_coco_folder(
    folder: str, files: dict[str, str], unsplit: list[str], cache_dir: str, splits: Sequence[str]
) -> FolderLayout:
    """The layout of ``folder`` whose COCO files are ``files`` and ``unsplit``
    (:func:`coco_files`)."""
    layout = FolderLayout(kind="coco", tool=tool_of([*files.values(), *unsplit]))
    if not all(s in files for s in splits):  # a split to make, or to find in one file
        if "train" not in files and len(unsplit) > 1:
            raise DatasetFolderError(
                f"data={folder}: {len(unsplit)} COCO json files and none named for a split ("
                + ", ".join(os.path.relpath(f, folder) for f in unsplit[:4])
                + "): name them with train and val, or pass one: data=FILE"
            )
        whole = files.get("train") or (unsplit[0] if unsplit else None)
        if whole is None:
            raise DatasetFolderError(
                f"data={folder}: no COCO json for train (found "
                f"{os.path.relpath(files['val'], folder)}; the files are told apart by 'train' "
                "and 'val' in their names)"
            )
        return read_single_coco(folder, whole, cache_dir, splits, layout)
    test = [f for f in glob.glob(os.path.join(folder, "*", ROBOFLOW_FILE)) if "test" in f.lower()]
    if test:
        layout.notes.append(f"{os.path.relpath(test[0], folder)}: a test split, not used")
    for split in splits:
        layout.splits[split] = (files[split], image_folder_of(folder, files[split], split))
    return layout


def read_single_coco(
    folder: str, ann_file: str, cache_dir: str, splits: Sequence[str], layout: FolderLayout
) -> FolderLayout:
    """``ann_file`` as the whole dataset: train and a val split held out of it, written
    into the cache (again only when the file changes)."""
    img_dir = image_folder_of(folder, ann_file, "train")
    out = {s: os.path.join(cache_folder(cache_dir, folder), f"coco-{s}.json") for s in SPLITS}
    sign = signature([ann_file], [ann_file])
    halves: dict[str, dict] = {}

    def build(split: str) -> dict:
        if not halves:
            with open(ann_file, encoding="utf-8") as f:
                dataset = json.load(f)
            try:
                _check_top_level(dataset, ann_file)
                halves["train"], halves["val"] = split_coco(dataset)
            except ValueError as err:
                raise DatasetFolderError(f"{ann_file}: {err}") from err
        return halves[split]

    counts = {}
    for split in SPLITS:
        path, _ = converted(out[split], sign, lambda _, s=split: build(s), f"{ann_file} ({split})")
        if split in splits:
            layout.splits[split] = (path, img_dir)
        with open(path, encoding="utf-8") as f:
            counts[split] = len(json.load(f)["images"])
    layout.notes.append(
        held_out_note(
            ann_file,
            counts["val"],
            counts["train"] + counts["val"],
            "give a second file of the val images (named with val, beside one named with "
            "train), or split the task into Train and Validation subsets before exporting",
        )
    )
    return layout


def image_folder_of(folder: str, ann_file: str, split: str) -> str:
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
    own = os.path.relpath(os.path.dirname(ann_file), folder)
    candidates = list(
        dict.fromkeys(
            [named, split + "2017", split, os.path.join("images", split), own, "images", "."]
        )
    )
    found = {}
    for candidate in candidates:
        img_dir = os.path.normpath(os.path.join(folder, candidate))
        found[img_dir] = sum(
            os.path.isfile(os.path.join(img_dir, name))
            or os.path.isfile(os.path.join(img_dir, name.replace("\\", "/")))
            for name in sample
        )
    best = max(found, key=found.get)  # the first of equals: candidates in order of preference
    if found[best]:
        return best
    windows = [n for n in sample if is_windows_path(n)]
    hint = (
        f"; their names are Windows paths ({windows[0]!r}): make each file_name the path "
        "relative to the image folder (export the file again without absolute paths)"
        if windows
        else ""
    )
    raise DatasetFolderError(
        f"data={folder}: none of {len(sample)} images of {os.path.relpath(ann_file, folder)} "
        f"(e.g. {', '.join(sample[:3])}) is in any of "
        f"{', '.join(c + '/' for c in candidates if c != '.')} or the folder itself{hint}; name "
        f"the folder with data.{split}.img_dir=..."
    )
