"""The YOLOX training loss (as in YOLOX 0.3.0 ``YOLOXHead.get_losses``), static shapes.

Terms, each summed over anchors and divided by the number of foreground anchors in the
batch (at least 1): IoU loss 1 - IoU^2 on foreground boxes (weight 5), objectness BCE on
all anchors, class BCE on foreground anchors against IoU-aware targets (one-hot x IoU of
the prediction with its ground truth), and the L1 loss on raw box outputs, switched on
for the last no-augmentation epochs through :attr:`YOLOXLoss.use_l1`.
"""

from __future__ import annotations

import mindspore as ms
from mindspore import Parameter, nn, ops

from msdet.ops.assigner import SimOTAAssigner
from msdet.ops.boxes import decode_boxes
from msdet.ops.cpu_kernels import NATIVE, CpuKernels
from msdet.ops.loss_terms import LossTerms


def gather_gt(values: ms.Tensor, index: ms.Tensor) -> ms.Tensor:
    """values [B, M, ...] gathered at index [B, A] -> [B, A, ...]."""
    return ops.gather(values, index, axis=1, batch_dims=1)


class YOLOXLoss(nn.Cell):
    """Loss of YOLOX on raw head outputs; returns (total, iou, obj, cls, l1, num_fg).

    ``iou`` is already multiplied by its weight, as the original reports it. Targets are
    ``[B, M, 5]`` rows (class, cx, cy, w, h) in input pixels with a ``[B, M]`` mask.
    ``kernels``: msdet's CPU kernels for the assignment and the terms (none by default).
    """

    def __init__(
        self,
        num_classes: int,
        iou_weight: float = 5.0,
        assigner_rule: str = "yolox-0.3.0",
        center_radius: float | None = None,
        kernels: CpuKernels = NATIVE,
    ):
        super().__init__()
        self.num_classes = num_classes
        self.iou_weight = iou_weight
        self.assigner = SimOTAAssigner(
            num_classes, assigner_rule, center_radius, kernels.library_for("assigner")
        )
        self.terms = LossTerms(
            num_classes, kernels.library_for("loss_terms"), kernels.library_for("class_bce")
        )
        # 1.0 during the no-augmentation epochs; a Parameter so that changing it does not
        # recompile the graph (and it travels into checkpoints for resume).
        self.use_l1 = Parameter(ms.Tensor(0.0, ms.float32), name="use_l1", requires_grad=False)

    def construct(self, raw, grids, strides, targets, mask):
        raw = raw.astype(ms.float32)
        reg, obj, cls = raw[..., :4], raw[..., 4], raw[..., 5:]
        boxes = ops.stop_gradient(decode_boxes(reg, grids, strides))  # the assigner's view
        gt_boxes = targets[..., 1:5]
        gt_classes = targets[..., 0].astype(ms.int32)
        fg, matched_gt, matched_iou, num_fg = self.assigner(
            boxes, obj, cls, grids, strides, gt_boxes, gt_classes, mask
        )
        fg = ops.stop_gradient(fg)
        matched_iou = ops.stop_gradient(matched_iou)
        denom = ops.maximum(ops.stop_gradient(num_fg), 1.0)

        box_target = gather_gt(gt_boxes, matched_gt)  # [B, A, 4]
        matched_class = gather_gt(gt_classes, matched_gt)
        sums = self.terms(raw, grids, strides, box_target, fg, matched_class, matched_iou)
        sums = sums / denom
        loss_iou, loss_obj, loss_cls, loss_l1 = sums[0], sums[1], sums[2], sums[3]
        loss_l1 = loss_l1 * self.use_l1

        loss_iou = loss_iou * self.iou_weight
        total = loss_iou + loss_obj + loss_cls + loss_l1
        return total, loss_iou, loss_obj, loss_cls, loss_l1, num_fg


class DetectorWithLoss(nn.Cell):
    """Network plus loss: (images, targets, mask) -> the loss tuple of :class:`YOLOXLoss`."""

    def __init__(self, network: nn.Cell, loss: YOLOXLoss):
        super().__init__(auto_prefix=False)  # keep the network's parameter names unchanged
        self.network = network
        self.loss = loss

    def construct(self, images, targets, mask):
        raw, grids, strides = self.network(images)
        return self.loss(raw, grids, strides, targets, mask)
