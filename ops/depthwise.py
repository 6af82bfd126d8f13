"""Depthwise convolution on CPU as a compiled custom operator (forward and backward).

MindSpore 2.10's CPU ``Conv2D(group=C)`` computes a depthwise convolution through im2col +
GEMM, ~7x slower (forward + backward) than a direct loop; YOLOX-nano is built from them.
``kernels/depthwise_conv.cc`` holds direct loops for the forward pass and both gradients,
compiled into msdet's kernel library (``ops.cpu_kernels``). Models build
:class:`DepthwiseConv2d` when that library is enabled, ``nn.Conv2d`` otherwise.
"""

from __future__ import annotations

from mindspore import Parameter, nn
from mindspore.common.initializer import initializer

from msdet.ops.aot import aot_op, same_as_first

STRIDES = (1, 2)


def _conv_out(size: int, k: int, stride: int) -> int:
    pad = (k - 1) // 2
    return (size + 2 * pad - k) // stride + 1


def depthwise_ops(library: str, stride: int):
    """The forward Custom operator for ``stride``, with its backward attached (bprop)."""
    if stride not in STRIDES:
        raise ValueError(f"custom depthwise kernel supports strides {STRIDES}, got {stride}")

    def fwd_shape(x, w):
        return (x[0], x[1], _conv_out(x[2], w[2], stride), _conv_out(x[3], w[2], stride))

    def weight_shape(_x, _dy, w):
        return w

    grad_input = aot_op(library, f"DepthwiseConvGradInputS{stride}", same_as_first)
    grad_weight = aot_op(library, f"DepthwiseConvGradWeightS{stride}", weight_shape)

    def bprop(x, w, out, dout):
        return grad_input(x, dout, w), grad_weight(x, dout, w)

    return aot_op(library, f"DepthwiseConvForwardS{stride}", fwd_shape, bprop=bprop)


class DepthwiseConv2d(nn.Cell):
    """A depthwise ``k x k`` convolution (padding ``(k - 1) // 2``, no bias) on the kernel.

    Holds one parameter, ``weight`` of shape ``[channels, 1, k, k]``, named and shaped like
    ``nn.Conv2d(group=channels)``'s, so checkpoints and converted weights are interchangeable.
    """

    def __init__(self, channels: int, ksize: int, stride: int, weight_init, library: str):
        super().__init__()
        if ksize % 2 != 1:
            raise ValueError(f"custom depthwise kernel needs an odd kernel size, got {ksize}")
        self.in_channels = self.out_channels = self.group = channels
        self.kernel_size = (ksize, ksize)
        self.stride = (stride, stride)
        self.weight = Parameter(
            initializer(weight_init, [channels, 1, ksize, ksize]), name="weight"
        )
        self.conv = depthwise_ops(library, stride)

    def construct(self, x):
        return self.conv(x, self.weight)
