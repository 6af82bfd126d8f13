"""Detections as records: from letterboxed input pixels back to the original image, and into
COCO result and prediction records.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np


def detections_in_image(
    dets: np.ndarray, count: int, scale: float, orig_hw: Sequence[int]
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One image's detections in original-image pixels: boxes ``[n, 4]`` (x1, y1, x2, y2;
    the letterbox undone, clipped to the image), scores ``[n]``, class indices ``[n]``."""
    dets = np.asarray(dets, dtype=np.float32)[: int(count)]
    h, w = float(orig_hw[0]), float(orig_hw[1])
    xyxy = dets[:, :4] / float(scale)
    xyxy[:, [0, 2]] = xyxy[:, [0, 2]].clip(0.0, w)
    xyxy[:, [1, 3]] = xyxy[:, [1, 3]].clip(0.0, h)
    return xyxy, dets[:, 4], dets[:, 5].astype(np.int64)


def detections_to_original(
    dets: np.ndarray, count: int, scale: float, orig_hw: Sequence[int]
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`detections_in_image` with COCO boxes ``[n, 4]`` (x, y, w, h)."""
    xyxy, scores, labels = detections_in_image(dets, count, scale, orig_hw)
    xywh = np.concatenate((xyxy[:, :2], xyxy[:, 2:] - xyxy[:, :2]), 1)
    return xywh, scores, labels


def prediction_records(
    dets: np.ndarray,
    count: int,
    scale: float,
    orig_hw: Sequence[int],
    category_ids: Sequence[int],
    class_names: Sequence[str],
) -> list[dict[str, Any]]:
    """One image's detections as records ``{bbox [x, y, w, h], score, category_id, category_name}``.

    ``bbox`` is in original-image pixels; ``category_ids[label]`` and ``class_names[label]``
    name training class ``label``.
    """
    boxes, scores, labels = detections_to_original(dets, count, scale, orig_hw)
    return detection_records(boxes, scores, labels, category_ids, class_names)


def detection_records(
    boxes_xywh: np.ndarray,
    scores: np.ndarray,
    labels: np.ndarray,
    category_ids: Sequence[int],
    class_names: Sequence[str],
) -> list[dict[str, Any]]:
    """:func:`prediction_records` of detections already in original pixels (COCO boxes)."""
    return [
        {
            "bbox": [round(float(v), 2) for v in box],
            "score": round(float(score), 5),
            "category_id": int(category_ids[label]),
            "category_name": str(class_names[label]),
        }
        for box, score, label in zip(boxes_xywh, scores, labels)
    ]


def relabel_detections(
    dets: np.ndarray, counts: np.ndarray, labels: Sequence[int]
) -> tuple[np.ndarray, np.ndarray]:
    """Detections of a model whose class ``k`` is the dataset's class ``labels[k]`` (-1:
    a class the dataset lacks) in the dataset's labels: ``dets [B, max_det, 6]`` with the
    class column rewritten, the unmapped detections dropped (the kept ones move up, best
    first still), and ``counts [B]`` of those kept."""
    table = np.asarray(labels, dtype=np.int64)
    dets = np.asarray(dets)
    counts = np.asarray(counts).reshape(-1)
    out = np.zeros_like(dets)
    kept = np.zeros_like(counts)
    for i in range(len(dets)):
        rows = dets[i, : int(counts[i])]
        mapped = table[rows[:, 5].astype(np.int64)]
        rows = rows[mapped >= 0].copy()
        rows[:, 5] = mapped[mapped >= 0]
        out[i, : len(rows)] = rows
        kept[i] = len(rows)
    return out, kept
