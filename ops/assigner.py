"""SimOTA label assignment (YOLOX), batched, static shapes, graph mode.

YOLOX 0.3.0 assigns each image in a Python loop over images and ground truths, with
boolean indexing (dynamic shapes). Here the whole batch is assigned at once on
``[B, M, A]`` tensors (M = ground-truth slots padded to ``data.max_objects``, A = anchors),
with masks where the original selects:

1. candidates: anchors whose centre lies inside some ground-truth box or within
   ``center_radius`` strides of its centre (rule ``yolox-0.3.0``, radius 2.5); the later
   YOLOX rule ``yolox-latest`` keeps only the centre region (radius 1.5);
2. cost = class BCE (on sqrt(cls * obj)) + 3 * (-log IoU) + a large penalty where the
   anchor is not both in the box and in the centre region (``yolox-latest``: not in the
   centre region);
3. dynamic k per ground truth = max(1, int(sum of its 10 largest candidate IoUs));
   the k lowest-cost candidates are matched;
4. an anchor matched by several ground truths keeps the one with the lowest cost.

Non-candidates and padded ground truths get an infinite-like cost and zero IoU, which
removes them from every step exactly as the original's indexing does.
"""

from __future__ import annotations

from typing import NamedTuple

import mindspore as ms
from mindspore import nn, ops

from ops.boxes import pairwise_iou_cxcywh

RULES = ("yolox-0.3.0", "yolox-latest")
DEFAULT_RADIUS = {"yolox-0.3.0": 2.5, "yolox-latest": 1.5}
# Penalties as in the original: 1e5 (0.3.0) / 1e6 (latest) for geometry, and a value no
# candidate can reach for anchors outside the candidate set and for padded ground truths.
GEOMETRY_PENALTY = {"yolox-0.3.0": 1e5, "yolox-latest": 1e6}
EXCLUDED_COST = 1e9
TOPK_CANDIDATES = 10
LOG_CLAMP = -100.0  # torch.nn.functional.binary_cross_entropy clamps log() at -100


class Assignment(NamedTuple):
    """Per-anchor results of SimOTA for a batch (all without gradient)."""

    fg: ms.Tensor  # [B, A] float 1/0: anchor is foreground
    matched_gt: ms.Tensor  # [B, A] int32: index of its ground truth (0 for background)
    matched_iou: ms.Tensor  # [B, A] float: IoU of the prediction with that ground truth
    num_fg: ms.Tensor  # [] float: foreground anchors in the batch


def _clamped_log(x: ms.Tensor) -> ms.Tensor:
    return ops.maximum(ops.log(x), LOG_CLAMP)


class SimOTAAssigner(nn.Cell):
    """Batched SimOTA; see the module docstring for the rule it implements."""

    def __init__(
        self, num_classes: int, rule: str = "yolox-0.3.0", center_radius: float | None = None
    ):
        super().__init__()
        if rule not in RULES:
            raise ValueError(f"train.assigner.rule must be one of {RULES}, got {rule!r}")
        self.num_classes = num_classes
        self.center_only = rule == "yolox-latest"
        self.radius = float(center_radius if center_radius is not None else DEFAULT_RADIUS[rule])
        self.penalty = GEOMETRY_PENALTY[rule]

    def construct(
        self, pred_boxes, obj_logits, cls_logits, grids, strides, gt_boxes, gt_classes, gt_mask
    ):
        """Assign anchors to ground truths.

        pred_boxes [B, A, 4] decoded (cx, cy, w, h); obj_logits [B, A]; cls_logits [B, A, C];
        grids [A, 2]; strides [A]; gt_boxes [B, M, 4] (cx, cy, w, h); gt_classes [B, M] int;
        gt_mask [B, M] float (1 = real box). Returns an :class:`Assignment`.
        """
        pred_boxes = ops.stop_gradient(pred_boxes)
        obj_logits = ops.stop_gradient(obj_logits)
        cls_logits = ops.stop_gradient(cls_logits)
        valid = gt_mask.expand_dims(-1) > 0.5  # [B, M, 1]

        # 1. Geometry: anchor centres against boxes and centre regions.
        centers = (grids + 0.5) * strides.expand_dims(-1)  # [A, 2]
        cx = centers[:, 0].reshape(1, 1, -1)
        cy = centers[:, 1].reshape(1, 1, -1)
        gx = gt_boxes[..., 0:1]
        gy = gt_boxes[..., 1:2]
        hw = gt_boxes[..., 2:3] * 0.5
        hh = gt_boxes[..., 3:4] * 0.5
        in_box = (cx > gx - hw) & (cx < gx + hw) & (cy > gy - hh) & (cy < gy + hh) & valid
        r = (strides * self.radius).reshape(1, 1, -1)
        in_center = (cx > gx - r) & (cx < gx + r) & (cy > gy - r) & (cy < gy + r) & valid
        if self.center_only:
            candidate = in_center.any(1)  # [B, A]
            geometry_ok = in_center
        else:
            candidate = in_box.any(1) | in_center.any(1)
            geometry_ok = in_box & in_center
        pair_ok = candidate.expand_dims(1) & valid  # [B, M, A]

        # 2. Cost. IoU of every ground truth with every prediction.
        ious = pairwise_iou_cxcywh(gt_boxes, pred_boxes)  # [B, M, A]
        ious = ops.select(pair_ok, ious, ops.zeros_like(ious))
        iou_cost = -ops.log(ious + 1e-8)
        # Class BCE summed over classes, against the one-hot ground truth:
        # sum_c -log(1 - p_c)  +  (-log p_g) - (-log(1 - p_g)) for the true class g.
        p = ops.sqrt(ops.sigmoid(cls_logits) * ops.sigmoid(obj_logits).expand_dims(-1))
        neg_log_q = -_clamped_log(1.0 - p)  # [B, A, C]
        neg_log_p = -_clamped_log(p)
        onehot = ops.one_hot(gt_classes.astype(ms.int32), self.num_classes, 1.0, 0.0)  # [B, M, C]
        cls_cost = neg_log_q.sum(-1).expand_dims(1) + ops.bmm(
            onehot, ops.transpose(neg_log_p - neg_log_q, (0, 2, 1))
        )
        cost = cls_cost + 3.0 * iou_cost + self.penalty * (1.0 - geometry_ok.astype(ms.float32))
        cost = ops.select(pair_ok, cost, ops.full_like(cost, EXCLUDED_COST))

        # 3. Dynamic k and the k cheapest anchors per ground truth.
        top_ious, _ = ops.topk(ious, TOPK_CANDIDATES, dim=2)
        dynamic_k = ops.maximum(top_ious.sum(-1).astype(ms.int32), 1)  # trunc like .int()
        _, cheapest = ops.topk(-cost, TOPK_CANDIDATES, dim=2)  # [B, M, 10] ascending cost
        rank = ops.arange(TOPK_CANDIDATES, dtype=ms.int32).reshape(1, 1, -1)
        take = ((rank < dynamic_k.expand_dims(-1)) & valid).astype(ms.float32)
        matching = ops.tensor_scatter_elements(ops.zeros_like(cost), cheapest, take, axis=2)

        # 4. Anchors claimed more than once go to their lowest-cost ground truth.
        claims = matching.sum(1, keepdims=True)  # [B, 1, A]
        best = ops.one_hot(ops.argmin(cost, 1), cost.shape[1], 1.0, 0.0, axis=1)  # [B, M, A]
        matching = ops.select(ops.broadcast_to(claims > 1.5, matching.shape), best, matching)

        fg = (matching.sum(1) > 0.5).astype(ms.float32)  # [B, A]
        matched_gt = ops.argmax(matching, 1).astype(ms.int32)
        matched_iou = (matching * ious).sum(1)
        return Assignment(fg, matched_gt, matched_iou, fg.sum())
