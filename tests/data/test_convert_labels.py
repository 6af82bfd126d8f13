"""YOLO and VOC converters: labels survive the round trip through COCO json + CocoSource."""

from __future__ import annotations

import json

import cv2
import numpy as np
import pytest

from msdet.data.coco import CocoSource
from msdet.data.convert_labels import ConversionError, main, yolo_to_coco

CLASSES = ["cat", "dog", "bird"]


def write_image(path, h: int, w: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    cv2.imwrite(str(path), np.full((h, w, 3), 90, dtype=np.uint8))


@pytest.fixture()
def yolo_dir(tmp_path):
    write_image(tmp_path / "images" / "a.jpg", 100, 200)
    write_image(tmp_path / "images" / "sub" / "b.png", 50, 40)
    write_image(tmp_path / "images" / "negative.jpg", 30, 30)
    (tmp_path / "labels" / "sub").mkdir(parents=True)
    (tmp_path / "labels" / "a.txt").write_text("0 0.5 0.5 0.2 0.4\n2 0.1 0.2 0.1 0.2\n\n")
    (tmp_path / "labels" / "sub" / "b.txt").write_text("1 0.5 0.25 0.5 0.5\n")
    (tmp_path / "classes.txt").write_text("\n".join(CLASSES) + "\n")
    return tmp_path


def run_yolo(d, out):
    return main(
        ["yolo", "--images", str(d / "images"), "--labels", str(d / "labels"),
         "--classes", str(d / "classes.txt"), "--out", str(out)]
    )  # fmt: skip


def test_yolo_round_trip(yolo_dir):
    out = yolo_dir / "ann" / "train.json"
    run_yolo(yolo_dir, out)
    source = CocoSource(str(yolo_dir), "ann/train.json", "images")
    assert source.class_names == CLASSES and source.category_ids == [1, 2, 3]
    files = [source.image_info(i)["file_name"] for i in range(len(source))]
    assert files == ["a.jpg", "negative.jpg", "sub/b.png"]

    boxes, labels = source.annotations(0)
    np.testing.assert_allclose(boxes, [[80, 30, 120, 70], [10, 10, 30, 30]], atol=1e-3)
    np.testing.assert_array_equal(labels, [0, 2])
    # Back to normalised YOLO values.
    cx, cy = (boxes[:, 0] + boxes[:, 2]) / 2 / 200, (boxes[:, 1] + boxes[:, 3]) / 2 / 100
    w, h = (boxes[:, 2] - boxes[:, 0]) / 200, (boxes[:, 3] - boxes[:, 1]) / 100
    np.testing.assert_allclose(
        np.stack([cx, cy, w, h], 1), [[0.5, 0.5, 0.2, 0.4], [0.1, 0.2, 0.1, 0.2]], atol=1e-5
    )
    assert len(source.annotations(1)[1]) == 0  # no label file: a negative image
    boxes, labels = source.annotations(2)
    np.testing.assert_allclose(boxes, [[10, 0, 30, 25]], atol=1e-3)
    np.testing.assert_array_equal(labels, [1])


@pytest.mark.parametrize(
    "line, message",
    [
        ("0 0.5 0.5 0.2", "labels/a.txt:2: expected 'class cx cy w h', got 4 values"),
        ("3 0.5 0.5 0.2 0.2", "labels/a.txt:2: class 3 outside 0..2"),
        ("0 0.5 x 0.2 0.2", "labels/a.txt:2: not numbers"),
        ("0 0.5 0.5 0.2 0.2 0.9", "labels/a.txt:2: expected 'class cx cy w h', got 6 values"),
        ("0 0.5 0.5 -0.2 0.2", "labels/a.txt:2: invalid box"),
        # Pixel coordinates (the example became a box at [348, 454] of size 0 x 0).
        ("0 200 150 40 30", "labels/a.txt:2: box 200 150 40 30 is outside 0..1.*look like pixels"),
        ("0 1.2 0.5 0.1 0.1", "labels/a.txt:2: box 1.2 0.5 0.1 0.1 is outside 0..1"),
    ],
)
def test_malformed_yolo_lines_name_file_and_line(yolo_dir, line, message):
    (yolo_dir / "labels" / "a.txt").write_text(f"0 0.5 0.5 0.2 0.4\n{line}\n")
    with pytest.raises(ConversionError, match=message):
        yolo_to_coco(str(yolo_dir / "images"), str(yolo_dir / "labels"), CLASSES)


def test_cli_reports_errors_without_a_traceback(yolo_dir, capsys):
    (yolo_dir / "labels" / "a.txt").write_text("7 0.5 0.5 0.2 0.4\n")
    with pytest.raises(SystemExit) as exit_info:
        run_yolo(yolo_dir, yolo_dir / "out.json")
    assert exit_info.value.code == 1
    assert "a.txt:1: class 7 outside 0..2" in capsys.readouterr().err
    assert not (yolo_dir / "out.json").exists()


VOC_XML = """<annotation>
  <filename>{name}.jpg</filename>
  <size><width>{w}</width><height>{h}</height><depth>3</depth></size>
  {objects}
</annotation>"""
VOC_OBJECT = """<object><name>{cls}</name><difficult>{difficult}</difficult>
  <bndbox><xmin>{x1}</xmin><ymin>{y1}</ymin><xmax>{x2}</xmax><ymax>{y2}</ymax></bndbox></object>"""


def write_voc(root, name, w, h, objects):
    (root / "Annotations").mkdir(parents=True, exist_ok=True)
    write_image(root / "JPEGImages" / f"{name}.jpg", h, w)
    body = "".join(
        VOC_OBJECT.format(cls=c, difficult=d, x1=b[0], y1=b[1], x2=b[2], y2=b[3])
        for c, b, d in objects
    )
    (root / "Annotations" / f"{name}.xml").write_text(
        VOC_XML.format(name=name, w=w, h=h, objects=body)
    )


def test_voc_round_trip(tmp_path):
    voc = tmp_path / "VOC2007"
    write_voc(
        voc, "000001", 120, 80, [("dog", (11, 21, 50, 60), 0), ("person", (1, 1, 120, 80), 0)]
    )
    write_voc(voc, "000002", 64, 64, [("cat", (5, 5, 30, 30), 1)])
    (voc / "ImageSets" / "Main").mkdir(parents=True)
    (voc / "ImageSets" / "Main" / "trainval.txt").write_text("000001\n000002\n")
    out = tmp_path / "voc.json"
    main(["voc", "--root", str(voc), "--split", "trainval", "--out", str(out)])

    source = CocoSource(str(voc), str(out), "JPEGImages")
    assert source.num_classes == 20 and source.class_names[11] == "dog"
    boxes, labels = source.annotations(0)
    # 1-based inclusive corners -> 0-based [x1, x2): (11, 50) -> (10, 50).
    np.testing.assert_allclose(boxes, [[10, 20, 50, 60], [0, 0, 120, 80]])
    np.testing.assert_array_equal(labels, [11, 14])
    # A difficult object is kept for evaluation as crowd (ignored), not trained on.
    assert len(source.annotations(1)[1]) == 0
    with open(out) as f:
        anns = json.load(f)["annotations"]
    assert [a["iscrowd"] for a in anns] == [0, 0, 1]


def test_voc_unknown_class_names_the_file(tmp_path):
    voc = tmp_path / "VOC"
    write_voc(voc, "x", 10, 10, [("unicorn", (1, 1, 5, 5), 0)])
    (voc / "ImageSets" / "Main").mkdir(parents=True)
    (voc / "ImageSets" / "Main" / "train.txt").write_text("x\n")
    with pytest.raises(SystemExit):
        main(["voc", "--root", str(voc), "--split", "train", "--out", str(tmp_path / "o.json")])


def test_voc_missing_split_file_is_named(tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["voc", "--root", str(tmp_path), "--split", "val", "--out", str(tmp_path / "o.json")])
    assert "ImageSets/Main/val.txt" in capsys.readouterr().err


def test_every_bad_label_file_is_listed_not_only_the_first(yolo_dir):
    """Issue: the conversion (and data.check with it) stopped at the first bad file."""
    (yolo_dir / "labels" / "a.txt").write_text("0 0.5 0.5 0.2\n7 0.5 0.5 0.2 0.2\n")
    (yolo_dir / "labels" / "sub" / "b.txt").write_text("1 200 150 40 30\n")
    with pytest.raises(ConversionError) as err:
        yolo_to_coco(str(yolo_dir / "images"), str(yolo_dir / "labels"), CLASSES)
    text = str(err.value)
    assert "2 of 3 images cannot be converted" in text
    assert "a.txt:1: expected 'class cx cy w h', got 4 values" in text
    assert "a.txt:2: class 7 outside 0..2" in text  # every bad line of a file
    assert "b.txt:1: box 200 150 40 30 is outside 0..1" in text


def test_bad_label_files_can_be_skipped_with_their_images(yolo_dir):
    """Training's way (as Ultralytics): a bad label file leaves its image out, named."""
    (yolo_dir / "labels" / "a.txt").write_text("0 0.5 0.5 0.2\n")
    skipped = []
    dataset = yolo_to_coco(str(yolo_dir / "images"), str(yolo_dir / "labels"), CLASSES, skipped)
    assert [img["file_name"] for img in dataset["images"]] == ["negative.jpg", "sub/b.png"]
    assert len(dataset["annotations"]) == 1 and dataset["annotations"][0]["image_id"] == 2
    assert len(skipped) == 1 and "a.txt:1: expected 'class cx cy w h'" in skipped[0]
    (yolo_dir / "labels" / "sub" / "b.txt").write_text("9 0.5 0.5 0.2 0.2\n")
    (yolo_dir / "images" / "negative.jpg").write_bytes(b"not an image")
    with pytest.raises(ConversionError, match=r"none of the 3 images can be converted"):
        yolo_to_coco(str(yolo_dir / "images"), str(yolo_dir / "labels"), CLASSES, [])


def test_an_existing_out_is_replaced_only_with_force(yolo_dir, capsys):
    out = yolo_dir / "train.json"
    out.write_text("{}")
    with pytest.raises(SystemExit) as exit_info:
        run_yolo(yolo_dir, out)
    assert exit_info.value.code == 1 and out.read_text() == "{}"
    assert f"--out {out} exists: pass --force to replace it" in capsys.readouterr().err
    main(["yolo", "--images", str(yolo_dir / "images"), "--labels", str(yolo_dir / "labels"),
          "--classes", str(yolo_dir / "classes.txt"), "--out", str(out), "--force"])  # fmt: skip
    assert len(json.loads(out.read_text())["images"]) == 3


def test_voc_objects_of_other_classes_name_them_and_classes(tmp_path, capsys):
    """Issue: convert_labels voc failed on a non-VOC class without naming --classes."""
    for name, cls in (("a", "cat"), ("b", "forklift"), ("c", "pallet")):
        (tmp_path / "Annotations").mkdir(exist_ok=True)
        objects = VOC_OBJECT.format(cls=cls, difficult=0, x1=1, y1=1, x2=10, y2=10)
        (tmp_path / "Annotations" / f"{name}.xml").write_text(
            VOC_XML.format(name=name, w=20, h=20, objects=objects)
        )
    (tmp_path / "ImageSets" / "Main").mkdir(parents=True)
    (tmp_path / "ImageSets" / "Main" / "train.txt").write_text("a\nb\nc\n")
    with pytest.raises(SystemExit):
        main(
            ["voc", "--root", str(tmp_path), "--split", "train", "--out", str(tmp_path / "o.json")]
        )
    err = capsys.readouterr().err
    assert "objects of 2 classes not in the 20 VOC classes: 'forklift', 'pallet'" in err
    assert "--classes FILE" in err
