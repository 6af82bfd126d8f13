"""data.check on a tiny dataset broken in every way it reports, one item of each."""

from __future__ import annotations

import json
import os

import cv2
import numpy as np
import pytest
from omegaconf import OmegaConf

from msdet.data.check import DatasetError, check_dataset, check_split, main
from msdet.data.coco import CocoSource
from msdet.data.summary import summarise_annotations

IMG_SIZE = (128, 128)  # 100 x 80 images: letterbox scale 1.28
CATEGORIES = [{"id": 3, "name": "cat"}, {"id": 8, "name": "dog"}, {"id": 9, "name": "emu"}]


def encoded(h: int, w: int, ext: str = ".jpg") -> bytes:
    yy, xx = np.mgrid[0:h, 0:w]
    img = np.dstack([xx % 256, yy % 256, (xx + yy) % 256]).astype(np.uint8)
    return cv2.imencode(ext, img)[1].tobytes()


def write_split(root, images, anns, categories=CATEGORIES, name="train"):
    (root / "ann").mkdir(exist_ok=True)
    (root / "ann" / f"{name}.json").write_text(
        json.dumps({"images": images, "annotations": anns, "categories": categories})
    )


def image(i, file_name, w=100, h=80):
    return {"id": i, "file_name": file_name, "width": w, "height": h}


def ann(i, image_id, category_id, bbox, **extra):
    return {"id": i, "image_id": image_id, "category_id": category_id, "bbox": bbox, **extra}


@pytest.fixture()
def broken(tmp_path):
    """File names that are not integers, and one of each problem data.check reports."""
    imgs = tmp_path / "imgs"
    (imgs / "a b").mkdir(parents=True)
    for name in ("cat-01.jpg", "empty.jpg", "dup-id.jpg", "tiny.jpg"):
        (imgs / name).write_bytes(encoded(80, 100))
    (imgs / "a b" / "dog photo.png").write_bytes(encoded(80, 100, ".png"))
    jpeg = encoded(80, 100)
    (imgs / "corrupt.jpg").write_bytes(jpeg[: len(jpeg) // 2])  # truncated
    (imgs / "size.jpg").write_bytes(encoded(40, 50))  # annotated as 100 x 80
    images = [
        image(1, "cat-01.jpg"),
        image(2, "a b/dog photo.png"),
        image(3, "corrupt.jpg"),
        image(4, "empty.jpg"),  # no annotations
        image(9, "dup-id.jpg"),  # no annotations either
        image(5, "cat-01.jpg"),  # duplicate file name
        image(6, "tiny.jpg"),
        image(7, "missing.jpg"),  # not on disk
        image(8, "size.jpg"),
    ]
    anns = [
        ann(1, 1, 3, [10, 10, 30, 30]),
        ann(2, 2, 8, [20, 20, 40, 30]),
        ann(3, 1, 3, [80, 60, 40, 40]),  # past the right and bottom border
        ann(4, 1, 8, [50, 10, 0, 10]),  # zero area
        ann(5, 2, 42, [0, 0, 10, 10]),  # unknown category
        ann(6, 6, 3, [0, 0, 10, 5]),  # 12.8 px on the input: small
        ann(7, 6, 8, [20, 20, 5, 4]),  # 6.4 px: small and under stride 8
        ann(8, 99, 3, [0, 0, 10, 10]),  # unknown image: malformed
        ann(9, 1, 3, [0, 0, 100, 80], iscrowd=1),
        ann(10, 3, 3, [10, 10, 20, 20]),
        ann(11, 8, 8, [10, 10, 30, 30]),
        ann(12, 7, 3, [5, 5, 30, 30]),
        ann(13, 5, 3, [40, 40, 20, 20]),
    ]
    write_split(tmp_path, images, anns)
    return tmp_path


def test_every_problem_is_counted_exactly(broken):
    check = check_split(str(broken), "ann/train.json", "imgs", IMG_SIZE)
    counts = {key: p.count for key, p in check.problems.items()}
    assert counts == {
        "missing_image": 1,
        "unreadable_image": 1,
        "bad_label_file": 0,  # a COCO dataset: data.check of a YOLO folder counts them
        "size_mismatch": 1,
        "duplicate_file_name": 1,
        "malformed_annotation": 1,
        "unknown_category_id": 1,
        "zero_area_box": 1,
        "box_outside_image": 1,
        "image_without_annotations": 2,
        "empty_class": 1,
        "small_object": 2,
    }
    assert check.errors == []
    assert check.counts == {
        "images": 9,
        "annotations": 13,
        "categories": 3,
        "training_boxes": 9,  # not: zero area, unknown category, unknown image, crowd
        "crowd_regions": 1,
    }
    assert check.classes == {"cat": 6, "dog": 3, "emu": 0}
    assert check.sizes["under_stride_8"] == 1 and check.sizes["under_16px"] == 2
    assert check.sizes["median"] == pytest.approx(20 * 1.28)
    assert sum(check.sizes["histogram"].values()) == 9


def test_problem_examples_name_the_file_and_the_entry(broken):
    p = check_split(str(broken), "ann/train.json", "imgs", IMG_SIZE).problems
    assert any("corrupt.jpg" in e and "truncated" in e for e in p["unreadable_image"].examples)
    assert p["missing_image"].examples == ["'missing.jpg'"]
    assert p["size_mismatch"].examples == ["'size.jpg': 50x40 pixels, annotated 100x80"]
    assert p["duplicate_file_name"].examples == ["'cat-01.jpg': ids 1 and 5"]
    assert p["unknown_category_id"].examples == [
        "annotation 5 in 'a b/dog photo.png': unknown category_id 42"
    ]
    assert p["malformed_annotation"].examples == ["annotation 8: unknown image_id 99"]
    assert p["zero_area_box"].examples == ["annotation 4 in 'cat-01.jpg': bbox [50, 10, 0, 10]"]
    assert p["box_outside_image"].examples == [
        "annotation 3 in 'cat-01.jpg' (100x80): bbox [80, 60, 40, 40]"
    ]
    assert p["image_without_annotations"].examples == ["'empty.jpg'", "'dup-id.jpg'"]
    assert p["empty_class"].examples == ["emu"]
    assert p["small_object"].examples == [
        "cat in 'tiny.jpg': 12.8x6.4 px on the input",
        "dog in 'tiny.jpg': 6.4x5.1 px on the input",
    ]


def test_a_clean_dataset_with_integer_and_other_names_has_no_problems(tmp_path):
    (tmp_path / "imgs").mkdir()
    for name in ("000001.jpg", "IMG_20240101_1200.jpg"):
        (tmp_path / "imgs" / name).write_bytes(encoded(80, 100))
    images = [image(1, "000001.jpg"), image(2, "IMG_20240101_1200.jpg")]
    anns = [
        ann(1, 1, 3, [10, 10, 30, 30]),
        ann(2, 2, 8, [0, 0, 100, 80]),
        ann(3, 2, 9, [1, 1, 20, 30]),
    ]
    write_split(tmp_path, images, anns)
    check = check_split(str(tmp_path), "ann/train.json", "imgs", IMG_SIZE)
    assert {k: p.count for k, p in check.problems.items() if p.count} == {}
    assert check.classes == {"cat": 1, "dog": 1, "emu": 1}


@pytest.mark.parametrize(
    ("content", "exception", "message"),
    [
        ("{not json", DatasetError, r"train\.json is not valid json"),
        (json.dumps({"images": [], "categories": CATEGORIES}), DatasetError, "no images"),
        (
            json.dumps({"images": [image(1, "a.jpg")], "categories": []}),
            ValueError,
            "no categories",
        ),
        (json.dumps({"categories": CATEGORIES}), ValueError, "missing or invalid 'images' list"),
        (
            json.dumps({"images": [image("one", "a.jpg")], "categories": CATEGORIES}),
            ValueError,
            "image entry needs integer 'id'",
        ),
        (
            json.dumps({"images": [image(1, "a.jpg")], "categories": [{"id": "x", "name": "c"}]}),
            ValueError,
            "category entry needs an integer 'id'",
        ),
    ],
)
def test_what_training_cannot_read_is_a_hard_error_naming_file_and_field(
    tmp_path, content, exception, message
):
    (tmp_path / "imgs").mkdir()
    (tmp_path / "ann").mkdir()
    (tmp_path / "ann" / "train.json").write_text(content)
    with pytest.raises(exception, match=message) as err:
        check_split(str(tmp_path), "ann/train.json", "imgs", IMG_SIZE)
    assert str(tmp_path / "ann" / "train.json") in str(err.value)


def test_missing_annotation_file_or_image_folder_is_named(broken):
    with pytest.raises(FileNotFoundError, match="annotation file not found: .*nope.json"):
        check_split(str(broken), "ann/nope.json", "imgs", IMG_SIZE)
    with pytest.raises(FileNotFoundError, match="image folder not found: .*pixels"):
        check_split(str(broken), "ann/train.json", "pixels", IMG_SIZE)


def test_no_readable_image_is_an_error_in_the_report(tmp_path):
    (tmp_path / "imgs").mkdir()
    (tmp_path / "imgs" / "bad.jpg").write_bytes(b"not an image")
    write_split(tmp_path, [image(1, "bad.jpg")], [ann(1, 1, 3, [0, 0, 10, 10])])
    check = check_split(str(tmp_path), "ann/train.json", "imgs", IMG_SIZE)
    assert check.problems["unreadable_image"].count == 1
    assert len(check.errors) == 1 and "none of the 1 images" in check.errors[0]


def data_cfg(root, train="ann/train.json", val="ann/val.json"):
    return OmegaConf.create(
        {
            "name": "mine",
            "root": str(root),
            "img_size": list(IMG_SIZE),
            "train": {"ann_file": train, "img_dir": "imgs"},
            "val": {"ann_file": val, "img_dir": "imgs"},
        }
    )


def test_train_and_val_with_different_categories_is_an_error(broken):
    write_split(
        broken, [image(1, "cat-01.jpg")], [ann(1, 1, 3, [10, 10, 30, 30])], CATEGORIES[:2], "val"
    )
    train, val = check_dataset(data_cfg(broken), ["train", "val"], workers=1)
    assert (train.split, val.split) == ("train", "val")
    assert train.errors == [
        "train and val have different categories: train has ids [3, 8, 9]; val has ids [3, 8]"
    ]


def test_summary_for_the_start_of_training_reads_annotations_only(broken):
    source = CocoSource(str(broken), "ann/train.json", "imgs")
    assert summarise_annotations(source, IMG_SIZE) == [
        "train: 9 images (2 without boxes), 3 classes, 9 boxes (1 crowd regions, not trained on)",
        "train boxes per class: cat 6, dog 3, emu 0",
        "train: classes without boxes: emu",
        "train box size on the 128x128 input (longer side): median 26 px; "
        "2 (22.2%) under 16 px, 1 under stride 8",
    ]


@pytest.mark.slow
def test_command_prints_the_report_and_writes_json_and_labels_plot(broken, capsys):
    write_split(broken, [image(1, "cat-01.jpg")], [ann(1, 1, 3, [10, 10, 30, 30])], name="val")
    out = broken / "report"
    status = main(
        ["--out", str(out), "data=coco", f"data.root={broken}", "data.img_size=[128,128]",
         "train.img_scale=1", "data.train.ann_file=ann/train.json", "data.train.img_dir=imgs",
         "data.val.ann_file=ann/val.json", "data.val.img_dir=imgs"]
    )  # fmt: skip
    assert status == 0  # warnings only
    printed = capsys.readouterr().out
    assert printed.startswith("input 128x128 (data.img_size, the training input), strides")
    assert "warning: unreadable_image: 1" in printed and "warning: missing_image: 1" in printed
    assert "boxes per class: cat 6, dog 3, emu 0" in printed
    assert printed.splitlines()[-2] == "15 warnings, 0 errors"
    report = json.loads((out / "data_check.json").read_text())
    assert report["img_size"] == [128, 128] and report["errors"] == []
    train = report["splits"]["train"]
    assert train["problems"]["small_object"]["count"] == 2
    assert train["box_sizes"]["under_stride_8"] == 1
    assert report["splits"]["val"]["problems"] == {"empty_class": {
        "count": 2, "description": train["problems"]["empty_class"]["description"],
        "examples": ["dog", "emu"]}}  # fmt: skip
    assert report["warnings"] == 13 + 2
    labels = cv2.imread(str(out / "labels.png"))
    assert labels.shape == (900, 1200, 3) and labels.std() > 10


def test_command_exits_2_naming_what_is_missing(tmp_path, capsys):
    status = main(["--out", str(tmp_path / "r"), "data=coco", f"data.root={tmp_path / 'nowhere'}"])
    assert status == 2
    assert f"dataset root not found: {tmp_path / 'nowhere'}" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()


def test_duplicate_image_ids_are_an_error_listing_them(tmp_path):
    (tmp_path / "imgs").mkdir()
    for name in ("a.jpg", "b.jpg", "c.jpg"):
        (tmp_path / "imgs" / name).write_bytes(encoded(80, 100))
    images = [image(1, "a.jpg"), image(1, "b.jpg"), image(1, "c.jpg")]
    write_split(tmp_path, images, [ann(1, 1, 3, [10, 10, 30, 30])])
    with pytest.raises(
        DatasetError, match=r"2 image entries reuse .*'a.jpg' and 'b.jpg'; .*'c.jpg'"
    ):
        check_split(str(tmp_path), "ann/train.json", "imgs", IMG_SIZE)


def test_two_categories_of_one_name_are_an_error_with_each_ones_boxes(tmp_path):
    (tmp_path / "imgs").mkdir()
    (tmp_path / "imgs" / "a.jpg").write_bytes(encoded(80, 100))
    cars = [{"id": 3, "name": "car"}, {"id": 8, "name": "dog"}, {"id": 9, "name": "car"}]
    boxes = [ann(1, 1, 3, [0, 0, 20, 20]), ann(2, 1, 9, [30, 30, 20, 20]),
             ann(3, 1, 9, [50, 50, 20, 20]), ann(4, 1, 8, [5, 50, 20, 20])]  # fmt: skip
    write_split(tmp_path, [image(1, "a.jpg")], boxes, cars)
    check = check_split(str(tmp_path), "ann/train.json", "imgs", IMG_SIZE)
    assert check.classes == {"car (id 3)": 1, "dog": 1, "car (id 9)": 2}
    assert len(check.errors) == 1
    assert "train.json: categories 3 and 9 are both named 'car'" in check.errors[0]


def test_train_and_val_naming_one_id_differently_is_an_error(broken):
    renamed = [dict(CATEGORIES[0], name="kitten"), *CATEGORIES[1:]]
    write_split(broken, [image(1, "cat-01.jpg")], [ann(1, 1, 3, [10, 10, 30, 30])], renamed, "val")
    train, _ = check_dataset(data_cfg(broken), ["train", "val"], workers=1)
    assert train.errors == [
        "train and val name their categories differently: id 3: 'cat' (train) / 'kitten' (val)"
    ]


def test_a_split_mostly_missing_from_its_folder_is_an_error_naming_examples(tmp_path):
    """As training refuses it: more than half of the files missing is a wrong folder."""
    (tmp_path / "imgs").mkdir()
    (tmp_path / "imgs" / "a.jpg").write_bytes(encoded(80, 100))
    images = [image(1, "a.jpg"), image(2, "b.jpg"), image(3, "c.jpg")]
    write_split(tmp_path, images, [ann(1, 1, 3, [0, 0, 10, 10])])
    check = check_split(str(tmp_path), "ann/train.json", "imgs", IMG_SIZE)
    assert check.problems["missing_image"].count == 2
    assert check.errors == [
        f"train: 2 of the 3 images are not in {tmp_path / 'imgs'} (e.g. 'b.jpg', 'c.jpg'): a "
        "wrong image folder? Training refuses a split missing more than 50% of its files"
    ]


def test_a_train_split_without_a_usable_box_is_an_error_in_the_report(tmp_path):
    (tmp_path / "imgs").mkdir()
    (tmp_path / "imgs" / "a.jpg").write_bytes(encoded(80, 100))
    write_split(tmp_path, [image(1, "a.jpg")], [ann(1, "1", 3, [0, 0, 20, 20])])
    check = check_split(str(tmp_path), "ann/train.json", "imgs", IMG_SIZE)
    assert check.counts["training_boxes"] == 0
    assert check.problems["malformed_annotation"].examples == [
        "annotation 1: image_id '1' is text: the images' ids are integers"
    ]
    assert check.errors == [
        f"{tmp_path / 'ann' / 'train.json'}: no usable box to train on: all 1 annotations are "
        "skipped as malformed: id 1 (image_id '1' is text: the images' ids are integers)"
    ]
    assert check_split(str(tmp_path), "ann/train.json", "imgs", IMG_SIZE, "val").errors == []


def test_a_report_folder_that_cannot_be_written_is_said_before_the_check(
    tmp_path, capsys, monkeypatch
):
    """Issue: msdet check in a read-only folder ran the whole check, then an OSError
    traceback on runs/."""
    (tmp_path / "afile").write_text("")
    nowhere = f"data.root={tmp_path / 'nowhere'}"  # the check would fail: it never starts
    assert main(["--out", str(tmp_path / "afile" / "out"), "data=coco", nowhere]) == 2
    err = capsys.readouterr().err
    assert (
        f"report cannot be written into {tmp_path / 'afile' / 'out'} ({tmp_path / 'afile'} is a file)"
        in err
    )
    assert "--out DIR (or run.dir=DIR)" in err and "dataset root not found" not in err
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(os, "access", lambda path, mode: os.path.abspath(path) != str(tmp_path))
    assert main(["data=coco", nowhere]) == 2
    assert f"{tmp_path} is not writable" in capsys.readouterr().err
    assert not (tmp_path / "runs").exists()


def test_the_report_goes_to_out_else_run_dir_else_runs_data_check(tmp_path):
    from msdet.data.check_report import output_folder

    run = OmegaConf.create({"dir": None, "root": str(tmp_path / "runs")})
    assert output_folder(None, run) == str(tmp_path / "runs" / "data_check")
    assert output_folder(str(tmp_path / "o"), run) == str(tmp_path / "o")
    run.dir = str(tmp_path / "d")
    assert output_folder(None, run) == str(tmp_path / "d")


def test_check_measures_boxes_on_the_input_training_uses():
    """Issue: check measured box sizes at data.img_size (640: "25 under 16 px"), training
    at data.img_size x train.img_scale (512: "76")."""
    from msdet.common.config import load_config
    from msdet.data.check import training_input

    cfg = load_config("tool", ["data=coco", "data.img_size=[640,640]", "train=shapes"])
    assert training_input(cfg) == (
        (512, 512),
        "the training input: data.img_size 640x640 x train.img_scale",
    )
    # A dataset of one's own trains with the yolox recipe, at 1.0x.
    assert training_input(load_config("tool", ["data=coco"]))[0] == (640, 640)
    assert training_input(load_config("tool", ["train=yolox"]))[0] == (320, 320)
