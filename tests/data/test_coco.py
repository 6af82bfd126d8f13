"""CocoSource on a small hand-written COCO file with the awkward cases real data has."""

from __future__ import annotations

import json
import logging

import cv2
import numpy as np
import pytest

from msdet.data.coco import CocoSource
from msdet.data.image_io import ImageReadError

# Deliberately unsorted, non-contiguous category ids.
CATEGORIES = [
    {"id": 7, "name": "triangle"},
    {"id": 2, "name": "disc"},
    {"id": 5, "name": "rectangle"},
]


def write_jpeg(path, h: int, w: int, truncate: bool = False) -> None:
    yy, xx = np.mgrid[0:h, 0:w]
    img = np.dstack([xx % 256, yy % 256, (xx + yy) % 256]).astype(np.uint8)
    data = cv2.imencode(".jpg", img)[1].tobytes()
    path.write_bytes(data[: len(data) // 2] if truncate else data)


@pytest.fixture()
def coco_dir(tmp_path):
    (tmp_path / "images").mkdir()
    (tmp_path / "annotations").mkdir()
    write_jpeg(tmp_path / "images" / "a.jpg", 60, 80)
    write_jpeg(tmp_path / "images" / "empty.jpg", 40, 40)
    write_jpeg(tmp_path / "images" / "cut.jpg", 120, 160, truncate=True)
    write_jpeg(tmp_path / "images" / "small.jpg", 30, 40)  # annotated as 60x80
    images = [
        {"id": 11, "file_name": "a.jpg", "height": 60, "width": 80},
        {"id": 12, "file_name": "empty.jpg", "height": 40, "width": 40},
        {"id": 13, "file_name": "cut.jpg", "height": 120, "width": 160},
        {"id": 14, "file_name": "small.jpg", "height": 60, "width": 80},
    ]
    anns = [
        {"id": 1, "image_id": 11, "category_id": 2, "bbox": [10, 5, 20, 10], "area": 200, "iscrowd": 0},
        {"id": 2, "image_id": 11, "category_id": 7, "bbox": [70, 50, 30, 30], "area": 900, "iscrowd": 0},
        {"id": 3, "image_id": 11, "category_id": 5, "bbox": [0, 0, 80, 60], "area": 4800, "iscrowd": 1},
        {"id": 4, "image_id": 11, "category_id": 5, "bbox": [40, 40, 0.5, 10], "area": 5, "iscrowd": 0},
        {"id": 5, "image_id": 11, "category_id": 5, "bbox": [-5, -5, 20, 20], "iscrowd": 0},
        {"id": 6, "image_id": 11, "category_id": 5, "bbox": [1, 2, 3], "area": 1, "iscrowd": 0},
        {"id": 7, "image_id": 11, "category_id": 99, "bbox": [1, 2, 3, 4], "area": 1, "iscrowd": 0},
        {"id": 8, "image_id": 13, "category_id": 7, "bbox": [10, 10, 50, 50], "area": 2500, "iscrowd": 0},
        {"id": 9, "image_id": 14, "category_id": 2, "bbox": [20, 10, 40, 20], "area": 800, "iscrowd": 0},
    ]  # fmt: skip
    dataset = {"images": images, "annotations": anns, "categories": CATEGORIES}
    (tmp_path / "annotations" / "train.json").write_text(json.dumps(dataset))
    return tmp_path


@pytest.fixture()
def source(coco_dir, caplog):
    with caplog.at_level(logging.WARNING, logger="msdet.data.coco"):
        src = CocoSource(str(coco_dir), "annotations/train.json", "images")
    src.load_warnings = caplog.text
    return src


def test_category_ids_map_to_contiguous_indices_sorted_by_id(source):
    assert source.category_ids == [2, 5, 7]
    assert source.class_names == ["disc", "rectangle", "triangle"]
    assert source.num_classes == 3
    assert source.image_ids == [11, 12, 13, 14]
    assert len(source) == 4


def test_boxes_are_clipped_xyxy_with_training_labels(source):
    boxes, labels = source.annotations(0)
    assert boxes.dtype == np.float32 and labels.dtype == np.int64
    # disc [10,5,20,10]; triangle clipped at the image corner; the box at (-5,-5) clipped
    # to (0,0)-(15,15). The crowd box and the 0.5 px wide box are not targets.
    np.testing.assert_allclose(boxes, [[10, 5, 30, 15], [70, 50, 80, 60], [0, 0, 15, 15]])
    np.testing.assert_array_equal(labels, [0, 2, 1])


def test_crowd_annotations_stay_in_the_coco_object_for_evaluation(source):
    assert source.coco.getAnnIds(imgIds=[11], iscrowd=True) == [3]
    assert source.coco.anns[5]["area"] == 400  # missing area filled in for COCOeval


def test_image_without_objects_is_kept_as_a_negative(source):
    boxes, labels = source.annotations(1)
    assert boxes.shape == (0, 4) and labels.shape == (0,)
    img, boxes, labels = source.load(1)
    assert img.shape == (40, 40, 3) and len(boxes) == 0


def test_malformed_annotations_are_skipped_and_reported_by_id(source):
    assert 6 not in source.coco.anns and 7 not in source.coco.anns
    assert "skipped 2 malformed annotation(s)" in source.load_warnings
    assert "id 6 (bbox must be [x, y, w, h]" in source.load_warnings
    assert "id 7 (unknown category_id 99)" in source.load_warnings


def test_image_info_and_load(source):
    assert source.image_info(0) == {"id": 11, "file_name": "a.jpg", "height": 60, "width": 80}
    img, boxes, labels = source.load(0)
    assert img.dtype == np.uint8 and img.shape == (60, 80, 3)
    np.testing.assert_array_equal(labels, [0, 2, 1])


def test_truncated_image_raises_naming_the_file(source):
    with pytest.raises(ImageReadError, match="cut.jpg"):
        source.load(2)
    assert len(source.annotations(2)[0]) == 1  # its annotations are still readable


def test_boxes_follow_an_image_smaller_than_annotated(source, caplog):
    with caplog.at_level(logging.WARNING, logger="msdet.data.coco"):
        img, boxes, _ = source.load(3)
    assert img.shape == (30, 40, 3)
    np.testing.assert_allclose(boxes, [[10, 5, 30, 15]])
    assert "small.jpg is 40x30 but annotated as 80x60; its boxes are scaled" in caplog.text


def test_evaluation_sees_an_image_at_its_annotated_size(source):
    """The mirror of training's rule: the pixels are resized to the annotation."""
    assert source.load_as_annotated(3).shape == (60, 80, 3)
    assert source.load_as_annotated(0).shape == (60, 80, 3)
    assert [(i, px, ann) for i, px, ann in source.size_mismatches()] == [(3, (40, 30), (80, 60))]


def with_images(coco_dir, images, anns=()) -> str:
    dataset = {"images": images, "annotations": list(anns), "categories": CATEGORIES}
    (coco_dir / "annotations" / "merged.json").write_text(json.dumps(dataset))
    return "annotations/merged.json"


def test_duplicate_image_ids_are_an_error_naming_both_files(coco_dir):
    """Issue: two exports concatenated: one id, two files; one file got the other's boxes."""
    ann_file = with_images(
        coco_dir,
        [
            {"id": 11, "file_name": "a.jpg", "height": 60, "width": 80},
            {"id": 11, "file_name": "empty.jpg", "height": 40, "width": 40},
        ],
    )
    with pytest.raises(
        ValueError, match=r"merged.json: image id 11 is used by two images, a.jpg and empty.jpg"
    ):
        CocoSource(str(coco_dir), ann_file, "images")


def test_duplicate_annotation_ids_are_an_error(coco_dir):
    box = {"image_id": 11, "category_id": 2, "bbox": [1, 1, 9, 9], "area": 81, "iscrowd": 0}
    ann_file = with_images(
        coco_dir,
        [{"id": 11, "file_name": "a.jpg", "height": 60, "width": 80}],
        [dict(box, id=3), dict(box, id=3)],
    )
    with pytest.raises(ValueError, match="annotation id 3 is used twice"):
        CocoSource(str(coco_dir), ann_file, "images")


def test_missing_annotation_file_names_the_path(coco_dir):
    with pytest.raises(FileNotFoundError, match="annotations/nope.json"):
        CocoSource(str(coco_dir), "annotations/nope.json", "images")


def test_missing_image_folder_names_the_path(coco_dir):
    with pytest.raises(FileNotFoundError, match=str(coco_dir / "train2017")):
        CocoSource(str(coco_dir), "annotations/train.json", "train2017")


def test_broken_image_entry_fails_at_start_up(coco_dir):
    bad = {"images": [{"id": 1, "file_name": "a.jpg"}], "annotations": [], "categories": CATEGORIES}
    (coco_dir / "annotations" / "bad.json").write_text(json.dumps(bad))
    with pytest.raises(ValueError, match="image entry needs"):
        CocoSource(str(coco_dir), "annotations/bad.json", "images")


def test_two_categories_of_one_name_are_an_error_naming_file_ids_and_name(coco_dir):
    """Their boxes would train two classes that every output names alike."""
    dataset = {
        "images": [{"id": 1, "file_name": "a.jpg", "height": 60, "width": 80}],
        "annotations": [],
        "categories": [{"id": 1, "name": "car"}, {"id": 2, "name": "bus"},
                       {"id": 5, "name": "car"}],
    }  # fmt: skip
    (coco_dir / "annotations" / "cars.json").write_text(json.dumps(dataset))
    with pytest.raises(ValueError, match=r"cars.json: categories 1 and 5 are both named 'car'"):
        CocoSource(str(coco_dir), "annotations/cars.json", "images")
