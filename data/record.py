"""What a training run records about its data, and the data config that names it again.

Every checkpoint a run writes describes the dataset it trained on (:func:`data_record`, in
the description of ``models.description``): the ``data=`` setting that names it, the data
config as the run composed it, the folder it resolved to, each split's annotation file and
image folder, and the layout read. eval.py, export.py's val check and predict.py take that
dataset when their command line names none (:func:`recorded_data_config`), and say so in
one log line; a recorded dataset that is gone is one error naming its path and ``data=``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

# Settings that name a dataset (rather than tune how one is read): typed on the command
# line, the dataset is the user's choice, not the checkpoint's.
NAMING_KEYS = ("data", "data.root", "data.name", "data.classes", "data.seed", "data.num_train",
               "data.num_val", "data.min_object_size")  # fmt: skip
NAMING_PREFIXES = ("data.train.", "data.val.")


class RecordedDataError(FileNotFoundError):
    """The dataset a checkpoint recorded is not where it was."""


def names_dataset(typed: Mapping[str, str]) -> bool:
    """Whether the command line's settings (``key -> value`` as typed) name a dataset."""
    return any(k in NAMING_KEYS or k.startswith(NAMING_PREFIXES) for k in typed)


def data_setting(data_cfg: Any) -> str:
    """The ``data=`` setting that names ``data_cfg``'s dataset: ``data=shapes`` (the built-in
    set), ``data=PATH`` (a folder or the file that picks its layout, split paths found in
    it), or ``data=coco data.root=PATH`` (split paths named by the config)."""
    root = data_cfg.get("root")
    if data_cfg.name == "shapes":
        return "data=shapes" + (f" data.root={root}" if root else "")
    splits = [data_cfg[s][part] for s in ("train", "val") for part in ("ann_file", "img_dir")]
    if all(p is None for p in splits):
        return f"data={root}"
    return f"data=coco data.root={root}"


def data_record(data_cfg: Any, train: Any, val: Any, found: Mapping[str, str]) -> dict[str, Any]:
    """What a checkpoint records about the data of its run: ``data_cfg`` (the composed
    ``data`` group), the train and val sources built from it (``data.coco.CocoSource``) and
    ``found`` (``data.build.split_paths``: the folder it resolved to and the layout read)."""
    from omegaconf import OmegaConf

    return {
        "setting": data_setting(data_cfg),
        "root": str(found.get("root", "")),
        "layout": str(found.get("layout", "")),
        "train": [str(train.ann_file), str(train.img_dir)],
        "val": [str(val.ann_file), str(val.img_dir)],
        "config": OmegaConf.to_container(data_cfg, resolve=True),
    }


def recorded_data_config(
    record: Mapping[str, Any], data_cfg: Any, typed: Mapping[str, str], model: str
) -> tuple[Any, str]:
    """(the data config of the dataset ``record`` names, the log line that says so) for the
    model ``model`` (its path, for messages). The recorded config is read again from its
    folder (a converted layout is converted again when msdet's cache lost it); ``data.*``
    settings of the command line that do not name a dataset (``data.num_workers``) still
    apply. Raises :class:`RecordedDataError` naming the recorded path and ``data=`` when the
    dataset is gone."""
    from omegaconf import OmegaConf

    config = dict(record["config"])
    root = str(record["root"])
    # A generated set is read from where it was, not generated again somewhere else.
    config["root"] = root
    val_given = config["val"]["ann_file"] is not None and config["val"]["img_dir"] is not None
    needed = [root] + (list(record["val"]) if val_given else [])
    gone = next((p for p in needed if not os.path.exists(p)), None)
    if gone is not None:
        raise RecordedDataError(
            f"{model} was trained on {record['setting']}, recorded at {gone}, which is gone: "
            "name the dataset to use with data=PATH (or data=... and data.root=PATH)"
        )
    out = OmegaConf.create(config)
    for key in typed:
        if key.startswith("data.") and not names_dataset({key: ""}):
            OmegaConf.update(out, key[5:], OmegaConf.select(data_cfg, key[5:]), merge=False)
    line = (
        f"data: {model}'s own, {record['setting']} ({record['layout']}; val "
        f"{record['val'][0]}, images in {record['val'][1]}); data=... names another"
    )
    return out, line
