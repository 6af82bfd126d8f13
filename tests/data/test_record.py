"""data.record: what a checkpoint records of its run's dataset, and the data config that
names that dataset again when eval, export or predict are given none."""

from __future__ import annotations

import shutil

import pytest

from msdet.common.config import load_config
from msdet.data.build import build_sources, build_val_source
from msdet.data.record import (
    RecordedDataError,
    data_record,
    names_dataset,
    recorded_data_config,
)
from msdet.data.synthetic import generate_shapes


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """A COCO folder as a user gives it (``data=PATH``): annotations/ beside train/ and val/."""
    root = tmp_path_factory.mktemp("gadgets")
    generate_shapes(str(root), 4, 2, seed=3)
    return root


def recorded(folder, *overrides: str) -> tuple[dict, object]:
    """(the record a run on ``data=folder`` writes, the run's config)."""
    cfg = load_config("train", [f"data={folder}", *overrides])
    found: dict[str, str] = {}
    train, val = build_sources(cfg.data, found)
    return data_record(cfg.data, train, val, found), cfg


def test_the_record_holds_the_setting_and_the_resolved_paths(folder):
    record, cfg = recorded(folder)
    assert record["setting"] == f"data={folder}"
    assert record["root"] == str(folder)
    assert record["layout"] == "COCO json files"
    assert record["train"] == [str(folder / "annotations/instances_train.json"),
                               str(folder / "train")]  # fmt: skip
    assert record["val"] == [str(folder / "annotations/instances_val.json"), str(folder / "val")]
    assert record["config"]["root"] == str(folder)
    assert record["config"]["val"] == {"ann_file": None, "img_dir": None}  # found in the folder


def test_eval_without_data_reads_the_recorded_val_split(folder):
    """Issue 65: eval.py ckpt=best.ckpt fell back to the built-in shapes set, generated it,
    then failed on the class names."""
    record, _ = recorded(folder)
    default = load_config("eval", ["ckpt=best.ckpt", "data.num_workers=1"])
    assert default.data.name == "shapes"  # what eval.py read before
    typed = {"ckpt": "best.ckpt", "data.num_workers": "1"}
    assert not names_dataset(typed)
    data_cfg, line = recorded_data_config(record, default.data, typed, "best.ckpt")
    val = build_val_source(data_cfg)
    assert (val.ann_file, len(val)) == (str(folder / "annotations/instances_val.json"), 2)
    assert data_cfg.num_workers == 1  # a setting that names no dataset still applies
    assert line.startswith(f"data: best.ckpt's own, data={folder} (COCO json files; val ")
    assert line.endswith("data=... names another")


def test_the_built_in_set_is_read_where_it_was_generated(tmp_path):
    cfg = load_config("train", ["data.num_train=4", "data.num_val=2",
                                f"data.cache_dir={tmp_path}"])  # fmt: skip
    found: dict[str, str] = {}
    train, val = build_sources(cfg.data, found)
    record = data_record(cfg.data, train, val, found)
    assert record["setting"] == "data=shapes"
    assert record["layout"] == "the built-in shapes set"
    elsewhere = load_config("eval", ["ckpt=x.ckpt", f"data.cache_dir={tmp_path / 'other'}"])
    data_cfg, _ = recorded_data_config(record, elsewhere.data, {"ckpt": "x.ckpt"}, "x.ckpt")
    assert build_val_source(data_cfg).ann_file == record["val"][0]
    assert not (tmp_path / "other").exists()  # nothing generated anywhere else


def test_a_recorded_dataset_that_is_gone_is_one_error_naming_it_and_data(tmp_path, folder):
    moved = tmp_path / "gadgets"
    shutil.copytree(folder, moved)
    record, cfg = recorded(moved)
    shutil.rmtree(moved)
    with pytest.raises(RecordedDataError) as err:
        recorded_data_config(record, cfg.data, {}, "runs/train/exp/checkpoints/best.ckpt")
    assert str(err.value) == (
        f"runs/train/exp/checkpoints/best.ckpt was trained on data={moved}, recorded at "
        f"{moved}, which is gone: name the dataset to use with data=PATH (or data=... and "
        "data.root=PATH)"
    )


def test_settings_that_name_a_dataset():
    assert names_dataset({"data": "coco", "data.root": "/d"})
    assert names_dataset({"data.val.ann_file": "a.json"})
    assert names_dataset({"data.num_val": "10"})  # another built-in set
    assert not names_dataset({"ckpt": "a.ckpt", "data.num_workers": "2", "eval.img_size": "416"})
