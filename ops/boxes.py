"""Box geometry as MindSpore ops (graph mode, static shapes).

Boxes are (cx, cy, w, h) unless a name says xyxy. These mirror YOLOX's ``bboxes_iou``
(``xyxy=False``) and ``IOUloss`` formulas so that assignment and loss match the original.
"""

from __future__ import annotations

import mindspore as ms
from mindspore import ops


def cxcywh_to_xyxy(boxes: ms.Tensor) -> ms.Tensor:
    """(cx, cy, w, h) -> (x1, y1, x2, y2) on the last axis."""
    half = boxes[..., 2:4] * 0.5
    return ops.concat((boxes[..., :2] - half, boxes[..., :2] + half), -1)


def pairwise_iou_cxcywh(a: ms.Tensor, b: ms.Tensor) -> ms.Tensor:
    """IoU of every box in ``a`` [..., M, 4] with every box in ``b`` [..., N, 4] -> [..., M, N].

    No epsilon in the denominator, as YOLOX's ``bboxes_iou``; callers keep areas positive.
    """
    a = a.expand_dims(-2)  # [..., M, 1, 4]
    b = b.expand_dims(-3)  # [..., 1, N, 4]
    tl = ops.maximum(a[..., :2] - a[..., 2:] * 0.5, b[..., :2] - b[..., 2:] * 0.5)
    br = ops.minimum(a[..., :2] + a[..., 2:] * 0.5, b[..., :2] + b[..., 2:] * 0.5)
    wh = ops.relu(br - tl)  # zero where the boxes do not overlap, as (tl < br) * ...
    inter = wh[..., 0] * wh[..., 1]
    area_a = a[..., 2] * a[..., 3]
    area_b = b[..., 2] * b[..., 3]
    return inter / (area_a + area_b - inter)


def aligned_iou_cxcywh(a: ms.Tensor, b: ms.Tensor, eps: float = 1e-16) -> ms.Tensor:
    """IoU of corresponding boxes ``a[i]``, ``b[i]`` ([..., 4] each), as YOLOX's IOUloss."""
    tl = ops.maximum(a[..., :2] - a[..., 2:] * 0.5, b[..., :2] - b[..., 2:] * 0.5)
    br = ops.minimum(a[..., :2] + a[..., 2:] * 0.5, b[..., :2] + b[..., 2:] * 0.5)
    wh = ops.relu(br - tl)
    inter = wh[..., 0] * wh[..., 1]
    union = a[..., 2] * a[..., 3] + b[..., 2] * b[..., 3] - inter
    return inter / (union + eps)
