"""build_sources: the shapes set generated on first use, COCO paths checked at start-up."""

from __future__ import annotations

import os

import pytest
from omegaconf import OmegaConf

from msdet.data.build import build_sources

CONFIGS = os.path.join(os.path.dirname(__file__), "..", "..", "configs", "data")


def shapes_cfg(cache_dir, **overrides):
    cfg = OmegaConf.load(os.path.join(CONFIGS, "shapes.yaml"))
    cfg.cache_dir = None if cache_dir is None else str(cache_dir)
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


def shapes_as_coco(tmp_path):
    """A generated shapes set read as any COCO-format dataset."""
    build_sources(shapes_cfg(tmp_path, root=str(tmp_path / "set")))
    cfg = coco_cfg(tmp_path / "set")
    cfg.train = {"ann_file": "annotations/instances_train.json", "img_dir": "train"}
    cfg.val = {"ann_file": "annotations/instances_val.json", "img_dir": "val"}
    return cfg


def test_a_wrong_image_folder_is_one_clear_error_before_training(tmp_path):
    """Issue: every image unreadable (img_dir pointing at another folder) ended in a
    traceback from inside GeneratorDataset."""
    cfg = shapes_as_coco(tmp_path)
    cfg.train.img_dir = "annotations"  # exists, but holds none of the images
    with pytest.raises(
        FileNotFoundError,
        match=r"none of the 6 images of .*instances_train.json is in .*annotations \(the first: .*\): check data.train.img_dir",
    ):
        build_sources(cfg)


def test_undecodable_images_are_refused_and_missing_ones_counted(tmp_path, caplog):
    import logging

    from msdet.data.image_io import ImageReadError

    cfg = shapes_as_coco(tmp_path)
    val_dir = tmp_path / "set" / "val"
    files = sorted(val_dir.iterdir())
    files[0].unlink()
    with caplog.at_level(logging.WARNING, logger="msdet.data.build"):
        build_sources(cfg)
    assert "1 of 3 images of" in caplog.text
    for f in files[1:]:
        f.write_bytes(b"not an image")
    with pytest.raises(ImageReadError, match=r"the first 2 images in .*val cannot be decoded"):
        build_sources(cfg)


def test_train_and_val_naming_classes_differently_is_an_error_naming_both(tmp_path):
    """One id, two names: checkpoints would carry train's names, evaluation report val's."""
    import json

    cfg = shapes_as_coco(tmp_path)
    path = tmp_path / "set" / "annotations" / "instances_val.json"
    data = json.loads(path.read_text())
    data["categories"][0]["name"] = "circle"
    path.write_text(json.dumps(data))
    with pytest.raises(
        ValueError,
        match=r"train and val name their categories differently: .*instances_train.json has "
        r"\['disc', 'rectangle', 'triangle'\], .*instances_val.json has \['circle', "
        r"'rectangle', 'triangle'\] \(id 1: 'disc' / 'circle'\)",
    ):
        build_sources(cfg)


def test_missing_images_are_left_out_and_too_many_are_an_error_naming_examples(tmp_path, caplog):
    """Issue: data.train.img_dir at another split (40 of 48 files missing): the warning said
    "skipped", yet the split kept its 48 images and training drew others in their place."""
    import logging
    import shutil

    cfg = shapes_as_coco(tmp_path)
    train_dir = tmp_path / "set" / "train"
    files = sorted(train_dir.iterdir())
    (tmp_path / "moved").mkdir()
    for f in files[:2]:  # 2 of 6 missing: left out, counted as they are
        shutil.move(str(f), str(tmp_path / "moved" / f.name))
    with caplog.at_level(logging.WARNING, logger="msdet.data.build"):
        train, _ = build_sources(cfg)
    assert len(train) == 4
    assert {os.path.basename(train.image_path(i)) for i in range(4)} == {f.name for f in files[2:]}
    assert "2 of 6 images of" in caplog.text and "left out: training has the other 4" in caplog.text
    for f in files[2:5]:  # 5 of 6 missing: the folder is not this split's
        shutil.move(str(f), str(tmp_path / "moved" / f.name))
    with pytest.raises(FileNotFoundError) as err:
        build_sources(cfg)
    text = str(err.value)
    assert (
        f"5 of the 6 images of {tmp_path / 'set' / 'annotations' / 'instances_train.json'}" in text
    )
    assert f"are not in {train_dir}" in text and files[0].name in text and files[1].name in text
    assert "check data.train.img_dir" in text


def test_a_train_split_without_a_usable_box_is_an_error_saying_why(tmp_path):
    """Issue: empty annotations, or string image ids (every annotation skipped), trained on
    without a box to learn."""
    import json

    cfg = shapes_as_coco(tmp_path)
    path = tmp_path / "set" / "annotations" / "instances_train.json"
    data = json.loads(path.read_text())
    anns = data["annotations"]
    path.write_text(json.dumps({**data, "annotations": []}))
    with pytest.raises(ValueError, match=r"instances_train.json: no usable box to train on: "
                       r"it has no annotations"):  # fmt: skip
        build_sources(cfg)
    as_text = [{**a, "image_id": str(a["image_id"])} for a in anns]
    path.write_text(json.dumps({**data, "annotations": as_text}))
    with pytest.raises(ValueError) as err:
        build_sources(cfg)
    text = str(err.value)
    assert f"all {len(anns)} annotations are skipped as malformed" in text
    first = anns[0]
    assert (
        f"id {first['id']} (image_id '{first['image_id']}' is text: the images' ids are "
        "integers)" in text
    )


def test_the_datasets_cache_is_msdets_cache_root_wherever_it_runs(tmp_path, monkeypatch):
    """Issue: the datasets' cache followed the current folder (.cache/msdet) while the
    weights' did not: one root now, $MSDET_CACHE_DIR else ~/.cache/msdet."""
    from msdet.common.cache import cache_root, user_cache_dir
    from msdet.common.config import load_config

    assert load_config("train").data.cache_dir is None
    monkeypatch.setenv("MSDET_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    train, _ = build_sources(shapes_cfg(None))
    assert train.ann_file.startswith(str(tmp_path / "cache" / "shapes-2-6-3-min24") + os.sep)
    # Beside the weights (models.release_weights keeps them in user_cache_dir("weights")).
    assert os.path.dirname(user_cache_dir("weights")) == cache_root() == str(tmp_path / "cache")
    monkeypatch.delenv("MSDET_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_root() == str(tmp_path / "xdg" / "msdet")


def test_a_cache_that_cannot_be_written_names_data_cache_dir(tmp_path):
    from msdet.common.cache import CacheFolderError

    (tmp_path / "afile").write_text("")
    with pytest.raises(CacheFolderError, match=r"a file is where a folder should be: .*afile\): it "
                       r"is in the cache chosen by data.cache_dir"):  # fmt: skip
        build_sources(shapes_cfg(tmp_path / "afile"))
