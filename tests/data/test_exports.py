"""Labelling tools' exports read as they are (``data=FOLDER``): each layout of
tests/support/exports.py found, its boxes read where the tool drew them, and checked as
data.check checks it; a folder holding two layouts is an error naming both."""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
from omegaconf import OmegaConf

from msdet.common.config import CONFIG_DIR, load_config
from msdet.data.build import dataset_classes
from msdet.data.check import check_dataset
from msdet.data.check_report import format_report
from msdet.data.coco import CocoSource
from msdet.data.folders import DatasetFolderError, find_layout
from tests.support.exports import CLASSES, LAYOUTS, objects_of, roboflow_yolo


def folder_cfg(root, cache):
    """The data config ``data=ROOT`` composes (coco.yaml, paths to be found)."""
    cfg = OmegaConf.load(os.path.join(CONFIG_DIR, "data", "coco.yaml"))
    cfg.root, cfg.cache_dir, cfg.img_size = str(root), str(cache), [64, 64]
    for split in ("train", "val"):
        cfg[split].ann_file = cfg[split].img_dir = None
    return cfg


def image_index(file_name: str) -> int:
    """Which drawn image a file is: the number its name ends with (VOC's 2007000003: 3)."""
    stem = os.path.basename(file_name).split(".")[0]
    n = int(re.search(r"(\d+)(?:_jpg)?$", stem).group(1))
    return n - 2007000000 if n >= 2007000000 else n


@pytest.mark.parametrize("name", sorted(LAYOUTS))
def test_each_export_is_found_read_where_the_tool_drew_and_checked(name, tmp_path):
    writer, tool, (n_train, n_val) = LAYOUTS[name]
    root = writer(tmp_path / name)
    layout = find_layout(str(root), str(tmp_path / "cache"))
    assert tool in layout.tool
    sources = {s: CocoSource("", *layout.splits[s]) for s in ("train", "val")}
    assert (len(sources["train"]), len(sources["val"])) == (n_train, n_val)
    files = {
        s: [src.image_info(i)["file_name"] for i in range(len(src))] for s, src in sources.items()
    }
    assert not set(files["train"]) & set(files["val"])
    for source in sources.values():
        assert source.class_names == list(CLASSES)
        for i in range(len(source)):
            boxes, labels = source.annotations(i)
            want = objects_of(image_index(source.image_info(i)["file_name"]))
            assert [source.class_names[k] for k in labels] == [c for c, _ in want]
            xyxy = [[x, y, x + w, y + h] for _, (x, y, w, h) in want]
            np.testing.assert_allclose(boxes, xyxy, atol=0.01)
    notes: list[str] = []
    checks = check_dataset(folder_cfg(root, tmp_path / "cache"), workers=1, notes=notes)
    assert [c.errors for c in checks] == [[], []]
    assert all(
        c.problems[k].count == 0 for c in checks for k in ("missing_image", "bad_label_file")
    )
    assert notes == [f"{root} as {layout.tool}", *layout.notes]
    report = format_report(checks, (64, 64), notes=notes)
    assert all(f"read: {note}" in report for note in notes)


def test_a_set_without_val_says_how_many_were_held_out_and_how_to_choose(tmp_path):
    writer, _, (n_train, n_val) = LAYOUTS["cvat_yolo"]
    layout = find_layout(str(writer(tmp_path / "cvat")), str(tmp_path / "cache"))
    (note,) = [n for n in layout.notes if n.startswith("no val split")]
    assert f"{n_val} of its {n_train + n_val} images held out for validation (1 in 5" in note
    assert "Validation subset" in note
    again = find_layout(str(tmp_path / "cvat"), str(tmp_path / "cache2"))
    for split in ("train", "val"):  # a new cache, the same images held out
        first, second = (Path(x.splits[split][0]).read_text() for x in (layout, again))
        assert json.loads(first)["images"] == json.loads(second)["images"]


def test_roboflows_grouping_category_and_annotation_id_zero_are_said(tmp_path):
    root = LAYOUTS["roboflow_coco"][0](tmp_path / "rf")
    source = CocoSource("", *find_layout(str(root), str(tmp_path)).splits["train"])
    assert source.category_ids == [1, 2]
    assert any("'shapes-x1y2' groups the others" in n for n in source.notes)
    assert min(source.coco.anns) == 1  # pycocotools' evaluation takes id 0 for "no match"
    # What export's val check and predict read without building the set: the same classes
    # (export of a model trained on such an export refused its own val split: "the classes
    # differ: ['disc', 'square'] ... ['shapes-x1y2', 'disc', 'square']").
    cfg = load_config("train", [f"data={root}", f"data.cache_dir={tmp_path / 'cache'}"])
    assert dataset_classes(cfg.data) == (["disc", "square"], [1, 2])


def test_a_folder_with_two_layouts_names_both_and_the_file_that_chooses(tmp_path):
    root = roboflow_yolo(tmp_path / "mixed")
    coco = LAYOUTS["cvat_coco"][0](tmp_path / "coco")
    shutil.copytree(coco / "images", root / "images")
    (root / "annotations").mkdir()
    shutil.copy(coco / "annotations" / "instances_default.json", root / "annotations")
    with pytest.raises(DatasetFolderError) as err:
        find_layout(str(root), str(tmp_path / "cache"))
    text = str(err.value)
    assert "holds 2 layouts: YOLO (data.yaml); COCO (annotations/instances_default.json)" in text
    yaml_file, json_file = root / "data.yaml", root / "annotations" / "instances_default.json"
    assert f"data={yaml_file} or data={json_file}" in text
    assert find_layout(str(yaml_file), str(tmp_path / "cache")).kind == "yolo"
    assert find_layout(str(json_file), str(tmp_path / "cache")).kind == "coco"


def test_eval_reads_a_val_split_alone(tmp_path):
    """eval.py asks for val only: a folder whose only json is the val one still serves it."""
    root = LAYOUTS["roboflow_coco"][0](tmp_path / "rf")
    shutil.rmtree(root / "train")
    layout = find_layout(str(root), str(tmp_path / "cache"), ("val",))
    assert list(layout.splits) == ["val"]
    assert layout.splits["val"][0] == str(root / "valid" / "_annotations.coco.json")
    with pytest.raises(DatasetFolderError, match=r"no COCO json for train \(found valid/"):
        find_layout(str(root), str(tmp_path / "cache"))
