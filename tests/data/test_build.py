"""build_sources: the shapes set generated on first use, COCO paths checked at start-up."""

from __future__ import annotations

import os

import pytest
from omegaconf import OmegaConf

from msdet.data.build import build_sources

CONFIGS = os.path.join(os.path.dirname(__file__), "..", "..", "configs", "data")


def shapes_cfg(cache_dir, **overrides):
    cfg = OmegaConf.load(os.path.join(CONFIGS, "shapes.yaml"))
    cfg.cache_dir = str(cache_dir)
    cfg.num_train, cfg.num_val, cfg.seed = 6, 3, 2
    for key, value in overrides.items():
        OmegaConf.update(cfg, key, value)
    return cfg


def coco_cfg(root):
    cfg = OmegaConf.load(os.path.join(CONFIGS, "coco.yaml"))
    cfg.root = str(root)
    return cfg


def test_shapes_are_generated_into_the_cache_on_first_use(tmp_path):
    train, val = build_sources(shapes_cfg(tmp_path))
    root = tmp_path / "shapes-2-6-3-min24"  # data.min_object_size 24: its own folder
    assert train.ann_file == str(root / "annotations" / "instances_train.json")
    assert train.img_dir == str(root / "train") and val.img_dir == str(root / "val")
    assert (len(train), len(val)) == (6, 3)
    assert train.category_ids == val.category_ids == [1, 3, 7]
    stamp = os.path.getmtime(train.ann_file)
    again, _ = build_sources(shapes_cfg(tmp_path))  # reused, not regenerated
    assert os.path.getmtime(again.ann_file) == stamp


def test_shapes_root_can_be_given(tmp_path):
    train, _ = build_sources(shapes_cfg(tmp_path / "cache", root=str(tmp_path / "mine")))
    assert train.img_dir == str(tmp_path / "mine" / "train")
    assert not (tmp_path / "cache").exists()


def test_coco_missing_root_names_it(tmp_path):
    with pytest.raises(FileNotFoundError, match=str(tmp_path / "nowhere")):
        build_sources(coco_cfg(tmp_path / "nowhere"))


def test_coco_missing_annotation_file_names_it(tmp_path):
    (tmp_path / "train2017").mkdir()
    expected = tmp_path / "annotations" / "instances_train2017.json"
    with pytest.raises(FileNotFoundError, match=str(expected)):
        build_sources(coco_cfg(tmp_path))


def test_coco_missing_image_folder_names_it(tmp_path):
    # A valid annotation file, but no image folder next to it.
    build_sources(shapes_cfg(tmp_path, root=str(tmp_path / "set")))
    cfg = coco_cfg(tmp_path / "set")
    cfg.train.ann_file = "annotations/instances_train.json"
    with pytest.raises(FileNotFoundError, match=str(tmp_path / "set" / "train2017")):
        build_sources(cfg)


def test_coco_format_dataset_under_any_name(tmp_path):
    build_sources(shapes_cfg(tmp_path, root=str(tmp_path / "set")))
    cfg = coco_cfg(tmp_path / "set")
    cfg.name = "my_boxes"
    cfg.train = {"ann_file": "annotations/instances_train.json", "img_dir": "train"}
    cfg.val = {"ann_file": "annotations/instances_val.json", "img_dir": "val"}
    train, val = build_sources(cfg)
    assert (len(train), len(val)) == (6, 3) and train.class_names[0] == "disc"
