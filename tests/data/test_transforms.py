"""Each augmentation keeps boxes on their pixels.

The images hold filled rectangles of unique, saturated colours on a grey background; after
a transform the box of each rectangle must bound exactly the pixels of its colour, up to
the interpolation blur at the edges.
"""

from __future__ import annotations

import math

import cv2
import numpy as np
import pytest

from msdet.data.transforms import (
    PAD_VALUE,
    filter_boxes,
    horizontal_flip,
    hsv_jitter,
    letterbox,
    mixup,
    mosaic_canvas,
    random_affine,
    random_affine_matrix,
    warp_affine,
    xyxy_to_cxcywh,
)

RED, GREEN, BLUE, YELLOW = (0, 0, 255), (0, 255, 0), (255, 0, 0), (0, 255, 255)
EDGE_TOLERANCE = 1.5  # px: bilinear interpolation smears an edge over about one pixel
# These pixel tolerances are geometry, not rounding: OpenCV's resize and warpAffine weigh in
# fixed point, so the pixels are the same with AVX-512, AVX2 or no SIMD (measured: at most
# 1.0 of 1.5 px, 1.7 of 2 px).


def image_with_rects(h, w, rects, colours, background=60):
    """A grey image with filled rectangles (xyxy, exclusive max) and their float boxes."""
    img = np.full((h, w, 3), background, dtype=np.uint8)
    for (x1, y1, x2, y2), colour in zip(rects, colours):
        img[y1:y2, x1:x2] = colour
    return img, np.array(rects, dtype=np.float32).reshape(-1, 4)


def pixel_box(img, colour, tol=60):
    """Bounding box (xyxy, exclusive max) of the pixels within ``tol`` of ``colour``."""
    close = np.all(np.abs(img.astype(int) - np.array(colour)) <= tol, axis=2)
    ys, xs = np.nonzero(close)
    assert len(xs), f"no pixels of colour {colour} left"
    return np.array([xs.min(), ys.min(), xs.max() + 1, ys.max() + 1], dtype=np.float32)


def assert_box_on_pixels(img, box, colour, tol=EDGE_TOLERANCE):
    np.testing.assert_allclose(box, pixel_box(img, colour), atol=tol)


def test_letterbox_places_the_image_top_left_and_pads_114():
    img, boxes = image_with_rects(100, 200, [(20, 10, 60, 50)], [RED])
    out, ratio = letterbox(img, (128, 160))
    assert out.shape == (128, 160, 3) and ratio == pytest.approx(0.8)
    assert np.all(out[80:] == PAD_VALUE)  # 100 * 0.8 = 80 rows of image
    assert np.all(out[:80, :160] != PAD_VALUE)
    assert_box_on_pixels(out, boxes[0] * ratio, RED)


def test_horizontal_flip_is_exact():
    img, boxes = image_with_rects(50, 90, [(5, 10, 30, 20), (70, 0, 90, 50)], [RED, GREEN])
    out, flipped = horizontal_flip(img, boxes)
    np.testing.assert_array_equal(flipped, [[60, 10, 85, 20], [0, 0, 20, 50]])
    assert_box_on_pixels(out, flipped[0], RED, tol=0)
    assert_box_on_pixels(out, flipped[1], GREEN, tol=0)


def test_warp_affine_scale_and_translation():
    img, boxes = image_with_rects(100, 100, [(10, 20, 40, 60)], [RED])
    matrix = np.array([[1.5, 0, 12], [0, 1.5, -8]], dtype=np.float64)
    out, moved = warp_affine(img, boxes, matrix, (128, 128))
    np.testing.assert_allclose(moved, [[27, 22, 72, 82]])
    assert_box_on_pixels(out, moved[0], RED)


def test_warp_affine_rotation_boxes_the_rotated_rectangle():
    img, boxes = image_with_rects(160, 160, [(60, 50, 110, 80)], [RED])
    matrix = cv2.getRotationMatrix2D((80, 80), 30, 1.0)
    out, moved = warp_affine(img, boxes, matrix, (160, 160))
    assert_box_on_pixels(out, moved[0], RED)


def test_warp_affine_clips_boxes_to_the_output():
    img, boxes = image_with_rects(100, 100, [(50, 50, 100, 100)], [RED])
    matrix = np.array([[1.0, 0, 30], [0, 1.0, 30]])
    out, moved = warp_affine(img, boxes, matrix, (100, 100))
    np.testing.assert_allclose(moved, [[80, 80, 100, 100]])
    assert_box_on_pixels(out, moved[0], RED)


@pytest.mark.parametrize("seed", range(5))
def test_random_affine_keeps_boxes_on_pixels_and_is_seeded(seed):
    img, boxes = image_with_rects(
        200, 200, [(40, 40, 100, 90), (120, 110, 170, 180)], [RED, GREEN], background=PAD_VALUE
    )
    args = dict(size_hw=(200, 200), degrees=10.0, translate=0.1, scale_range=(0.5, 1.5), shear=2.0)
    out, moved = random_affine(img, boxes, np.random.default_rng(seed), **args)
    again, moved_again = random_affine(img, boxes, np.random.default_rng(seed), **args)
    np.testing.assert_array_equal(out, again)
    np.testing.assert_array_equal(moved, moved_again)
    for box, colour in zip(moved, (RED, GREEN)):
        if min(box[2] - box[0], box[3] - box[1]) > 4:  # still visible after the warp
            # Shear makes the rectangle a parallelogram whose corners are the box corners.
            assert_box_on_pixels(out, box, colour, tol=2.0)


def test_random_affine_matrix_ranges():
    rng = np.random.default_rng(0)
    for _ in range(50):
        m = random_affine_matrix(
            rng, (100, 200), degrees=0, translate=0.1, scale_range=(0.5, 1.5), shear=0
        )
        scale = math.hypot(m[0, 0], m[1, 0])
        assert 0.5 <= scale <= 1.5 and abs(m[0, 1]) < 1e-12  # no rotation, no shear
        assert abs(m[0, 2]) <= 0.1 * 200 and abs(m[1, 2]) <= 0.1 * 100


def test_hsv_jitter_matches_per_pixel_arithmetic():
    rng_img = np.random.default_rng(1)
    img = rng_img.integers(0, 256, (32, 48, 3), dtype=np.uint8)
    for seed in range(10):
        out = hsv_jitter(img, np.random.default_rng(seed))
        # The YOLOX formula written out: int16 shifts, hue modulo 180, s and v clipped.
        rng = np.random.default_rng(seed)
        shifts = rng.uniform(-1, 1, 3) * [5, 30, 30]
        shifts = (shifts * rng.integers(0, 2, 3)).astype(np.int16)
        if not shifts.any():
            # No shift: the image is returned as is (YOLOX's lossy HSV round trip skipped).
            np.testing.assert_array_equal(out, img)
            continue
        hsv = cv2.cvtColor(img, cv2.COLOR_BGR2HSV).astype(np.int16)
        hsv[..., 0] = (hsv[..., 0] + shifts[0]) % 180
        hsv[..., 1] = np.clip(hsv[..., 1] + shifts[1], 0, 255)
        hsv[..., 2] = np.clip(hsv[..., 2] + shifts[2], 0, 255)
        expected = cv2.cvtColor(hsv.astype(np.uint8), cv2.COLOR_HSV2BGR)
        np.testing.assert_array_equal(out, expected)


def test_hsv_jitter_changes_the_image_for_some_seeds_and_keeps_shape():
    img, _ = image_with_rects(20, 20, [(5, 5, 15, 15)], [RED], background=100)
    changed = [not np.array_equal(hsv_jitter(img, np.random.default_rng(s)), img) for s in range(8)]
    assert any(changed) and hsv_jitter(img, np.random.default_rng(0)).shape == img.shape


def test_mosaic_canvas_places_each_image_around_the_centre():
    colours = (RED, GREEN, BLUE, YELLOW)
    parts = []
    for k, colour in enumerate(colours):
        img, boxes = image_with_rects(100, 100, [(10, 20, 70, 90)], [colour])
        parts.append((img, boxes, np.array([k])))
    canvas, boxes, labels = mosaic_canvas(parts, centre_xy=(90, 110), size_hw=(100, 100))
    assert canvas.shape == (200, 200, 3)
    np.testing.assert_array_equal(labels, [0, 1, 2, 3])
    # Top-left image ends at the centre: it spans x 90-100..90 = -10..90, cut at 0.
    np.testing.assert_allclose(boxes[0], [0, 30, 60, 100])
    np.testing.assert_allclose(boxes[1], [100, 30, 160, 100])  # starts at x = 90
    np.testing.assert_allclose(boxes[2], [0, 130, 60, 200])  # starts at y = 110, cut at 200
    np.testing.assert_allclose(boxes[3], [100, 130, 160, 200])
    for box, colour in zip(boxes, colours):
        assert_box_on_pixels(canvas, box, colour, tol=0)


def test_mosaic_canvas_resizes_to_fit_and_clips():
    parts = []
    for colour in (RED, GREEN, BLUE, YELLOW):
        img, boxes = image_with_rects(200, 100, [(0, 0, 100, 200)], [colour])  # tall: scale 0.5
        parts.append((img, boxes, np.array([0])))
    canvas, out_boxes, _ = mosaic_canvas(parts, centre_xy=(30, 150), size_hw=(100, 100))
    np.testing.assert_allclose(out_boxes[0], [0, 50, 30, 150])  # 50 wide, 20 cut off
    assert np.all((out_boxes[:, 0::2] >= 0) & (out_boxes[:, 0::2] <= 200))
    assert_box_on_pixels(canvas, out_boxes[0], RED, tol=0)


@pytest.mark.parametrize("seed", range(6))
def test_mixup_adds_the_pasted_boxes_on_their_pixels(seed):
    base, base_boxes = image_with_rects(128, 128, [(10, 10, 40, 40)], [RED], background=0)
    other, other_boxes = image_with_rects(96, 128, [(30, 20, 90, 60)], [GREEN], background=0)
    out, boxes, labels = mixup(
        base, base_boxes, np.array([0]), (other, other_boxes, np.array([2])),
        np.random.default_rng(seed), scale_range=(0.5, 1.5),
    )  # fmt: skip
    assert out.shape == base.shape
    np.testing.assert_array_equal(labels, [0, 2])
    np.testing.assert_array_equal(boxes[0], base_boxes[0])
    # Half-and-half blending: green appears at half intensity wherever the pasted
    # rectangle is (also over the red one), red stays at least half where it was.
    if min(boxes[1, 2] - boxes[1, 0], boxes[1, 3] - boxes[1, 1]) > 2:
        ys, xs = np.nonzero(out[..., 1] >= 100)
        green_box = [xs.min(), ys.min(), xs.max() + 1, ys.max() + 1]
        np.testing.assert_allclose(boxes[1], green_box, atol=2.0)
    assert np.all(out[10:40, 10:40, 2] >= 127)


def test_mixup_blends_in_float_and_truncates_as_yolox():
    """YOLOX computes 0.5 * a + 0.5 * b in float32 and casts to uint8: 101 and 102 give
    101 (cv2.addWeighted would round to 102)."""
    base = np.full((32, 32, 3), 101, np.uint8)
    other = np.full((32, 32, 3), 102, np.uint8)
    out, _, _ = mixup(
        base, np.zeros((0, 4), np.float32), np.zeros(0, np.int64),
        (other, np.array([[0, 0, 32, 32]], np.float32), np.array([1])),
        np.random.default_rng(0), scale_range=(1.0, 1.0),
    )  # fmt: skip
    assert int(out[5, 5, 0]) == 101


def test_filter_boxes_drops_boxes_one_pixel_thin_or_less():
    boxes = np.array([[0, 0, 1, 10], [0, 0, 1.01, 10], [0, 0, 10, 0.5], [5, 5, 20, 20]], np.float32)
    kept, labels = filter_boxes(boxes, np.arange(4))
    np.testing.assert_array_equal(labels, [1, 3])
    assert kept.shape == (2, 4)


def test_xyxy_to_cxcywh():
    out = xyxy_to_cxcywh(np.array([[10, 20, 30, 60]], np.float32))
    np.testing.assert_allclose(out, [[20, 40, 20, 40]])
