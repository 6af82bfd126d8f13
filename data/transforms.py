"""YOLOX training augmentations on uint8 BGR images with xyxy pixel boxes.

Every random transform takes an explicit ``numpy.random.Generator``: the pipeline seeds
one per (seed, epoch, sample), so a sample is the same whatever worker makes it.
Parameters and their meaning follow YOLOX 0.3.0 (``yolox/data/data_augment.py`` and
``mosaicdetection.py``); the code is written for this project.

Box convention: a box ``[x1, y1, x2, y2]`` covers the pixels ``x1 <= x < x2``, so a
W-pixel-wide image spans ``[0, W]``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import cv2
import numpy as np

PAD_VALUE = 114  # YOLOX's grey for letterbox and affine borders
HSV_GAINS = (5, 30, 30)  # hue (OpenCV's 0..179 scale), saturation, value


def letterbox(
    img: np.ndarray, size_hw: Sequence[int], pad_value: int = PAD_VALUE
) -> tuple[np.ndarray, float]:
    """Resize keeping the aspect ratio to fit ``size_hw`` and pad to it, image at the top-left.

    Returns the padded image and the ratio (multiply boxes by it), as YOLOX's ``preproc``.
    """
    out_h, out_w = int(size_hw[0]), int(size_hw[1])
    h, w = img.shape[:2]
    ratio = min(out_h / h, out_w / w)
    new_w, new_h = max(1, int(w * ratio)), max(1, int(h * ratio))
    if (new_w, new_h) != (w, h):
        img = cv2.resize(img, (new_w, new_h), interpolation=cv2.INTER_LINEAR)
    out = np.full((out_h, out_w, 3), pad_value, dtype=np.uint8)
    out[:new_h, :new_w] = img
    return out, ratio


def resize_to_fit(
    img: np.ndarray, boxes: np.ndarray, size_hw: Sequence[int]
) -> tuple[np.ndarray, np.ndarray]:
    """Resize keeping the aspect ratio to fit ``size_hw`` (no padding), boxes with it: what
    YOLOX's dataset hands its transforms (``pull_item``)."""
    h, w = img.shape[:2]
    ratio = min(int(size_hw[0]) / h, int(size_hw[1]) / w)
    new_w, new_h = max(1, int(w * ratio)), max(1, int(h * ratio))
    if (new_w, new_h) != (w, h):
        img = cv2.resize(img, (new_w, new_h), interpolation=cv2.INTER_LINEAR)
    return img, (boxes * np.float32(ratio)).astype(np.float32)


def hsv_jitter(
    img: np.ndarray, rng: np.random.Generator, gains: Sequence[float] = HSV_GAINS
) -> np.ndarray:
    """Shift hue, saturation and value by random integer amounts, as YOLOX's ``augment_hsv``.

    Each channel's shift is drawn from U(-gain, gain) and then kept or zeroed with
    probability 1/2; hue wraps around (0..179), saturation and value are clipped.
    """
    shifts = rng.uniform(-1.0, 1.0, 3) * np.asarray(gains, dtype=np.float64)
    shifts *= rng.integers(0, 2, 3)
    dh, ds, dv = shifts.astype(np.int16)  # truncation toward zero, as YOLOX
    if dh == 0 and ds == 0 and dv == 0:
        return img.copy()
    # Lookup tables give the same result as per-pixel int16 arithmetic, several times faster.
    levels = np.arange(256, dtype=np.int16)
    lut_h = ((levels + dh) % 180).astype(np.uint8)
    lut_s = np.clip(levels + ds, 0, 255).astype(np.uint8)
    lut_v = np.clip(levels + dv, 0, 255).astype(np.uint8)
    h, s, v = cv2.split(cv2.cvtColor(img, cv2.COLOR_BGR2HSV))
    hsv = cv2.merge((cv2.LUT(h, lut_h), cv2.LUT(s, lut_s), cv2.LUT(v, lut_v)))
    return cv2.cvtColor(hsv, cv2.COLOR_HSV2BGR)


def horizontal_flip(img: np.ndarray, boxes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mirror the image left-right and its boxes with it."""
    width = img.shape[1]
    flipped = boxes.copy()
    flipped[:, 0] = width - boxes[:, 2]
    flipped[:, 2] = width - boxes[:, 0]
    return np.ascontiguousarray(img[:, ::-1]), flipped


def random_affine_matrix(
    rng: np.random.Generator,
    size_hw: Sequence[int],
    degrees: float,
    translate: float,
    scale_range: Sequence[float],
    shear: float,
) -> np.ndarray:
    """A 2x3 matrix: rotation by U(-degrees, degrees) and scaling by U(scale_range) about the
    origin, shear by U(-shear, shear) degrees on each axis, and translation by
    U(-translate, translate) of the output size, as YOLOX's ``get_affine_matrix``."""
    out_h, out_w = size_hw
    angle = rng.uniform(-degrees, degrees)
    scale = rng.uniform(scale_range[0], scale_range[1])
    if scale <= 0:
        raise ValueError(f"affine scale must be positive, got range {tuple(scale_range)}")
    shear_x = math.tan(math.radians(rng.uniform(-shear, shear)))
    shear_y = math.tan(math.radians(rng.uniform(-shear, shear)))
    rot = cv2.getRotationMatrix2D(center=(0.0, 0.0), angle=angle, scale=scale)
    matrix = np.empty((2, 3), dtype=np.float64)
    matrix[0] = rot[0] + shear_y * rot[1]
    matrix[1] = rot[1] + shear_x * rot[0]
    matrix[0, 2] = rng.uniform(-translate, translate) * out_w
    matrix[1, 2] = rng.uniform(-translate, translate) * out_h
    return matrix


def warp_affine(
    img: np.ndarray, boxes: np.ndarray, matrix: np.ndarray, size_hw: Sequence[int]
) -> tuple[np.ndarray, np.ndarray]:
    """Warp the image into an ``size_hw`` output (grey border) and each box through its four
    corners: the new box is the corners' bounding box, clipped to the output."""
    out_h, out_w = int(size_hw[0]), int(size_hw[1])
    warped = cv2.warpAffine(
        img, matrix, dsize=(out_w, out_h), borderValue=(PAD_VALUE, PAD_VALUE, PAD_VALUE)
    )
    if len(boxes) == 0:
        return warped, boxes.reshape(0, 4).astype(np.float32)
    x1, y1, x2, y2 = boxes[:, 0], boxes[:, 1], boxes[:, 2], boxes[:, 3]
    corners = np.stack([(x1, y1), (x2, y1), (x1, y2), (x2, y2)])  # [4, 2, N]
    xs = matrix[0, 0] * corners[:, 0] + matrix[0, 1] * corners[:, 1] + matrix[0, 2]
    ys = matrix[1, 0] * corners[:, 0] + matrix[1, 1] * corners[:, 1] + matrix[1, 2]
    new_boxes = np.stack([xs.min(0), ys.min(0), xs.max(0), ys.max(0)], axis=1)
    new_boxes[:, 0::2] = new_boxes[:, 0::2].clip(0, out_w)
    new_boxes[:, 1::2] = new_boxes[:, 1::2].clip(0, out_h)
    return warped, new_boxes.astype(np.float32)


def random_affine(
    img: np.ndarray,
    boxes: np.ndarray,
    rng: np.random.Generator,
    size_hw: Sequence[int],
    degrees: float,
    translate: float,
    scale_range: Sequence[float],
    shear: float,
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`random_affine_matrix` applied by :func:`warp_affine`."""
    matrix = random_affine_matrix(rng, size_hw, degrees, translate, scale_range, shear)
    return warp_affine(img, boxes, matrix, size_hw)


def mosaic_canvas(
    parts: Sequence[tuple[np.ndarray, np.ndarray, np.ndarray]],
    centre_xy: tuple[int, int],
    size_hw: Sequence[int],
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Place four (image, boxes, labels) around ``centre_xy`` on a grey 2H x 2W canvas.

    Each image is first resized to fit H x W. Image 0 goes to the top-left of the centre,
    1 top-right, 2 bottom-left, 3 bottom-right, touching the centre with one corner and
    cut at the canvas border; boxes are moved with their image and clipped to the canvas.
    YOLOX then warps the canvas to H x W with :func:`random_affine`.
    """
    out_h, out_w = int(size_hw[0]), int(size_hw[1])
    canvas_h, canvas_w = 2 * out_h, 2 * out_w
    xc, yc = centre_xy
    canvas = np.full((canvas_h, canvas_w, 3), PAD_VALUE, dtype=np.uint8)
    all_boxes, all_labels = [], []
    for quadrant, (img, boxes, labels) in enumerate(parts[:4]):
        h0, w0 = img.shape[:2]
        scale = min(out_h / h0, out_w / w0)
        w, h = max(1, int(w0 * scale)), max(1, int(h0 * scale))
        img = cv2.resize(img, (w, h), interpolation=cv2.INTER_LINEAR)
        left = xc - w if quadrant in (0, 2) else xc  # the image's origin on the canvas
        top = yc - h if quadrant in (0, 1) else yc
        cx1, cy1 = max(left, 0), max(top, 0)
        cx2, cy2 = min(left + w, canvas_w), min(top + h, canvas_h)
        if cx2 > cx1 and cy2 > cy1:
            canvas[cy1:cy2, cx1:cx2] = img[cy1 - top : cy2 - top, cx1 - left : cx2 - left]
        moved = boxes * scale + np.array([left, top, left, top], dtype=np.float32)
        all_boxes.append(moved)
        all_labels.append(labels)
    boxes = np.concatenate(all_boxes).astype(np.float32).reshape(-1, 4)
    boxes[:, 0::2] = boxes[:, 0::2].clip(0, canvas_w)
    boxes[:, 1::2] = boxes[:, 1::2].clip(0, canvas_h)
    return canvas, boxes, np.concatenate(all_labels).astype(np.int64)


def mixup(
    img: np.ndarray,
    boxes: np.ndarray,
    labels: np.ndarray,
    other: tuple[np.ndarray, np.ndarray, np.ndarray],
    rng: np.random.Generator,
    scale_range: Sequence[float],
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Blend a second image half-and-half over ``img`` and add its boxes, as YOLOX's mixup.

    The other image is letterboxed to ``img``'s size, scaled by U(scale_range), mirrored
    with probability 1/2, placed on a black canvas at least as large as ``img`` and
    cropped at a random offset back to ``img``'s size.
    """
    other_img, other_boxes, other_labels = other
    jitter = rng.uniform(scale_range[0], scale_range[1])
    flip = rng.uniform(0.0, 1.0) > 0.5
    target_h, target_w = img.shape[:2]
    pasted, ratio = letterbox(other_img, (target_h, target_w))
    jit_w, jit_h = max(1, int(target_w * jitter)), max(1, int(target_h * jitter))
    pasted = cv2.resize(pasted, (jit_w, jit_h), interpolation=cv2.INTER_LINEAR)
    ratio *= jitter
    pasted_boxes = other_boxes * ratio
    pasted_boxes[:, 0::2] = pasted_boxes[:, 0::2].clip(0, jit_w)
    pasted_boxes[:, 1::2] = pasted_boxes[:, 1::2].clip(0, jit_h)
    if flip:
        pasted, pasted_boxes = horizontal_flip(pasted, pasted_boxes)

    canvas = np.zeros((max(jit_h, target_h), max(jit_w, target_w), 3), dtype=np.uint8)
    canvas[:jit_h, :jit_w] = pasted
    y_off = int(rng.integers(0, canvas.shape[0] - target_h)) if canvas.shape[0] > target_h else 0
    x_off = int(rng.integers(0, canvas.shape[1] - target_w)) if canvas.shape[1] > target_w else 0
    crop = canvas[y_off : y_off + target_h, x_off : x_off + target_w]

    pasted_boxes = pasted_boxes - np.array([x_off, y_off, x_off, y_off], dtype=np.float32)
    pasted_boxes[:, 0::2] = pasted_boxes[:, 0::2].clip(0, target_w)
    pasted_boxes[:, 1::2] = pasted_boxes[:, 1::2].clip(0, target_h)
    # YOLOX blends in float32 and truncates back to uint8 (cv2.addWeighted would round).
    blended = (0.5 * img.astype(np.float32) + 0.5 * crop.astype(np.float32)).astype(np.uint8)
    return (
        blended,
        np.concatenate([boxes, pasted_boxes]).astype(np.float32).reshape(-1, 4),
        np.concatenate([labels, other_labels]).astype(np.int64),
    )


def filter_boxes(
    boxes: np.ndarray, labels: np.ndarray, min_side: float = 1.0
) -> tuple[np.ndarray, np.ndarray]:
    """Keep boxes whose width and height both exceed ``min_side`` pixels (YOLOX: 1 px)."""
    keep = np.minimum(boxes[:, 2] - boxes[:, 0], boxes[:, 3] - boxes[:, 1]) > min_side
    return boxes[keep], labels[keep]


def xyxy_to_cxcywh(boxes: np.ndarray) -> np.ndarray:
    """Corner boxes to (centre x, centre y, width, height)."""
    out = np.empty_like(boxes)
    out[:, 0] = (boxes[:, 0] + boxes[:, 2]) * 0.5
    out[:, 1] = (boxes[:, 1] + boxes[:, 3]) * 0.5
    out[:, 2] = boxes[:, 2] - boxes[:, 0]
    out[:, 3] = boxes[:, 3] - boxes[:, 1]
    return out
