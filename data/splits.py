"""A val split for a dataset that comes without one: 1 image in 5 held out, each chosen by a
hash of its file name.

The choice depends on an image's name alone, so the same images are held out at every run,
whichever tool wrote the list and in whatever order, and adding images never moves an old
one between train and val. A set too small for its hash to pick any image still gets one
val image (the one of the smallest hash), and keeps one to train on.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from typing import TypeVar

T = TypeVar("T")

VAL_EVERY = 5  # one image in VAL_EVERY is held out


def _bucket(name: str) -> int:
    return int(hashlib.sha1(name.encode("utf-8", "surrogateescape")).hexdigest()[:8], 16)


def hold_out(items: Sequence[T], name: Callable[[T], str]) -> tuple[list[T], list[T]]:
    """(train, val) of ``items``: val holds those whose ``name`` hashes into 1 of
    :data:`VAL_EVERY` buckets, at least one item and never all of them; both keep the
    order of ``items``. ``ValueError`` for fewer than two items."""
    if len(items) < 2:
        raise ValueError(f"{len(items)} image(s): too few to hold one out for validation")
    buckets = [_bucket(name(item)) for item in items]
    val = {i for i, b in enumerate(buckets) if b % VAL_EVERY == 0}
    if not val:
        val = {min(range(len(items)), key=buckets.__getitem__)}
    if len(val) == len(items):
        val.discard(max(val, key=buckets.__getitem__))
    train = [item for i, item in enumerate(items) if i not in val]
    return train, [item for i, item in enumerate(items) if i in val]


def split_coco(dataset: dict) -> tuple[dict, dict]:
    """(train, val) COCO dataset dicts of ``dataset``: its images held out by
    :func:`hold_out` on their file names, each with its own annotations, both with all
    the categories."""
    train_images, val_images = hold_out(dataset["images"], lambda img: str(img["file_name"]))

    def subset(images: list[dict], malformed: bool) -> dict:
        ids = {img["id"] for img in images}
        anns = [
            a
            for a in dataset.get("annotations", [])
            if (a.get("image_id") in ids if isinstance(a, dict) else malformed)
        ]
        rest = {k: v for k, v in dataset.items() if k not in ("images", "annotations")}
        return {**rest, "images": images, "annotations": anns}

    # Entries that are not objects stay with train, where data.check reports them.
    return subset(train_images, True), subset(val_images, False)
