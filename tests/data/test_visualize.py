"""Boxes and labels as msdet draws them, and the visual check command that uses them."""

from __future__ import annotations

import cv2
import numpy as np

from msdet.data.visualize import (
    LabelStyle,
    class_colour,
    draw_boxes,
    line_width,
    main,
    place_labels,
    text_colour,
)

NAMES = ["disc", "rectangle", "triangle"]


def _run_length(row: np.ndarray, start: int, colour: tuple[int, int, int]) -> int:
    """How many pixels from ``start`` along ``row`` have exactly ``colour``."""
    n = 0
    while start + n < len(row) and tuple(row[start + n]) == colour:
        n += 1
    return n


def _labelled(img_hw, boxes, labels, scores=None):
    """The drawn picture and where its labels went (best score first, as draw_boxes)."""
    img = np.zeros((*img_hw, 3), dtype=np.uint8)
    out = draw_boxes(img, boxes, labels, NAMES, scores)
    style = LabelStyle.for_image(img_hw)
    order = np.arange(len(boxes)) if scores is None else np.argsort(-np.asarray(scores))
    texts = [NAMES[labels[k]] + ("" if scores is None else f" {scores[k]:.2f}") for k in order]
    spots = place_labels(boxes[order], [style.size(t) for t in texts], img_hw, line_width(img_hw))
    return out, [labels[k] for k in order], spots


def _assert_label_drawn(out, spot, label):
    """The label's rectangle is filled with its class colour, with text in the contrasting one."""
    x1, y1, x2, y2 = spot
    patch = out[y1:y2, x1:x2].reshape(-1, 3).astype(int)
    colour, ink = np.array(class_colour(label)), np.array(text_colour(class_colour(label)))
    filled = (patch == colour).all(1).mean()
    # Anti-aliased strokes: pixels nearer the text colour than the background's.
    text = (np.abs(patch - ink).sum(1) < np.abs(patch - colour).sum(1)).mean()
    assert filled > 0.5, (spot, filled)
    assert text > 0.02, (spot, text)


def test_draw_boxes_outlines_each_box_in_its_class_colour():
    img = np.zeros((40, 60, 3), dtype=np.uint8)
    out = draw_boxes(img, np.array([[10, 20, 30, 35]], np.float32), np.array([1]), ["a", "b"])
    colour = class_colour(1)
    assert tuple(out[34, 15]) == colour  # bottom edge
    assert tuple(out[27, 10]) == colour and tuple(out[27, 29]) == colour  # left, right edge
    assert tuple(out[27, 20]) == (0, 0, 0)  # inside untouched
    assert class_colour(0) != class_colour(1) != class_colour(2)


def test_line_width_and_label_size_grow_with_the_image():
    widths, label_heights = [], []
    for side in (320, 1000, 2400):
        box = np.array([[0.25, 0.4, 0.75, 0.9]], np.float32) * side
        out, _, spots = _labelled((side, side), box, np.array([2]), np.array([0.9]))
        x1, y_mid = int(box[0, 0]), int((box[0, 1] + box[0, 3]) / 2)
        row = out[y_mid]
        start = x1 - line_width((side, side)) // 2
        widths.append(_run_length(row, start, class_colour(2)))
        (spot,) = spots
        _assert_label_drawn(out, spot, 2)
        label_heights.append(spot[3] - spot[1])
    assert widths[0] >= 2  # no 1 px outline on a small picture
    assert widths[0] < widths[1] < widths[2], widths
    assert widths[2] >= 6
    assert label_heights[0] < label_heights[1] < label_heights[2], label_heights


def test_labels_stay_inside_the_image_on_a_filled_background():
    h, w = 120, 160
    # Boxes against the top, left, right and bottom edges: no room outside them.
    boxes = np.array(
        [[0, 0, 50, 40], [110, 0, 160, 30], [0, 90, 40, 120], [120, 95, 160, 120]], np.float32
    )
    labels = np.array([0, 1, 2, 1])
    out, ordered, spots = _labelled((h, w), boxes, labels, np.array([0.9, 0.8, 0.7, 0.6]))
    assert all(s is not None for s in spots)
    for spot, label in zip(spots, ordered):
        x1, y1, x2, y2 = spot
        assert 0 <= x1 < x2 <= w and 0 <= y1 < y2 <= h, spot
        _assert_label_drawn(out, spot, label)


def test_labels_of_overlapping_boxes_never_cover_each_other():
    h, w = 240, 320
    # Five detections of nearly the same object, as a weak model gives them.
    boxes = np.array([[100 + 3 * k, 80 + 2 * k, 180 + 3 * k, 160 + 2 * k] for k in range(5)])
    labels = np.array([0, 1, 2, 0, 1])
    scores = np.array([0.9, 0.8, 0.7, 0.6, 0.5])
    out, ordered, spots = _labelled((h, w), boxes.astype(np.float32), labels, scores)
    placed = [(s, lab) for s, lab in zip(spots, ordered) if s is not None]
    assert len(placed) == 5
    for i, (a, _) in enumerate(placed):
        for b, _ in placed[i + 1 :]:
            assert a[2] <= b[0] or b[2] <= a[0] or a[3] <= b[1] or b[3] <= a[1], (a, b)
    for spot, label in placed:  # each one readable in the final picture
        _assert_label_drawn(out, spot, label)


def test_a_label_with_no_free_place_is_left_out_not_printed_over_another():
    boxes = np.array([[4, 4, 60, 20]] * 12, np.float32)
    style = LabelStyle.for_image((48, 200))
    spots = place_labels(boxes, [style.size("rectangle 0.50")] * 12, (48, 200))
    placed = [s for s in spots if s is not None]
    assert 1 <= len(placed) < 12
    assert spots[0] is not None  # the first (best) one always gets a place


def test_a_label_wider_than_the_image_is_shortened_to_fit():
    out = draw_boxes(np.zeros((40, 50, 3), np.uint8), np.array([[5, 5, 45, 35]]), [1], NAMES)
    style = LabelStyle.for_image((40, 50))
    short = style.fit("rectangle", 50)
    assert short.endswith("..") and style.size(short)[0] <= 50
    assert (out == class_colour(1)).all(2).sum() > 100  # its background is drawn


def test_text_contrasts_with_its_background():
    assert text_colour((0, 255, 255)) == (0, 0, 0)  # yellow: black text
    assert text_colour((128, 0, 0)) == (255, 255, 255)  # dark blue: white text


def test_command_writes_the_requested_samples(tmp_path):
    paths = main(
        ["--num", "3", "--out", str(tmp_path / "vis"), f"data.cache_dir={tmp_path}",
         "data.num_train=8", "data.num_val=2", "data.img_size=[96,128]", "train.img_scale=1.5"]
    )  # fmt: skip
    assert len(paths) == 3
    for path in paths:
        img = cv2.imread(path)
        assert img.shape == (160, 192, 3)  # the training input: 1.5 x [96, 128]
        assert img.std() > 10  # a real picture, not a blank canvas
