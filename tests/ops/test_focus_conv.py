"""ops.focus_conv: the Focus stem (space-to-depth + 3x3 convolution) on the compiled kernel
against a float64 reference and MindSpore's operators, forward and gradients."""

from __future__ import annotations

import mindspore as ms
import numpy as np
import pytest
from mindspore import nn, ops

from msdet.models.backbone import CSPDarknet
from msdet.models.layers import Focus
from msdet.ops import cpu_kernels
from msdet.ops.focus_conv import focus_conv_op, space_to_depth_weight
from tests.support.modes import execution_mode


def _space_to_depth(x: np.ndarray) -> np.ndarray:
    """YOLOX's Focus order, as the original writes it: four strided slices concatenated."""
    return np.concatenate(
        [x[..., ::2, ::2], x[..., 1::2, ::2], x[..., ::2, 1::2], x[..., 1::2, 1::2]], axis=1
    )


def _reference(x, w, dy):
    """float64: y = conv3x3(space_to_depth(x), w) with padding 1, and the gradients of
    sum(y * dy) w.r.t. w and x."""
    x, w, dy = (a.astype(np.float64) for a in (x, w, dy))
    padded = np.pad(_space_to_depth(x), ((0, 0), (0, 0), (1, 1), (1, 1)))
    h2, w2 = x.shape[2] // 2, x.shape[3] // 2
    y = np.zeros((x.shape[0], w.shape[0], h2, w2))
    dw = np.zeros_like(w)
    dpadded = np.zeros_like(padded)
    for a in range(3):
        for b in range(3):
            window = padded[:, :, a : a + h2, b : b + w2]
            y += np.einsum("nkpq,ok->nopq", window, w[:, :, a, b])
            dw[:, :, a, b] = np.einsum("nopq,nkpq->ok", dy, window)
            dpadded[:, :, a : a + h2, b : b + w2] += np.einsum("nopq,ok->nkpq", dy, w[:, :, a, b])
    dphases = dpadded[:, :, 1:-1, 1:-1]
    dx = np.zeros_like(x)
    dx[..., ::2, ::2], dx[..., 1::2, ::2], dx[..., ::2, 1::2], dx[..., 1::2, 1::2] = np.split(
        dphases, 4, axis=1
    )
    return y, dw, dx


class Stem(nn.Cell):
    """The stem's convolution of ``x``'s phases: on the kernel's operator (``op``), or on
    MindSpore's operators (the one-hot phases convolution, then ``Conv2D``)."""

    def __init__(self, op, weight: np.ndarray):
        super().__init__()
        self.op = op
        self.weight = ms.Parameter(ms.Tensor(weight), name="weight")
        self.phases = ms.Tensor(space_to_depth_weight(weight.shape[1] // 4))

    def construct(self, x):
        if self.op is not None:
            return self.op(x, self.weight)
        phases = ops.conv2d(x, self.phases, stride=2)
        return ops.conv2d(phases, self.weight, pad_mode="pad", padding=1)


class WeightedSum(nn.Cell):
    def __init__(self, net: nn.Cell):
        super().__init__()
        self.net = net

    def construct(self, x, dy):
        return (self.net(x) * dy).sum()


def _run(op, x, w, dy):
    net = Stem(op, w)
    y = net(ms.Tensor(x)).asnumpy()
    dx, (dw,) = ms.grad(WeightedSum(net), 0, net.trainable_params())(ms.Tensor(x), ms.Tensor(dy))
    return y, dw.asnumpy(), dx.asnumpy()


def _inputs(shape, out_channels, seed):
    rng = np.random.default_rng(seed)
    n, c, h, w = shape
    x = rng.uniform(0.0, 255.0, shape).astype(np.float32)  # pixel values, as training feeds
    weight = rng.normal(0.0, 0.05, (out_channels, 4 * c, 3, 3)).astype(np.float32)
    dy = rng.normal(0.0, 1.0, (n, out_channels, h // 2, w // 2)).astype(np.float32)
    return x, weight, dy


def _relative(got, want):
    return float(np.abs(got - want).max() / np.abs(want).max())


# Widths of the phases 32 (whole vectors of 8 and 16 lanes), 18 (a partial vector at the
# end of each row), 1; output channels 16 (nano), 24 (tiny), 3 and 9 (partial blocks of 8
# and pairs); batches of 8, 2, 1 and 3 (images split unevenly over the threads).
CASES = [((8, 3, 64, 64), 16), ((2, 3, 20, 36), 24), ((1, 1, 2, 2), 3), ((3, 2, 10, 6), 9)]


@pytest.mark.slow
@pytest.mark.parametrize("mode", [ms.GRAPH_MODE, ms.PYNATIVE_MODE], ids=["graph", "pynative"])
@pytest.mark.parametrize(("shape", "out_channels"), CASES)
def test_the_kernel_computes_the_float64_stem_and_its_gradients(library, mode, shape, out_channels):
    x, w, dy = _inputs(shape, out_channels, seed=sum(shape) + out_channels)
    want_y, want_dw, want_dx = _reference(x, w, dy)
    with execution_mode(mode):
        y, dw, dx = _run(focus_conv_op(library), x, w, dy)
    assert y.shape == want_y.shape and dw.shape == w.shape and dx.shape == x.shape
    assert np.abs(want_y).max() > 1.0 and np.abs(want_dw).max() > 1.0
    # float32 products summed in float32 (forward) or in vector lanes then double (weights):
    # measured 4e-7 / 2e-7 of the largest value at most; MindSpore's operators below.
    assert _relative(y, want_y) < 2e-6
    assert _relative(dw, want_dw) < 2e-6
    assert _relative(dx, want_dx) < 2e-6


@pytest.mark.slow
def test_the_kernel_and_mindspores_operators_agree(library):
    x, w, dy = _inputs((4, 3, 32, 48), 16, seed=5)
    got = _run(focus_conv_op(library), x, w, dy)
    expected = _run(None, x, w, dy)
    want = _reference(x, w, dy)
    for name, a, b, exact in zip(("y", "dw", "dx"), got, expected, want):
        # each as close to float64 as MindSpore's operators, or closer
        assert _relative(a, exact) <= max(2e-6, 2 * _relative(b, exact)), name
        assert _relative(a, b) < 5e-6, name


def test_the_kernel_refuses_odd_sides_and_weights_of_the_wrong_shape(library):
    op = focus_conv_op(library)
    x, w, _ = _inputs((2, 3, 8, 8), 16, seed=1)
    with pytest.raises((RuntimeError, ValueError)):
        op(ms.Tensor(x[:, :, :7]), ms.Tensor(w)).asnumpy()
    with pytest.raises((RuntimeError, ValueError)):
        op(ms.Tensor(x), ms.Tensor(w[:, :8])).asnumpy()  # 8 channels: not 4 x 3
    with pytest.raises((RuntimeError, ValueError)):
        op(ms.Tensor(x), ms.Tensor(np.ascontiguousarray(w[..., :1, :1]))).asnumpy()  # 1x1


@pytest.mark.slow
def test_focus_uses_the_kernel_only_when_enabled_and_for_its_3x3_convolution(library):
    kernels = cpu_kernels.CpuKernels(library, ("focus", "batchnorm_silu"))
    fast = Focus(3, 16, 3, kernels=kernels)
    pointwise = Focus(3, 16, 1, kernels=kernels)
    backbone = CSPDarknet(0.33, 0.25, depthwise=True, kernels=kernels)
    plain = Focus(3, 16, 3, kernels=kernels.only("batchnorm_silu"))
    assert fast.fused is not None and backbone.stem.fused is not None
    assert pointwise.fused is None and plain.fused is None
    # the same parameters, so checkpoints load either way
    assert sorted(fast.parameters_dict()) == sorted(plain.parameters_dict())
    ms.load_param_into_net(plain, fast.parameters_dict())
    x, _, dy = _inputs((2, 3, 16, 24), 16, seed=9)
    for train in (True, False):
        fast.set_train(train)
        plain.set_train(train)
        expected = plain(ms.Tensor(x)).asnumpy()
        assert np.abs(expected).max() > 0.1
        np.testing.assert_allclose(fast(ms.Tensor(x)).asnumpy(), expected, rtol=1e-4, atol=1e-5)
    fast.set_train(True)
    plain.set_train(True)
    grads = [
        ms.grad(WeightedSum(net), None, net.trainable_params())(ms.Tensor(x), ms.Tensor(dy))
        for net in (fast, plain)
    ]
    for got, expected in zip(*grads):
        assert np.abs(expected.asnumpy()).max() > 0.1
        np.testing.assert_allclose(got.asnumpy(), expected.asnumpy(), rtol=1e-4, atol=1e-4)
