"""The four terms of the YOLOX loss, summed over the batch: on MindSpore's operators
(portable) or, on CPU, as one compiled custom operator each way.

:class:`LossTerms` takes the head's raw output and what the assignment matched to each
anchor, and returns ``[iou, obj, cls, l1]``, each summed over every anchor (``models.loss``
divides them by the foreground count and weights them). When ``ops.cpu_kernels`` has a
library enabled for ``"loss_terms"`` it runs ``kernels/loss_terms.cc`` (its header says
how its values relate to the operators'); otherwise the operators below, with the class
term on ``ops.bce.ClassBCE`` (itself on a kernel when ``"class_bce"`` is enabled).
"""

from __future__ import annotations

import mindspore as ms
from mindspore import nn, ops

from msdet.ops.aot import aot_op
from msdet.ops.bce import BCEWithLogits, ClassBCE
from msdet.ops.boxes import aligned_iou_cxcywh, decode_boxes

TERMS = ("iou", "obj", "cls", "l1")


def _sums(*_):
    return (len(TERMS),)


def _raw(raw, *_):
    return tuple(raw)


def loss_terms_op(library: str):
    """``(raw, grids, strides, box_target, fg, cls int32, iou) -> sums [4]``, the compiled
    :class:`LossTerms`, with its backward attached (the gradient of the head's output only:
    the loss detaches the assignment's results)."""
    grad = aot_op(library, "LossTermsGrad", _raw)

    def bprop(raw, grids, strides, box_target, fg, cls, iou, out, dout):
        return (
            grad(raw, grids, strides, box_target, fg, cls, iou, dout),
            *(ops.zeros_like(x) for x in (grids, strides, box_target, fg, cls, iou)),
        )

    return aot_op(library, "LossTermsForward", _sums, bprop=bprop)


class LossTerms(nn.Cell):
    """``(raw [B, A, 5 + C], grids [A, 2], strides [A], box_target [B, A, 4], fg [B, A],
    cls [B, A] int, iou [B, A]) -> [4]``: the sums over all anchors of YOLOX's four loss
    terms, in :data:`TERMS` order.

    - ``iou``: ``1 - IoU^2`` of each foreground anchor's decoded box with its matched box;
    - ``obj``: the objectness BCE of every anchor against ``fg``;
    - ``cls``: the class BCE of each foreground anchor against its IoU-aware one-hot target
      (``iou`` at its matched class ``cls``), weighted by ``fg``;
    - ``l1``: the L1 distance of each foreground anchor's regression from its matched box
      in the regression's units (``models.loss`` switches it on for the last epochs).

    ``fg`` is 1 on foreground anchors and 0 elsewhere; ``box_target``, ``cls`` and ``iou``
    are read on the foreground only. ``library``: msdet's kernel library for the four terms, None for
    MindSpore's operators; ``class_library`` likewise, for the
    class term on the operators' path (:class:`ops.bce.ClassBCE`)."""

    def __init__(
        self,
        num_classes: int,
        library: str | None = None,
        class_library: str | None = None,
    ):
        super().__init__()
        self.op = loss_terms_op(library) if library else None
        self.bce = BCEWithLogits()
        self.class_bce = ClassBCE(num_classes, class_library)

    def construct(self, raw, grids, strides, box_target, fg, cls, iou):
        if self.op is not None:
            return self.op(raw, grids, strides, box_target, fg, cls.astype(ms.int32), iou)
        reg, obj, logits = raw[..., :4], raw[..., 4], raw[..., 5:]
        # Double where: a background anchor's w/h logit may overflow exp (inf box), and a
        # select after the IoU would still back-propagate 0 x inf = NaN through exp. Only
        # foreground anchors reach the IoU term, so the others decode a zero regression.
        is_fg = fg > 0.5
        fg_reg = ops.select(
            ops.broadcast_to(is_fg.expand_dims(-1), reg.shape), reg, ops.zeros_like(reg)
        )
        iou_fg = aligned_iou_cxcywh(decode_boxes(fg_reg, grids, strides), box_target)
        iou_sum = ops.select(is_fg, 1.0 - iou_fg * iou_fg, ops.zeros_like(iou_fg)).sum()
        obj_sum = self.bce(obj, fg).sum()
        cls_sum = self.class_bce(logits, cls, iou, fg).sum()
        s = strides.expand_dims(-1)
        l1_target = ops.concat(
            (box_target[..., :2] / s - grids, ops.log(box_target[..., 2:4] / s + 1e-8)), -1
        )
        l1 = ops.abs(reg - l1_target).sum(-1)
        l1_sum = ops.select(is_fg, l1, ops.zeros_like(l1)).sum()
        return ops.stack((iou_sum, obj_sum, cls_sum, l1_sum))
