"""Box geometry as MindSpore ops (graph mode, static shapes).

Boxes are (cx, cy, w, h) unless a name says xyxy. These mirror YOLOX's ``bboxes_iou``
(``xyxy=False``) and ``IOUloss`` formulas so that assignment and loss match the original.
"""

from __future__ import annotations

import mindspore as ms
from mindspore import nn, ops


class Extremum(nn.Cell):
    """The larger (``largest``) or smaller of two tensors of one shape: ``mindspore.ops.maximum``
    and ``mindspore.ops.minimum``'s values, and their gradient (a tie shares it equally between both
    inputs, as MindSpore's and PyTorch's do), built from ``Select`` and ``Mul`` only.
    MindSpore 2.10's own ``Maximum``/``Minimum`` gradients halve ties with ``Divs``
    (``grad_math_ops.cc``), which has no GE adapter and no GE fallback: the 910A's
    whole-graph compile (jit level O2) would fail on it."""

    def __init__(self, largest: bool):
        super().__init__()
        self.largest = largest
        self.half = ms.Tensor(0.5, ms.float32)

    def construct(self, a, b):
        return ops.select(a > b if self.largest else a < b, a, b)

    def bprop(self, a, b, out, dout):
        shared = ops.select(a == b, dout * self.half.astype(dout.dtype), dout)
        zeros = ops.zeros_like(dout)
        a_wins, b_wins = (a > b, a < b) if self.largest else (a < b, a > b)
        return ops.select(b_wins, zeros, shared), ops.select(a_wins, zeros, shared)


_larger, _smaller = Extremum(True), Extremum(False)


def decode_boxes(reg: ms.Tensor, grids: ms.Tensor, strides: ms.Tensor) -> ms.Tensor:
    """Raw box regression [..., A, 4] -> (cx, cy, w, h) in input pixels: centre
    ``(reg + grid) * stride``, size ``exp(reg) * stride``, as YOLOX decodes."""
    s = strides.reshape(-1, 1)
    xy = (reg[..., :2] + grids) * s
    wh = ops.exp(reg[..., 2:4]) * s
    return ops.concat((xy, wh), -1)


def pairwise_iou_cxcywh(a: ms.Tensor, b: ms.Tensor) -> ms.Tensor:
    """IoU of every box in ``a`` [B, M, 4] with every box in ``b`` [B, N, 4] -> [B, M, N].

    YOLOX's ``bboxes_iou(xyxy=False)`` arithmetic. Both operands are materialised with
    ``tile`` (fast) rather than ``broadcast_to`` (~6x slower) or implicit broadcasting
    (MindSpore's broadcasting maximum/minimum is ~20x slower than element-wise on CPU).
    The corners' larger and smaller values are selects, not ``Maximum``/``Minimum``: the same
    values, but a gradient graph without the ``Divs`` that MindSpore 2.10's ``Minimum``
    gradient halves ties with (``grad_math_ops.cc``), which has no GE adapter and no GE
    fallback, so the 910A's whole-graph compile (jit level O2) would fail on it even where
    the gradient is not wanted (SimOTA's assignment). NaN inputs give Maximum and Minimum's IoU.
    """
    m, n = a.shape[1], b.shape[1]
    a1 = a[..., :2] - a[..., 2:4] * 0.5  # [B, M, 2]
    a2 = a[..., :2] + a[..., 2:4] * 0.5
    b1 = b[..., :2] - b[..., 2:4] * 0.5  # [B, N, 2]
    b2 = b[..., :2] + b[..., 2:4] * 0.5
    sides = []
    for k in range(2):
        a_lo = ops.tile(a1[..., k : k + 1], (1, 1, n))
        b_lo = ops.tile(b1[..., k].expand_dims(1), (1, m, 1))
        a_hi = ops.tile(a2[..., k : k + 1], (1, 1, n))
        b_hi = ops.tile(b2[..., k].expand_dims(1), (1, m, 1))
        tl = ops.select(a_lo > b_lo, a_lo, b_lo)  # the larger
        br = ops.select(a_hi < b_hi, a_hi, b_hi)  # the smaller
        sides.append(ops.relu(br - tl))  # = (br - tl) * (tl < br), as YOLOX
    inter = sides[0] * sides[1]
    area_a = (a[..., 2] * a[..., 3]).expand_dims(-1)  # [B, M, 1]
    area_b = (b[..., 2] * b[..., 3]).expand_dims(1)  # [B, 1, N]
    # YOLOX has no epsilon here; 1e-30 is below float32 resolution for any real box and
    # only turns 0/0 (a zero-size padding box against a vanished prediction) into 0.
    return inter / (area_a + area_b - inter + 1e-30)


def aligned_iou_cxcywh(a: ms.Tensor, b: ms.Tensor, eps: float = 1e-16) -> ms.Tensor:
    """IoU of corresponding boxes ``a[i]``, ``b[i]`` ([..., 4] each), as YOLOX's IOUloss
    (corners through :class:`Extremum`: its values and gradient, no ``Divs``)."""
    tl = _larger(a[..., :2] - a[..., 2:] * 0.5, b[..., :2] - b[..., 2:] * 0.5)
    br = _smaller(a[..., :2] + a[..., 2:] * 0.5, b[..., :2] + b[..., 2:] * 0.5)
    wh = ops.relu(br - tl)
    inter = wh[..., 0] * wh[..., 1]
    union = a[..., 2] * a[..., 3] + b[..., 2] * b[..., 3] - inter
    return inter / (union + eps)
