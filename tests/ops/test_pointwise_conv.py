"""ops.pointwise_conv: 1x1 convolutions on the compiled kernel against a float64 reference
and MindSpore's Conv2D, forward and both gradients, and where models use them."""

from __future__ import annotations

import mindspore as ms
import numpy as np
import pytest
from mindspore import nn

from msdet.models.layers import CSPLayer, conv2d
from msdet.ops import cpu_kernels
from msdet.ops.pointwise_conv import PointwiseConv2d, pointwise_conv_op
from tests.support.modes import execution_mode


class WeightedSum(nn.Cell):
    def __init__(self, net: nn.Cell):
        super().__init__()
        self.net = net

    def construct(self, x, dy):
        return (self.net(x) * dy).sum()


def _run(conv: nn.Cell, x, dy):
    y = conv(ms.Tensor(x)).asnumpy()
    dx, (dw,) = ms.grad(WeightedSum(conv), 0, conv.trainable_params())(ms.Tensor(x), ms.Tensor(dy))
    return y, dx.asnumpy(), dw.asnumpy()


def _reference(x, w, dy):
    x, w, dy = (a.astype(np.float64) for a in (x, w[:, :, 0, 0], dy))
    y = np.einsum("oc,nchw->nohw", w, x)
    dx = np.einsum("oc,nohw->nchw", w, dy)
    dw = np.einsum("nohw,nchw->oc", dy, x)[:, :, None, None]
    return y, dx, dw


def _inputs(shape, out_channels, seed):
    rng = np.random.default_rng(seed)
    n, c, h, w = shape
    x = rng.standard_normal(shape).astype(np.float32)
    weight = rng.uniform(-0.3, 0.3, (out_channels, c, 1, 1)).astype(np.float32)
    dy = rng.standard_normal((n, out_channels, h, w)).astype(np.float32)
    return x, weight, dy


def _relative(got, want):
    return float(np.abs(got - want).max() / np.abs(want).max())


# Planes of 1,600 pixels (whole blocks of two vectors), 100 (blocks, then a vector, then
# pixels one by one with 8 lanes; a block and pixels with 16), 21 and 1; output channels
# 64, 13 and 3 (partial blocks of 6 and 8); input channels from 1 to 256.
CASES = [((8, 32, 40, 40), 64), ((3, 256, 10, 10), 13), ((2, 5, 7, 3), 3), ((1, 1, 1, 1), 1)]


@pytest.mark.slow
@pytest.mark.parametrize("mode", [ms.GRAPH_MODE, ms.PYNATIVE_MODE], ids=["graph", "pynative"])
@pytest.mark.parametrize(("shape", "out_channels"), CASES)
def test_the_kernel_computes_the_float64_convolution_and_gradients(
    library, mode, shape, out_channels
):
    x, w, dy = _inputs(shape, out_channels, seed=sum(shape) + out_channels)
    want = _reference(x, w, dy)
    with execution_mode(mode):
        got = _run(PointwiseConv2d(shape[1], out_channels, ms.Tensor(w), library), x, dy)
    for name, a, b in zip(("y", "dx", "dw"), got, want):
        assert a.shape == b.shape, name
        assert np.abs(b).max() > 1e-2, name
        # float32 sums over up to 256 channels (dw: MindSpore's own, over the pixels)
        assert _relative(a, b) < 2e-6, name


@pytest.mark.slow
def test_the_kernel_gives_conv2ds_values(library):
    x, w, dy = _inputs((4, 64, 20, 20), 32, seed=4)
    got = _run(PointwiseConv2d(64, 32, ms.Tensor(w), library), x, dy)
    expected = _run(nn.Conv2d(64, 32, 1, weight_init=ms.Tensor(w)), x, dy)
    want = _reference(x, w, dy)
    for name, a, b, exact in zip(("y", "dx", "dw"), got, expected, want):
        assert _relative(a, exact) <= max(1e-6, 2 * _relative(b, exact)), name
        assert _relative(a, b) < 3e-6, name


def test_the_kernel_refuses_weights_that_do_not_fit(library):
    op = pointwise_conv_op(library, 8)
    x, w, _ = _inputs((2, 16, 4, 4), 8, seed=1)
    with pytest.raises((RuntimeError, ValueError)):
        op(ms.Tensor(x[:, :15]), ms.Tensor(w)).asnumpy()  # 15 channels against 16
    with pytest.raises((RuntimeError, ValueError)):
        op(ms.Tensor(x), ms.Tensor(np.ascontiguousarray(np.tile(w, (1, 1, 3, 3))))).asnumpy()


@pytest.mark.slow
def test_models_use_the_kernel_for_1x1_convolutions_without_bias_only(library):
    kernels = cpu_kernels.CpuKernels(library, ("pointwise",))
    pointwise = conv2d(16, 32, 1, kernels=kernels)
    others = [
        conv2d(16, 32, 3, kernels=kernels),
        conv2d(16, 32, 1, stride=2, kernels=kernels),
        conv2d(16, 32, 1, bias=True, kernels=kernels),
        conv2d(16, 16, 1, groups=16, kernels=kernels),
    ]
    fast = CSPLayer(16, 16, n=1, kernels=kernels)
    plain = CSPLayer(16, 16, n=1, kernels=kernels.only("batchnorm_silu"))
    assert isinstance(pointwise, PointwiseConv2d)
    assert not any(isinstance(conv, PointwiseConv2d) for conv in others)
    # the same parameter names and shapes, so checkpoints load either way
    shapes = {k: tuple(p.shape) for k, p in fast.parameters_dict().items()}
    assert shapes == {k: tuple(p.shape) for k, p in plain.parameters_dict().items()}
    assert isinstance(fast.conv1.conv, PointwiseConv2d)
    ms.load_param_into_net(plain, fast.parameters_dict())
    rng = np.random.default_rng(3)
    x = ms.Tensor(rng.standard_normal((2, 16, 12, 10)).astype(np.float32))
    for net in (fast, plain):
        net.set_train(False)
    expected = plain(x).asnumpy()
    assert np.abs(expected).max() > 0.1
    np.testing.assert_allclose(fast(x).asnumpy(), expected, rtol=1e-5, atol=1e-5)
