"""The benchmarks behind ``runtime.cpu_kernels=auto``: msdet's kernels at YOLOX-nano's shapes
(the network's layers here; SimOTA, the loss, SGD, the EMA and NMS in
``engine.runtime.kernel_benchmarks_training``).

Each benchmark is a pair of functions for :data:`engine.runtime.kernel_choice.DECISIONS`:
``NAME(library, kernels, rng)`` builds the graph-mode Cell to time, on msdet's kernels for
the names in ``kernels`` and on MindSpore's operators for the others, and
``NAME_inputs(rng, steps)`` its inputs (``steps``: the Cells built, by variant). All run at
the training step's shapes (YOLOX-nano, batch 8, 320 px, 80 classes) except NMS, at the
inference benchmark's (416 px). The optimizer's parameters come from the model itself; the
layer shapes below are the model's at those sizes, listed so that each benchmark builds only
its layers (tests/engine/runtime/test_kernel_benchmarks.py checks them against the model).
Weights come from ``rng``, never from MindSpore's initialisers: its random state is not
touched.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

BATCH = 8
# (channels in, channels out, input side, depthwise stride): YOLOX-nano's DWConv blocks
# at 320 px, the stem's output onwards.
BLOCKS = ((16, 32, 160, 2), (32, 32, 80, 1), (32, 64, 80, 2), (64, 64, 40, 1), (64, 128, 40, 2))
# (channels, input side): the inputs of YOLOX-nano's two upsamplings (PAFPN) at 320 px.
UPSAMPLES = ((128, 10), (64, 20))
# (image channels, stem width, side): YOLOX-nano's Focus stem at 320 px.
FOCUS = (3, 16, 320)
# (channels in, channels out, side): the commonest of YOLOX-nano's 1x1 convolutions at
# 320 px (42 of its 73 without a bias).
POINTWISE = ((64, 64, 20), (32, 32, 40), (64, 64, 40), (256, 128, 10), (128, 64, 20))
# (channels in, side): YOLOX-nano's SPP block at 320 px (its pools see half the channels).
SPP = (256, 10)
# The head's outputs before the swap at 320 px, 80 classes: [B, 85, 2,100].
HEAD_OUT = (85, 2100)


def blocks(library: str, kernels: Sequence[str], rng) -> Any:
    """YOLOX-nano's backbone blocks (:data:`BLOCKS`), forward and backward: depthwise 3x3 ->
    BatchNorm -> SiLU -> pointwise 1x1 -> BatchNorm -> SiLU, five times, so MindSpore's own
    operators run between the kernels as in the network."""
    return _grad_step(_blocks(library, kernels, rng))


def blocks_inputs(rng, steps: Mapping[str, Any]) -> tuple:
    import mindspore as ms
    import numpy as np

    cin, _, side, _ = BLOCKS[0]
    return (ms.Tensor(rng.standard_normal((BATCH, cin, side, side), np.float32)),)


def upsample(library: str, kernels: Sequence[str], rng) -> Any:
    """The neck's two 2x upsamplings (:data:`UPSAMPLES`), forward and backward."""
    return _grad_step(_upsamplings(library, kernels, rng))


def upsample_inputs(rng, steps: Mapping[str, Any]) -> tuple:
    import mindspore as ms
    import numpy as np

    return tuple(
        ms.Tensor(rng.standard_normal((BATCH, c, side, side), np.float32)) for c, side in UPSAMPLES
    )


def focus(library: str, kernels: Sequence[str], rng) -> Any:
    """YOLOX-nano's Focus stem (:data:`FOCUS`): its phases and 3x3 convolution, forward and
    weight gradient (the image needs no gradient)."""
    return _grad_step(_focus(library, kernels, rng))


def focus_inputs(rng, steps: Mapping[str, Any]) -> tuple:
    import mindspore as ms
    import numpy as np

    channels, _, side = FOCUS
    return (ms.Tensor(rng.uniform(0.0, 255.0, (BATCH, channels, side, side)).astype(np.float32)),)


def pointwise(library: str, kernels: Sequence[str], rng) -> Any:
    """YOLOX-nano's commonest 1x1 convolutions (:data:`POINTWISE`), forward and backward
    (both gradients)."""
    return _grad_step(_pointwise(library, kernels, rng))


def pointwise_inputs(rng, steps: Mapping[str, Any]) -> tuple:
    import mindspore as ms
    import numpy as np

    return tuple(
        ms.Tensor(rng.standard_normal((BATCH, cin, side, side), np.float32))
        for cin, _, side in POINTWISE
    )


def spp(library: str, kernels: Sequence[str], rng) -> Any:
    """YOLOX-nano's SPP block (:data:`SPP`), forward and backward."""
    return _grad_step(_spp(library, kernels, rng))


def spp_inputs(rng, steps: Mapping[str, Any]) -> tuple:
    import mindspore as ms
    import numpy as np

    return (ms.Tensor(rng.standard_normal((BATCH, SPP[0], SPP[1], SPP[1]), np.float32)),)


def transpose(library: str, kernels: Sequence[str], rng) -> Any:
    """The head's swap of its outputs' last two axes (:data:`HEAD_OUT`), forward and
    backward."""
    return _grad_step(_swap(library, kernels, rng))


def transpose_inputs(rng, steps: Mapping[str, Any]) -> tuple:
    import mindspore as ms
    import numpy as np

    return (ms.Tensor(rng.standard_normal((BATCH, *HEAD_OUT), np.float32)),)


def _upsamplings(library: str, kernels: Sequence[str], rng) -> Any:
    """The neck's two upsamplings, each behind a 1x1 convolution (as the lateral ones are,
    so the gradient runs through the upsampling), on msdet's kernel if ``kernels`` has it."""
    import mindspore as ms
    from mindspore import nn

    from msdet.ops.upsample import upsample2x, upsample2x_op

    class Branch(nn.Cell):
        def __init__(self, channels: int, side: int):
            super().__init__()
            w = rng.uniform(-0.3, 0.3, (channels, channels, 1, 1)).astype("float32")
            self.conv = nn.Conv2d(channels, channels, 1, weight_init=ms.Tensor(w))
            # a fixed weighting of the output, so every gradient entry differs
            self.scale = ms.Tensor(
                rng.uniform(0.5, 1.5, (1, channels, 2 * side, 2 * side)).astype("float32")
            )
            self.op = upsample2x_op(library) if "upsample" in kernels else None

        def construct(self, x):
            y = self.conv(x)
            y = upsample2x(y) if self.op is None else self.op(y)
            return y * self.scale

    class Net(nn.Cell):
        def __init__(self):
            super().__init__()
            self.branches = nn.CellList([Branch(c, side) for c, side in UPSAMPLES])

        def construct(self, *xs):
            total = 0.0
            for branch, x in zip(self.branches, xs):
                total = total + branch(x).sum()
            return total

    return Net()


def _focus(library: str, kernels: Sequence[str], rng) -> Any:
    """The stem's phases and 3x3 convolution (``models.layers.Focus`` without its BatchNorm):
    on msdet's kernel if ``kernels`` has it, else the one-hot phases convolution and
    ``Conv2D``. Its output is not weighted as the other benchmarks' are: a multiplication
    over [8, 16, 160, 160] would take as long as the kernel."""
    import mindspore as ms
    from mindspore import nn, ops

    from msdet.ops.focus_conv import focus_conv_op, space_to_depth_weight

    channels, width, _ = FOCUS

    class Stem(nn.Cell):
        def __init__(self):
            super().__init__()
            weight = rng.uniform(-0.05, 0.05, (width, 4 * channels, 3, 3)).astype("float32")
            self.weight = ms.Parameter(ms.Tensor(weight), name="weight")
            self.phases = ms.Tensor(space_to_depth_weight(channels))
            self.op = focus_conv_op(library) if "focus" in kernels else None

        def construct(self, x):
            if self.op is not None:
                return self.op(x, self.weight)
            phases = ops.conv2d(x, self.phases, stride=2)
            return ops.conv2d(phases, self.weight, pad_mode="pad", padding=1)

    return Stem()


def _pointwise(library: str, kernels: Sequence[str], rng) -> Any:
    """For each shape of :data:`POINTWISE`, a 1x1 convolution and one back to its input's
    channels (as a CSP bottleneck's pair), behind a per-channel gain (a parameter, so that
    every input gradient is computed, as in the network); on msdet's kernel if ``kernels``
    has it, else ``nn.Conv2d``."""
    import mindspore as ms
    from mindspore import nn

    from msdet.ops.pointwise_conv import PointwiseConv2d

    def conv(cin: int, cout: int) -> nn.Cell:
        w = ms.Tensor(rng.uniform(-0.1, 0.1, (cout, cin, 1, 1)).astype("float32"))
        if "pointwise" in kernels:
            return PointwiseConv2d(cin, cout, w, library)
        return nn.Conv2d(cin, cout, 1, weight_init=w)

    class Pair(nn.Cell):
        def __init__(self, cin: int, cout: int):
            super().__init__()
            gain = rng.uniform(0.5, 1.5, (1, cin, 1, 1)).astype("float32")
            self.gain = ms.Parameter(ms.Tensor(gain), name="gain")
            self.there = conv(cin, cout)
            self.back = conv(cout, cin)

        def construct(self, x):
            return self.back(self.there(x * self.gain))

    class Net(nn.Cell):
        def __init__(self):
            super().__init__()
            self.pairs = nn.CellList([Pair(cin, cout) for cin, cout, _ in POINTWISE])

        def construct(self, *xs):
            total = 0.0
            for pair, x in zip(self.pairs, xs):
                total = total + pair(x).sum()
            return total

    return Net()


def _spp(library: str, kernels: Sequence[str], rng) -> Any:
    """YOLOX-nano's SPP block: a 1x1 convolution to half the channels, the three chained 5x5
    pools concatenated with their input, a 1x1 convolution back (``models.layers.
    SPPBottleneck`` without its BatchNorms); the pools on msdet's kernel if ``kernels`` has
    it, else ``MaxPool2d`` + ``Concat``; the output weighted so every gradient differs."""
    import mindspore as ms
    from mindspore import nn, ops

    from msdet.ops.spp_pool import spp_pools_op

    channels, side = SPP
    hidden = channels // 2

    def weight(shape):  # no MindSpore initialiser: its random state is not touched
        return ms.Tensor(rng.uniform(-0.1, 0.1, shape).astype("float32"))

    class Block(nn.Cell):
        def __init__(self):
            super().__init__()
            self.conv1 = nn.Conv2d(
                channels, hidden, 1, weight_init=weight((hidden, channels, 1, 1))
            )
            self.pools = nn.CellList([nn.MaxPool2d(5, 1, pad_mode="same") for _ in range(3)])
            self.fused = spp_pools_op(library, 3) if "spp" in kernels else None
            self.conv2 = nn.Conv2d(
                4 * hidden, channels, 1, weight_init=weight((channels, 4 * hidden, 1, 1))
            )
            self.scale = ms.Tensor(
                rng.uniform(0.5, 1.5, (1, channels, side, side)).astype("float32")
            )

        def construct(self, x):
            x = self.conv1(x)
            if self.fused is None:
                pooled = [x]
                y = x
                for pool in self.pools:
                    y = pool(y)
                    pooled.append(y)
                y = ops.concat(pooled, 1)
            else:
                y = self.fused(x)
            return self.conv2(y) * self.scale

    return Block()


def _swap(library: str, kernels: Sequence[str], rng) -> Any:
    """The head's swap of its outputs' last two axes after a per-channel weight (so the
    gradient runs through the swap), on msdet's kernel if ``kernels`` has it."""
    import mindspore as ms
    from mindspore import nn, ops

    from msdet.ops.transpose import swap_last_axes_op

    class Swap(nn.Cell):
        def __init__(self):
            super().__init__()
            weight = rng.uniform(0.5, 1.5, (1, HEAD_OUT[0], 1)).astype("float32")
            self.weight = ms.Parameter(ms.Tensor(weight), name="weight")
            self.scale = ms.Tensor(rng.uniform(0.5, 1.5, (1, *HEAD_OUT[::-1])).astype("float32"))
            self.op = swap_last_axes_op(library) if "transpose" in kernels else None

        def construct(self, x):
            y = x * self.weight
            y = ops.transpose(y, (0, 2, 1)) if self.op is None else self.op(y)
            return y * self.scale

    return Swap()


def _blocks(library: str, kernels: Sequence[str], rng) -> Any:
    """The benchmark network with ``kernels`` on msdet's library, the rest on MindSpore's."""
    import mindspore as ms
    from mindspore import nn

    from msdet.ops.batchnorm_silu import BatchNormSiLU
    from msdet.ops.depthwise import DepthwiseConv2d

    def weight(shape):  # no MindSpore initialiser: its random state is not touched
        return ms.Tensor(rng.uniform(-0.3, 0.3, shape).astype("float32"))

    class NormAct(nn.Cell):
        def __init__(self, channels: int):
            super().__init__()
            self.bn = nn.BatchNorm2d(channels, eps=1e-3, momentum=0.97)
            self.act = nn.SiLU()
            fused = "batchnorm_silu" in kernels
            self.fused = BatchNormSiLU(1e-3, 0.97, library) if fused else None

        def construct(self, x):
            if self.fused is None:
                return self.act(self.bn(x))
            bn = self.bn
            return self.fused(x, bn.gamma, bn.beta, bn.moving_mean, bn.moving_variance)

    class Block(nn.Cell):
        def __init__(self, cin: int, cout: int, stride: int):
            super().__init__()
            if "depthwise" in kernels:
                self.dconv = DepthwiseConv2d(cin, 3, stride, weight((cin, 1, 3, 3)), library)
            else:
                self.dconv = nn.Conv2d(
                    cin, cin, 3, stride, pad_mode="pad", padding=1, group=cin,
                    weight_init=weight((cin, 1, 3, 3)),
                )  # fmt: skip
            self.norm1 = NormAct(cin)
            self.pconv = nn.Conv2d(cin, cout, 1, weight_init=weight((cout, cin, 1, 1)))
            self.norm2 = NormAct(cout)

        def construct(self, x):
            return self.norm2(self.pconv(self.norm1(self.dconv(x))))

    return nn.SequentialCell([Block(cin, cout, s) for cin, cout, _, s in BLOCKS])


def _grad_step(net) -> Any:
    """A Cell computing the sum of ``net``'s output and its gradients w.r.t. the weights,
    as the training step does (a Cell around ``value_and_grad``: the same network behind an
    ``ms.jit`` function ran MindSpore's depthwise weight gradient ~40x slower)."""
    import mindspore as ms
    from mindspore import nn

    class Step(nn.Cell):
        def __init__(self):
            super().__init__()
            self.net = net
            self.grad_fn = ms.value_and_grad(self.forward, None, net.trainable_params())

        def forward(self, *xs):
            return self.net(*xs).sum()

        def construct(self, *xs):
            return self.grad_fn(*xs)

    step = Step()
    step.set_train(True)
    return step
