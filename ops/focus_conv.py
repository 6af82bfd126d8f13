"""YOLOX's Focus stem (space-to-depth, then a 3x3 convolution) as one compiled CPU operator,
with the convolution's weight gradient as a second one.

On MindSpore's operators the stem is a one-hot 2x2 stride-2 convolution that stacks the
image's four pixel phases on the channels (``models.layers.Focus``), then a 3x3 convolution
of those 4C channels; oneDNN runs the latter as im2col + GEMM, and it is the training
step's largest layer. ``kernels/focus_conv.cc`` reads the phases straight from the image and
computes the convolution and its weight gradient in vector registers (why and how: its
header). The image's own gradient, which training never needs (MindSpore drops it from the
graph), is computed with MindSpore's operators. ``models.layers.Focus`` uses the kernel
when ``ops.cpu_kernels`` has a library enabled for ``"focus"``.
"""

from __future__ import annotations

import numpy as np
from mindspore import ops

from msdet.ops.aot import aot_op


def focus_conv_op(library: str):
    """``(x [N, C, H, W], w [O, 4C, 3, 3]) -> [N, O, H/2, W/2]``: the 3x3 convolution
    (stride 1, padding 1) of ``x``'s space-to-depth in YOLOX's channel order
    (:func:`space_to_depth_weight`), with its backward attached."""

    def halved(x, w):
        return (x[0], w[0], x[2] // 2, x[3] // 2)

    def like_weight(x, dy, w):
        return w

    weight_grad = aot_op(library, "FocusConvWeightGrad", like_weight)

    def bprop(x, w, out, dout):
        return _image_grad(dout, w, x.shape), weight_grad(x, dout, w)

    return aot_op(library, "FocusConvForward", halved, bprop=bprop)


def _image_grad(dout, w, x_shape):
    """The gradient of the image ``[N, C, H, W]``: the convolution's input gradient at the
    phases ``[N, 4C, H/2, W/2]``, each phase put back at its pixels (depth-to-space)."""
    n, c, h, wd = x_shape
    grad_input = ops.Conv2DBackpropInput(w.shape[0], 3, pad_mode="pad", pad=1)
    phases = grad_input(dout, w, (n, 4 * c, h // 2, wd // 2))
    # channel (column phase * 2 + row phase) * C + c -> x[c, 2i + row phase, 2j + column phase]
    phases = phases.reshape(n, 2, 2, c, h // 2, wd // 2)
    return ops.transpose(phases, (0, 3, 4, 2, 5, 1)).reshape(n, c, h, wd)


def space_to_depth_weight(channels: int) -> np.ndarray:
    """One-hot ``[4C, C, 2, 2]`` weight of a 2x2 stride-2 conv that stacks the four pixel
    phases on channels in YOLOX's order: top-left, bottom-left, top-right, bottom-right,
    i.e. output channel ``(column phase * 2 + row phase) * C + c``."""
    weight = np.zeros((4 * channels, channels, 2, 2), np.float32)
    for dx in range(2):
        for dy in range(2):
            for c in range(channels):
                weight[(dx * 2 + dy) * channels + c, c, dy, dx] = 1.0
    return weight
