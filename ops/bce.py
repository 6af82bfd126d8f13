"""Binary cross entropy on logits for the YOLOX loss: element-wise, and the class term summed
over the classes of every anchor (portable, and on CPU as a compiled custom operator).

The class term is what msdet's static shapes make expensive: the original evaluates it on
the foreground anchors only, msdet on all ``B x A`` of them (weighted 0 off the
foreground). :class:`ClassBCE` runs it as MindSpore's operators or, when ``ops.cpu_kernels``
has a library enabled for ``"class_bce"``, as ``kernels/class_bce.cc`` (one operator each
way; its header says how its values relate to the operators').
"""

from __future__ import annotations

import mindspore as ms
from mindspore import Tensor, nn, ops

from msdet.ops.aot import aot_op


def bce_with_logits(logits: Tensor, targets: Tensor) -> Tensor:
    """Element-wise binary cross entropy on logits, in the numerically stable form."""
    return ops.relu(logits) - logits * targets + ops.log1p(ops.exp(-ops.abs(logits)))


class BCEWithLogits(nn.Cell):
    """:func:`bce_with_logits` with the gradient PyTorch's ``BCEWithLogitsLoss`` computes,
    ``(sigmoid(logits) - targets) * dout``. Autodiff through the six forward operators
    would run eight in the backward pass and keep their inputs alive for it; this runs
    three and keeps nothing. The targets get no gradient (the loss detaches them)."""

    def construct(self, logits, targets):
        return bce_with_logits(logits, targets)

    def bprop(self, logits, targets, out, dout):
        return (ops.sigmoid(logits) - targets) * dout, ops.zeros_like(targets)


def _rows(x, *_):
    return tuple(x[:-1])


def _logits(x, *_):
    return tuple(x)


def class_bce_op(library: str):
    """``(logits [..., C], cls [...] int32, iou [...], weight [...]) -> loss [...]``, the
    compiled :class:`ClassBCE`, with its backward attached (the logits' gradient only: the
    loss detaches the targets and weights)."""
    grad = aot_op(library, "ClassBceGrad", _logits)

    def bprop(logits, cls, iou, weight, out, dout):
        return (
            grad(logits, cls, iou, weight, dout),
            ops.zeros_like(cls),
            ops.zeros_like(iou),
            ops.zeros_like(weight),
        )

    return aot_op(library, "ClassBceForward", _rows, bprop=bprop)


class ClassBCE(nn.Cell):
    """Per anchor, the class BCE summed over the classes, times the anchor's weight:
    ``weight * sum_c bce(logits[..., c], t_c)`` with ``t_c = iou`` for the matched class
    ``cls`` and 0 for the others (YOLOX's IoU-aware one-hot target). Inputs ``logits
    [B, A, C]`` float32, ``cls [B, A]`` int32, ``iou, weight [B, A]``; output ``[B, A]``."""

    def __init__(self, num_classes: int, library: str | None = None):
        super().__init__()
        self.num_classes = num_classes
        self.bce = BCEWithLogits()
        self.op = class_bce_op(library) if library else None

    def construct(self, logits, cls, iou, weight):
        if self.op is not None:
            return self.op(logits, cls.astype(ms.int32), iou, weight)
        onehot = ops.one_hot(cls, self.num_classes, 1.0, 0.0)
        # Tiled, not broadcast: see ops.assigner (the same products, no resident index).
        target = onehot * ops.tile(iou.expand_dims(-1), (1, 1, self.num_classes))
        return self.bce(logits, target).sum(-1) * weight
