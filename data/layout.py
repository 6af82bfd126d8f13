"""What reading a dataset folder produces, and the conversions it keeps in the cache.

Every layout :mod:`msdet.data.folders` recognises ends as one COCO json per split with its
image folder (:class:`FolderLayout`). Layouts in another format (YOLO labels, VOC xml,
labelme json) and splits msdet has to make (a val split held out of a set that has none)
are converted into ``<data.cache_dir>/folders/<dataset>-<hash>/`` by :func:`converted`,
again only when an input file changes, is added or removed.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from msdet.common.cache import cache_error, make_cache_folder
from msdet.data.convert_labels import ConversionError, write_json
from msdet.data.splits import VAL_EVERY

log = logging.getLogger("msdet.data.folders")

# Files left out of a split that its warning names; data.check counts them all.
MAX_WARNED = 10
# Part of every conversion's signature: a change in how msdet converts redoes the cached ones.
CONVERSION_VERSION = "2"
CACHE_SETTING = "data.cache_dir"


class DatasetFolderError(ValueError):
    """A folder given as ``data=`` whose layout msdet cannot read."""


@dataclass
class FolderLayout:
    """Where each split's annotation file and images are (absolute paths), what the folder
    was recognised as, and what msdet did to read it (``notes``: the class ids it used, a
    val split it held out, what it left out), which the log and data.check report."""

    splits: dict[str, tuple[str, str]] = field(default_factory=dict)
    kind: str = "coco"  # coco | yolo | voc | labelme: the format of the annotations
    tool: str = ""  # the layout in words, e.g. "a Roboflow COCO export"
    # split -> the files its conversion left out, each with its problem
    skipped: dict[str, list[str]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def cache_folder(cache_dir: str, root: str) -> str:
    """The folder of ``root``'s conversions under ``cache_dir``."""
    key = hashlib.sha1(os.fsencode(os.path.abspath(root))).hexdigest()[:10]
    return os.path.join(os.path.abspath(cache_dir), "folders", f"{os.path.basename(root)}-{key}")


def signature(parts: Iterable[str], files: Iterable[str]) -> str:
    """Changes when one of ``parts`` (class names, settings) changes, or one of ``files`` is
    added, removed or rewritten. Names that are not valid UTF-8 count by their bytes."""
    digest = hashlib.sha1(CONVERSION_VERSION.encode())
    for part in parts:
        digest.update(os.fsencode(str(part)) + b"\n")
    for path in files:
        try:
            stat = os.stat(path)
            digest.update(os.fsencode(f"{path}:{stat.st_size}:{stat.st_mtime_ns}\n"))
        except OSError:
            digest.update(os.fsencode(f"{path}:-\n"))
    return digest.hexdigest()


def folder_files(*folders: str) -> list[str]:
    """Every file under ``folders`` (recursively), in a fixed order: a signature's input."""
    found = []
    for folder in folders:
        for base, dirs, files in os.walk(folder):
            dirs.sort()
            found += [os.path.join(base, name) for name in sorted(files)]
    return found


def converted(
    out: str, sign: str, build: Callable[[list[str]], dict], what: str
) -> tuple[str, list[str]]:
    """(``out``, the files its conversion left out): ``build(skipped)`` written to ``out``
    (a COCO json), unless ``out`` holds the conversion of this signature already. An image
    that cannot be converted is left out with a warning naming it, at every run; a
    :class:`~msdet.data.convert_labels.ConversionError` (nothing convertible) becomes a
    :class:`DatasetFolderError`."""
    stamp, left_out = out + ".signature", out + ".skipped"
    if os.path.isfile(out) and _read(stamp) == sign:
        skipped = json.loads(_read(left_out) or "[]")
    else:
        log.info("converting %s to COCO json: %s", what, out)
        skipped: list[str] = []
        try:
            dataset = build(skipped)
        except ConversionError as err:
            raise DatasetFolderError(str(err)) from err
        make_cache_folder(os.path.dirname(out), CACHE_SETTING)
        try:
            write_json(dataset, out)
            with open(left_out, "w", encoding="utf-8") as f:
                json.dump(skipped, f)
            with open(stamp, "w", encoding="utf-8") as f:
                f.write(sign)
        except OSError as err:
            raise cache_error(out, err, CACHE_SETTING) from err
    if skipped:
        with open(out, encoding="utf-8") as f:
            kept = len(json.load(f)["images"])
        log.warning(
            "%d of %d images of %s are left out: their labels (or the images) cannot be read: %s%s",
            len(skipped),
            len(skipped) + kept,
            what,
            "; ".join(skipped[:MAX_WARNED]),
            f"; and {len(skipped) - MAX_WARNED} more (python -m msdet.data.check lists them)"
            if len(skipped) > MAX_WARNED
            else "",
        )
    return out, skipped


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except OSError:
        return None


def held_out_note(what: str, val: int, total: int, how: str) -> str:
    """The note on a val split msdet made (:mod:`msdet.data.splits`): how many images, how
    they were chosen, and ``how`` to give one instead."""
    return (
        f"no val split in {what}: {val} of its {total} images held out for validation (1 in "
        f"{VAL_EVERY}, chosen by a hash of each file name: the same ones at every run); to "
        f"choose them yourself, {how}"
    )
