"""YOLOX building blocks as MindSpore Cells.

Attribute names mirror the PyTorch original (``conv``, ``bn``, ``dconv``, ``pconv``,
``conv1``.. ``conv3``, ``m``) so that converting a PyTorch state_dict is a mechanical
rename. Initialisation follows PyTorch's defaults (see :func:`conv2d`), because
initialiser differences silently change how training from scratch behaves.
"""

from __future__ import annotations

import math

import mindspore as ms
from mindspore import nn, ops
from mindspore.common.initializer import HeUniform, Uniform

from msdet.ops.batchnorm_silu import BatchNormSiLU
from msdet.ops.cpu_kernels import NATIVE, CpuKernels
from msdet.ops.depthwise import STRIDES as CUSTOM_DEPTHWISE_STRIDES
from msdet.ops.depthwise import DepthwiseConv2d
from msdet.ops.focus_conv import focus_conv_op, space_to_depth_weight
from msdet.ops.pointwise_conv import PointwiseConv2d
from msdet.ops.spp_pool import spp_pools_op
from msdet.ops.upsample import upsample2x, upsample2x_op

# YOLOX sets every BatchNorm to eps=1e-3, momentum=0.03 (PyTorch convention: the weight of
# the new batch). MindSpore's momentum is the weight of the running value: 1 - 0.03.
BN_EPS = 1e-3
BN_MOMENTUM = 0.97


def batchnorm_settling_steps(share: float = 0.05) -> int:
    """Forward passes in training mode after which BatchNorm's running statistics keep less
    than ``share`` of their initial values (mean 0, variance 1): the least ``n`` with
    ``BN_MOMENTUM ** n < share`` (99 for 5 %). Before that, a network trained from scratch
    computes in inference mode with statistics that are not yet its own."""
    return math.floor(math.log(share) / math.log(BN_MOMENTUM)) + 1


def conv2d(
    in_channels: int,
    out_channels: int,
    ksize: int,
    stride: int = 1,
    groups: int = 1,
    bias: bool = False,
    kernels: CpuKernels = NATIVE,
) -> nn.Cell:
    """A Conv2d with PyTorch's padding and default initialisation.

    PyTorch initialises conv weights with kaiming_uniform(a=sqrt(5)) and biases with
    U(-1/sqrt(fan_in), 1/sqrt(fan_in)); fan_in counts the input channels of one group.
    A depthwise and a 1x1 convolution run on msdet's compiled CPU kernels when ``kernels``
    holds them (``ops.depthwise``, ``ops.pointwise_conv``; same parameter, same values), on
    ``nn.Conv2d`` otherwise.
    """
    pad = (ksize - 1) // 2
    fan_in = (in_channels // groups) * ksize * ksize
    weight_init = HeUniform(negative_slope=math.sqrt(5))
    library = kernels.library_for("depthwise")
    depthwise = groups == in_channels == out_channels and groups > 1 and not bias
    if library and depthwise and ksize % 2 == 1 and stride in CUSTOM_DEPTHWISE_STRIDES:
        return DepthwiseConv2d(in_channels, ksize, stride, weight_init, library)
    library = kernels.library_for("pointwise")
    if library and ksize == 1 and stride == 1 and groups == 1 and not bias:
        return PointwiseConv2d(in_channels, out_channels, weight_init, library)
    return nn.Conv2d(
        in_channels,
        out_channels,
        ksize,
        stride=stride,
        pad_mode="pad",
        padding=pad,
        group=groups,
        has_bias=bias,
        weight_init=weight_init,
        bias_init=Uniform(scale=1.0 / math.sqrt(fan_in)) if bias else "zeros",
    )


def activation(name: str) -> nn.Cell:
    """The activations YOLOX uses: silu (default), relu, lrelu (slope 0.1)."""
    if name == "silu":
        return nn.SiLU()
    if name == "relu":
        return nn.ReLU()
    if name == "lrelu":
        return nn.LeakyReLU(0.1)
    raise ValueError(f"model.act must be silu, relu or lrelu, got {name!r}")


class BaseConv(nn.Cell):
    """Conv2d -> BatchNorm -> activation, 'same' padding for odd kernels.

    When ``kernels`` holds ``batchnorm_silu``, BatchNorm + SiLU runs as one fused operator
    (``ops.batchnorm_silu``) on ``bn``'s parameters, with the batch statistics or the
    running ones as ``bn`` would choose (training, evaluation, a BatchNorm frozen by
    ``use_batch_statistics=False``); other activations keep ``bn`` and ``act``.
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        ksize: int,
        stride: int = 1,
        groups: int = 1,
        bias: bool = False,
        act: str = "silu",
        kernels: CpuKernels = NATIVE,
    ):
        super().__init__()
        self.conv = conv2d(in_channels, out_channels, ksize, stride, groups, bias, kernels)
        self.bn = nn.BatchNorm2d(out_channels, eps=BN_EPS, momentum=BN_MOMENTUM)
        self.act = activation(act)
        library = kernels.library_for("batchnorm_silu")
        self.fused = (
            BatchNormSiLU(BN_EPS, BN_MOMENTUM, library, kernels.eager)
            if library and act == "silu"
            else None
        )

    def construct(self, x):
        return self.normalize(self.conv(x))

    def normalize(self, x):
        """BatchNorm and the activation of the convolution's output ``x``."""
        if self.fused is None:
            return self.act(self.bn(x))
        bn = self.bn
        if self._batch_statistics():
            return self.fused(x, bn.gamma, bn.beta, bn.moving_mean, bn.moving_variance)
        return self.fused.infer(x, bn.gamma, bn.beta, bn.moving_mean, bn.moving_variance)

    def _batch_statistics(self) -> bool:
        """What ``nn.BatchNorm2d`` normalises with: batch statistics when training, unless
        ``use_batch_statistics`` says otherwise."""
        if self.bn.use_batch_statistics is None:
            return self.training
        return self.bn.use_batch_statistics


class DWConv(nn.Cell):
    """Depthwise conv followed by a pointwise (1x1) conv, each with BN and activation."""

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        ksize: int,
        stride: int = 1,
        act: str = "silu",
        kernels: CpuKernels = NATIVE,
    ):
        super().__init__()
        self.dconv = BaseConv(
            in_channels, in_channels, ksize, stride, groups=in_channels, act=act, kernels=kernels
        )
        self.pconv = BaseConv(in_channels, out_channels, 1, 1, act=act, kernels=kernels)

    def construct(self, x):
        return self.pconv(self.dconv(x))


def conv_block(depthwise: bool):
    """The 3x3 block of a model size: DWConv for nano, BaseConv otherwise."""
    return DWConv if depthwise else BaseConv


class Bottleneck(nn.Cell):
    """1x1 conv then 3x3 conv, with a residual add when shapes allow and it is asked for."""

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        shortcut: bool = True,
        expansion: float = 0.5,
        depthwise: bool = False,
        act: str = "silu",
        kernels: CpuKernels = NATIVE,
    ):
        super().__init__()
        hidden = int(out_channels * expansion)
        self.conv1 = BaseConv(in_channels, hidden, 1, 1, act=act, kernels=kernels)
        self.conv2 = conv_block(depthwise)(hidden, out_channels, 3, 1, act=act, kernels=kernels)
        self.use_add = shortcut and in_channels == out_channels

    def construct(self, x):
        y = self.conv2(self.conv1(x))
        if self.use_add:  # a Python bool fixed at build time: no graph control flow
            y = y + x
        return y


class ResLayer(nn.Cell):
    """Darknet's residual block: 1x1 conv to half the channels, 3x3 conv back, plus input."""

    def __init__(self, channels: int, act: str = "lrelu", kernels: CpuKernels = NATIVE):
        super().__init__()
        self.layer1 = BaseConv(channels, channels // 2, 1, 1, act=act, kernels=kernels)
        self.layer2 = BaseConv(channels // 2, channels, 3, 1, act=act, kernels=kernels)

    def construct(self, x):
        return x + self.layer2(self.layer1(x))


class SPPBottleneck(nn.Cell):
    """Spatial pyramid pooling: 1x1 conv, max-pools of 5/9/13 concatenated, 1x1 conv."""

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_sizes: tuple[int, ...] = (5, 9, 13),
        act: str = "silu",
        kernels: CpuKernels = NATIVE,
    ):
        super().__init__()
        hidden = in_channels // 2
        self.conv1 = BaseConv(in_channels, hidden, 1, 1, act=act, kernels=kernels)
        # A k-pool of a k-pool is a (2k-1)-pool (stride 1, -inf padding), so 5/9/13 is
        # computed as three chained 5x5 pools (YOLOv5's SPPF trick): identical values,
        # 2x faster on CPU where large-window MaxPoolGrad is slow.
        k0 = kernel_sizes[0]
        self.chained = all(k == k0 + i * (k0 - 1) for i, k in enumerate(kernel_sizes))
        sizes = [k0] * len(kernel_sizes) if self.chained else list(kernel_sizes)
        # 'same' padding with stride 1 pads implicitly with -inf, like PyTorch's padding=k//2.
        self.m = nn.CellList([nn.MaxPool2d(k, 1, pad_mode="same") for k in sizes])
        # On CPU, the chained 5x5 pools and the concatenation as one compiled operator
        # (ops.spp_pool: the same values).
        library = kernels.library_for("spp") if self.chained and k0 == 5 else None
        self.fused = spp_pools_op(library, len(sizes)) if library else None
        self.conv2 = BaseConv(
            hidden * (len(kernel_sizes) + 1), out_channels, 1, 1, act=act, kernels=kernels
        )

    def construct(self, x):
        x = self.conv1(x)
        if self.fused is not None:
            return self.conv2(self.fused(x))
        pooled = [x]
        y = x
        for pool in self.m:
            y = pool(y) if self.chained else pool(x)
            pooled.append(y)
        return self.conv2(ops.concat(pooled, 1))


class CSPLayer(nn.Cell):
    """CSP bottleneck with three convolutions (C3 in YOLOv5)."""

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        n: int = 1,
        shortcut: bool = True,
        expansion: float = 0.5,
        depthwise: bool = False,
        act: str = "silu",
        kernels: CpuKernels = NATIVE,
    ):
        super().__init__()
        hidden = int(out_channels * expansion)
        self.conv1 = BaseConv(in_channels, hidden, 1, 1, act=act, kernels=kernels)
        self.conv2 = BaseConv(in_channels, hidden, 1, 1, act=act, kernels=kernels)
        self.conv3 = BaseConv(2 * hidden, out_channels, 1, 1, act=act, kernels=kernels)
        self.m = nn.SequentialCell(
            [
                Bottleneck(hidden, hidden, shortcut, 1.0, depthwise, act=act, kernels=kernels)
                for _ in range(n)
            ]
        )

    def construct(self, x):
        x1 = self.m(self.conv1(x))
        x2 = self.conv2(x)
        return self.conv3(ops.concat((x1, x2), 1))


class Focus(nn.Cell):
    """Space-to-depth: four pixel phases stacked on channels, then a conv."""

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        ksize: int = 1,
        stride: int = 1,
        act: str = "silu",
        kernels: CpuKernels = NATIVE,
    ):
        super().__init__()
        self.conv = BaseConv(in_channels * 4, out_channels, ksize, stride, act=act, kernels=kernels)
        self.phases = ms.Tensor(space_to_depth_weight(in_channels))
        library = kernels.library_for("focus")
        # The phases and the 3x3 convolution in one compiled operator (ops.focus_conv), on
        # the same weight Parameter; float32 only (not under AMP's float16).
        self.fused = focus_conv_op(library) if library and (ksize, stride) == (3, 1) else None

    def construct(self, x):
        if self.fused is not None and x.dtype == ms.float32:
            return self.conv.normalize(self.fused(x, self.conv.conv.weight))
        # The phases are picked by a 2x2 stride-2 convolution with a one-hot weight (a
        # plain Tensor, not a Parameter: checkpoints keep their keys): each output is one
        # input pixel times 1 plus zeros, so the values are exactly the pixels. A
        # reshape/transpose gives the same values, but MindSpore's CPU Transpose keeps an
        # 8-byte index per element for the life of the graph (~20 MiB at 320 px, batch 8).
        # Under float16 (AMP, or the 910A's cube) the phases are the pixels in float16,
        # which is what the Focus conv computes with there anyway.
        return self.conv(ops.conv2d(x, self.phases.astype(x.dtype), stride=2))


class Upsample2x(nn.Cell):
    """Nearest-neighbour 2x upsampling (PyTorch's nn.Upsample(scale_factor=2)) as a Cell: on
    msdet's compiled CPU kernel when ``kernels`` holds ``upsample``, on reshape + tile
    otherwise (``ops.upsample``: the two give the same bits, forward and gradient). No
    parameters."""

    def __init__(self, kernels: CpuKernels = NATIVE):
        super().__init__()
        library = kernels.library_for("upsample")
        self.op = upsample2x_op(library) if library else None

    def construct(self, x):
        if self.op is None:
            return upsample2x(x)
        return self.op(x)
