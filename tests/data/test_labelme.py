"""labelme's shapes as boxes: corners in any order, polygons, circles; points left out."""

from __future__ import annotations

import json

import cv2
import numpy as np
import pytest

from msdet.data.convert_labels import ConversionError
from msdet.data.labelme import labelme_class_names, labelme_to_coco


def shape(label, points, kind):
    return {"label": label, "points": points, "group_id": None, "description": "",
            "shape_type": kind, "flags": {}, "mask": None}  # fmt: skip


def test_shapes_become_their_boxes_and_points_are_counted_out(tmp_path):
    cv2.imwrite(str(tmp_path / "a.jpg"), np.zeros((50, 60, 3), np.uint8))
    shapes = [
        shape("cup", [[40, 30], [10, 5]], "rectangle"),
        shape("cup", [[20, 20], [26, 20]], "circle"),
        shape("lid", [[5, 40], [15, 35], [12, 48]], "polygon"),
        shape("lid", [[1, 1]], "point"),
    ]
    record = {"version": "6.3.1", "flags": {}, "shapes": shapes, "imagePath": "a.jpg",
              "imageData": None, "imageHeight": 50, "imageWidth": 60}  # fmt: skip
    (tmp_path / "a.json").write_text(json.dumps(record))
    files = [str(tmp_path / "a.json")]
    assert labelme_class_names(files, str(tmp_path)) == (
        ["cup", "lid"],
        "the labels of the json files, sorted",
    )
    not_boxes: dict[str, int] = {}
    dataset = labelme_to_coco(files, str(tmp_path), ["cup", "lid"], None, not_boxes)
    assert [a["bbox"] for a in dataset["annotations"]] == [
        [10, 5, 30, 25], [14, 14, 12, 12], [5, 35, 10, 13]
    ]  # fmt: skip
    assert [a["category_id"] for a in dataset["annotations"]] == [1, 1, 2]
    assert not_boxes == {"point": 1}
    (tmp_path / "a.jpg").unlink()
    with pytest.raises(ConversionError, match=r"a.json: its image 'a.jpg' is not at "):
        labelme_to_coco(files, str(tmp_path), ["cup", "lid"])
