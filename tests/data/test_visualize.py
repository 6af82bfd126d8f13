"""The visual check command draws augmented samples with their boxes."""

from __future__ import annotations

import cv2
import numpy as np

from msdet.data.visualize import class_colour, draw_boxes, main


def test_draw_boxes_outlines_each_box_in_its_class_colour():
    img = np.zeros((40, 60, 3), dtype=np.uint8)
    out = draw_boxes(img, np.array([[10, 20, 30, 35]], np.float32), np.array([1]), ["a", "b"])
    colour = class_colour(1)
    assert tuple(out[20, 15]) == colour and tuple(out[34, 15]) == colour  # top, bottom edge
    assert tuple(out[27, 10]) == colour and tuple(out[27, 29]) == colour  # left, right edge
    assert tuple(out[27, 20]) == (0, 0, 0)  # inside untouched
    assert class_colour(0) != class_colour(1) != class_colour(2)


def test_command_writes_the_requested_samples(tmp_path):
    paths = main(
        ["--num", "3", "--out", str(tmp_path / "vis"), f"data.cache_dir={tmp_path}",
         "data.num_train=8", "data.num_val=2", "data.img_size=[96,128]"]
    )  # fmt: skip
    assert len(paths) == 3
    for path in paths:
        img = cv2.imread(path)
        assert img.shape == (96, 128, 3)
        assert img.std() > 10  # a real picture, not a blank canvas
