"""1x1 convolutions (stride 1, no bias) on CPU as compiled custom operators: the forward
pass and the input gradient.

Apart from the stem, YOLOX-nano's dense convolutions are all 1x1. MindSpore 2.10 runs them
on oneDNN, which msdet holds to AVX2 on every CPU (``engine.runtime.cpu``); ``kernels/
pointwise_conv.cc`` computes them as register-blocked products in the CPU's own vector
width (why and how: its header). The weight gradient stays MindSpore's: a kernel for it
made the training step no faster. Models build :class:`PointwiseConv2d` when ``ops.
cpu_kernels`` has a library enabled for ``"pointwise"``, ``nn.Conv2d`` otherwise.
"""

from __future__ import annotations

from mindspore import Parameter, nn
from mindspore.common.initializer import initializer
from mindspore.ops.operations._grad_ops import Conv2DBackpropFilter

from msdet.ops.aot import aot_op


def pointwise_conv_op(library: str, out_channels: int):
    """``(x [N, C, H, W], w [out_channels, C, 1, 1]) -> [N, out_channels, H, W]``,
    ``y[n, o] = sum_c w[o, c] x[n, c]``, with its backward attached: the input gradient on
    the library, the weight gradient on MindSpore's own (the ``Conv2DBackpropFilter`` its
    autodiff gives ``Conv2D``)."""

    def forward_shape(x, w):
        return (x[0], w[0], x[2], x[3])

    def input_shape(dy, w):
        return (dy[0], w[1], dy[2], dy[3])

    grad_input = aot_op(library, "PointwiseConvInputGrad", input_shape)
    grad_weight = Conv2DBackpropFilter(out_channels, 1)

    def bprop(x, w, out, dout):
        return grad_input(dout, w), grad_weight(dout, x, w.shape)

    return aot_op(library, "PointwiseConvForward", forward_shape, bprop=bprop)


class PointwiseConv2d(nn.Cell):
    """A 1x1 convolution (stride 1, no bias) on the kernel.

    Holds one parameter, ``weight`` of shape ``[out_channels, in_channels, 1, 1]``, named
    and shaped like ``nn.Conv2d``'s, so checkpoints and converted weights are
    interchangeable.
    """

    def __init__(self, in_channels: int, out_channels: int, weight_init, library: str):
        super().__init__()
        self.in_channels, self.out_channels, self.group = in_channels, out_channels, 1
        self.kernel_size = (1, 1)
        self.stride = (1, 1)
        self.weight = Parameter(
            initializer(weight_init, [out_channels, in_channels, 1, 1]), name="weight"
        )
        self.conv = pointwise_conv_op(library, out_channels)

    def construct(self, x):
        return self.conv(x, self.weight)
