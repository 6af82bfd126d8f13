"""A dataset given by its folder (``data=PATH``): COCO and YOLO layouts found, YOLO labels
converted once, and the config loader turning ``data=PATH`` into the coco group."""

from __future__ import annotations

import logging
import os

import cv2
import numpy as np
import pytest

from msdet.common.config import load_config
from msdet.data.build import build_sources, build_val_source, dataset_classes
from msdet.data.folders import DatasetFolderError, find_layout
from tests.support.media import require_non_utf8_names


def write_image(path, h: int, w: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    cv2.imwrite(str(path), np.full((h, w, 3), 90, dtype=np.uint8))


@pytest.fixture()
def ultralytics(tmp_path):
    """A YOLO dataset as Ultralytics ships them: data.yaml, images/ and labels/ per split."""
    root = tmp_path / "boats"
    for split, n in (("train", 3), ("val", 2)):
        for i in range(n):
            write_image(root / "images" / split / f"{i}.jpg", 60, 80)
            label = root / "labels" / split / f"{i}.txt"
            label.parent.mkdir(parents=True, exist_ok=True)
            label.write_text(f"{i % 2} 0.5 0.5 0.25 0.5\n")
    (root / "data.yaml").write_text(
        "path: .\ntrain: images/train\nval: images/val\nnames:\n  0: boat\n  1: buoy\n"
    )
    return root


def test_a_yolo_data_yaml_is_read_with_one_argument(ultralytics, tmp_path, caplog):
    cfg = load_config("train", [f"data={ultralytics}", f"data.cache_dir={tmp_path / 'cache'}"])
    assert cfg.data.name == "boats" and cfg.data.root == str(ultralytics)
    with caplog.at_level(logging.INFO, logger="msdet.data.folders"):
        train, val = build_sources(cfg.data)
    assert (len(train), len(val)) == (3, 2) and train.class_names == ["boat", "buoy"]
    boxes, labels = train.annotations(1)
    np.testing.assert_allclose(boxes, [[30, 15, 50, 45]], atol=1e-3)
    assert labels.tolist() == [1]
    assert caplog.text.count("converting the YOLO labels") == 2
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="msdet.data.folders"):
        build_sources(cfg.data)  # converted once
        assert "converting" not in caplog.text
        (ultralytics / "labels" / "val" / "0.txt").write_text("1 0.5 0.5 0.5 0.5\n")
        assert build_val_source(cfg.data).annotations(0)[1].tolist() == [1]
    assert caplog.text.count("converting the YOLO labels") == 1  # val only: its label changed
    assert dataset_classes(cfg.data) == (["boat", "buoy"], [1, 2])


@pytest.mark.slow
def test_the_yaml_itself_can_be_given_and_settings_after_it_apply(ultralytics, tmp_path):
    cfg = load_config(
        "eval",
        [
            f"data={ultralytics / 'data.yaml'}",
            f"data.cache_dir={tmp_path}",
            "data.img_size=[64,64]",
        ],
    )
    assert cfg.data.name == "boats" and list(cfg.data.img_size) == [64, 64]
    assert len(build_val_source(cfg.data)) == 2


def test_a_coco_folder_is_read_with_one_argument(tmp_path):
    """The built-in shapes set as written to disk: annotations/instances_{train,val}.json,
    images in train/ and val/."""
    from omegaconf import OmegaConf

    from msdet.common.config import CONFIG_DIR

    shapes = OmegaConf.load(os.path.join(CONFIG_DIR, "data", "shapes.yaml"))
    shapes.root, shapes.num_train, shapes.num_val = str(tmp_path / "set"), 6, 3
    build_sources(shapes)  # generates the set
    cfg = load_config("train", [f"data={tmp_path / 'set'}"])
    train, val = build_sources(cfg.data)
    assert (len(train), len(val)) == (6, 3)
    assert train.img_dir == str(tmp_path / "set" / "train") and val.class_names[0] == "disc"


def test_an_unknown_layout_says_what_was_looked_for(tmp_path):
    (tmp_path / "photos").mkdir()
    with pytest.raises(
        DatasetFolderError, match="a YOLO data.yaml, obj.data .*COCO json files .*VOC .*labelme"
    ):
        find_layout(str(tmp_path / "photos"), str(tmp_path))
    (tmp_path / "yolo" / "images").mkdir(parents=True)
    (tmp_path / "yolo" / "labels").mkdir()
    with pytest.raises(DatasetFolderError, match="needs its class names"):
        find_layout(str(tmp_path / "yolo"), str(tmp_path))


def test_labels_are_where_ultralytics_puts_them():
    from msdet.data.convert_labels import ultralytics_label_path

    assert ultralytics_label_path("/d/images/train/a.jpg") == "/d/labels/train/a.txt"
    assert ultralytics_label_path("/images/d/images/a.b.png") == "/images/d/labels/a.b.txt"
    # No images folder in the path: beside the image (CVAT's and Darknet's layout).
    assert ultralytics_label_path("/d/pictures/train/a.jpg") == "/d/pictures/train/a.txt"


def test_a_split_whose_first_image_is_missing_is_still_found(tmp_path):
    """Issue: the folder of a split was looked for by its first image alone: with that one
    file missing, 38 of 48 present were refused as "in none of train/...". A sample of the
    files decides; none of them anywhere is still an error naming what was looked for."""
    from omegaconf import OmegaConf

    from msdet.common.config import CONFIG_DIR

    shapes = OmegaConf.load(os.path.join(CONFIG_DIR, "data", "shapes.yaml"))
    shapes.root, shapes.num_train, shapes.num_val = str(tmp_path / "set"), 6, 3
    build_sources(shapes)
    train_files = sorted((tmp_path / "set" / "train").iterdir())
    train_files[0].unlink()  # the annotation file's first image
    layout = find_layout(str(tmp_path / "set"), str(tmp_path))
    assert layout.splits["train"][1] == str(tmp_path / "set" / "train")
    for f in train_files[1:]:
        f.unlink()
    with pytest.raises(DatasetFolderError, match=r"none of 6 images .*\(e.g. "):
        find_layout(str(tmp_path / "set"), str(tmp_path))


def test_bad_label_files_are_skipped_with_a_warning_and_listed_by_data_check(
    ultralytics, tmp_path, caplog
):
    """Training leaves a bad label file's image out, naming the file (each run, also when
    the conversion is cached); data.check lists every such file instead of stopping at the
    first; only a split with nothing convertible is an error."""
    from msdet.data.check import check_dataset

    (ultralytics / "labels" / "train" / "0.txt").write_text("0 0.5 0.5\n")
    (ultralytics / "labels" / "train" / "2.txt").write_text("5 0.5 0.5 0.2 0.2\n")
    cfg = load_config("train", [f"data={ultralytics}", f"data.cache_dir={tmp_path / 'cache'}"])
    for _ in range(2):  # converted, then cached
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="msdet.data.folders"):
            train, _ = build_sources(cfg.data)
        assert len(train) == 1
        assert "2 of 3 images of" in caplog.text and "left out" in caplog.text
        assert "0.txt:1: expected 'class cx cy w h', got 3 values" in caplog.text
        assert "2.txt:1: class 5 outside 0..1" in caplog.text
    train_check, val_check = check_dataset(cfg.data, ["train", "val"], workers=1)
    problem = train_check.problems["bad_label_file"]
    assert problem.count == 2 and any("2.txt:1: class 5" in e for e in problem.examples)
    assert val_check.problems["bad_label_file"].count == 0
    (ultralytics / "labels" / "train" / "1.txt").write_text("x\n")
    with pytest.raises(DatasetFolderError, match=r"none of the 3 images can be converted"):
        build_sources(cfg.data)


def yolo_set(root, names_yaml: str, labels: list[str]):
    """A data.yaml set whose train image k has the label line ``labels[k]``; val one image."""
    for split, lines in (("train", labels), ("val", labels[:1])):
        for k, line in enumerate(lines):
            write_image(root / "images" / split / f"{k}.jpg", 60, 80)
            (root / "labels" / split).mkdir(parents=True, exist_ok=True)
            (root / "labels" / split / f"{k}.txt").write_text(line + "\n")
    (root / "data.yaml").write_text(f"path: .\ntrain: images/train\nval: images/val\n{names_yaml}")
    return root


@pytest.mark.parametrize(
    "names, labels, classes, ids, bad",
    [
        # Issue: {0: disc, 2: triangle} trained label-1 boxes as "triangle" and dropped
        # the real triangles (label 2: "outside 0..1").
        ("names: {0: disc, 2: triangle}", ["2", "0", "1"], ["triangle", "disc"], [1, 3],
         "2.txt:1: class 1 is not one of the class ids 0, 2"),
        # Issue: 1-based keys shifted every class by one, and data.check found no problem.
        ("names:\n  1: a\n  2: b\n", ["1", "2", "0"], ["a", "b"], [2, 3],
         "2.txt:1: class 0 is not one of the class ids 1, 2"),
    ],
)  # fmt: skip
def test_names_keys_are_the_class_ids_the_label_files_use(
    tmp_path, caplog, names, labels, classes, ids, bad
):
    from msdet.data.check import check_dataset

    root = yolo_set(tmp_path / "set", names, [f"{c} 0.5 0.5 0.5 0.5" for c in labels])
    cfg = load_config("train", [f"data={root}", f"data.cache_dir={tmp_path / 'cache'}"])
    with caplog.at_level(logging.INFO, logger="msdet.data"):
        train, _ = build_sources(cfg.data)
    assert train.category_ids == ids
    assert [train.class_names[train.annotations(i)[1][0]] for i in range(len(train))] == classes
    assert bad in caplog.text  # the image of the unknown id is left out, named
    assert "class ids are names' keys" in caplog.text
    notes: list[str] = []
    checks = check_dataset(cfg.data, workers=1, notes=notes)
    assert any(n.startswith("class ids are names' keys in ") for n in notes)
    (example,) = checks[0].problems["bad_label_file"].examples
    assert bad in example


@pytest.mark.parametrize(
    "names, message",
    [
        ("names: {a: disc}", r"names key 'a' \('disc'\) is not a class id: the keys of 'names'"),
        ("names: {0: disc, -1: box}", r"names key -1 \('box'\) is not a class id"),
        ("names: {0: car, 3: car}", r"names keys 0 and 3 are both 'car'"),
        ("names: [a, b]\nnc: 3\n", r"nc is 3 but names holds 2 classes"),
    ],
)
def test_a_names_mapping_that_cannot_be_honoured_is_refused_naming_file_and_key(
    tmp_path, names, message
):
    root = yolo_set(tmp_path / "set", names, ["0 0.5 0.5 0.5 0.5"])
    with pytest.raises(DatasetFolderError, match=f"{root / 'data.yaml'}: {message}"):
        find_layout(str(root), str(tmp_path / "cache"))


def test_windows_paths_are_named_as_such(tmp_path):
    from msdet.common.schema import ConfigError

    root = yolo_set(tmp_path / "set", "names: [a]", ["0 0.5 0.5 0.5 0.5"])
    text = (root / "data.yaml").read_text().replace("path: .", "path: C:\\data\\set")
    (root / "data.yaml").write_text(text)
    with pytest.raises(DatasetFolderError, match=r"path: 'C:\\\\data\\\\set' is a Windows path"):
        find_layout(str(root), str(tmp_path / "cache"))
    with pytest.raises(ConfigError, match=r"data=D:\\data is a Windows path"):
        load_config("train", ["data=D:\\data"])


def test_a_file_name_that_is_not_utf8_is_read_checked_and_loaded(tmp_path):
    """Issue: data.check and training stopped on such a name without naming the file."""
    from msdet.data.check import check_dataset

    require_non_utf8_names(tmp_path)
    root = yolo_set(tmp_path / "set", "names: [a]", ["0 0.5 0.5 0.5 0.5", "0 0.5 0.5 0.2 0.2"])
    for folder, suffix in (("images", ".jpg"), ("labels", ".txt")):
        where = os.fsencode(root / folder / "train")
        os.rename(where + b"/1" + suffix.encode(), where + b"/caf\xe9" + suffix.encode())
    cfg = load_config("train", [f"data={root}", f"data.cache_dir={tmp_path / 'cache'}"])
    train, _ = build_sources(cfg.data)
    names = sorted(train.image_info(i)["file_name"] for i in range(len(train)))
    assert names == ["0.jpg", os.fsdecode(b"caf\xe9.jpg")]
    position = [train.image_info(i)["file_name"] for i in range(len(train))].index(names[1])
    img, boxes, labels = train.load(position)
    np.testing.assert_allclose(boxes, [[32, 24, 48, 36]], atol=1e-3)
    assert img.shape == (60, 80, 3)
    checks = check_dataset(cfg.data, workers=1)
    assert [c.errors for c in checks] == [[], []] and checks[0].counts["images"] == 2
