"""ops.spp_pool: SPP's chained pools on the compiled kernel against MindSpore's MaxPool and
Concat, forward and gradient."""

from __future__ import annotations

import mindspore as ms
import numpy as np
import pytest
from mindspore import nn, ops

from msdet.models.backbone import CSPDarknet
from msdet.models.layers import SPPBottleneck
from msdet.ops import cpu_kernels
from msdet.ops.spp_pool import spp_pools_op

# Every test here takes seconds: it compiles, trains or starts a process.
pytestmark = pytest.mark.slow


class Pools(nn.Cell):
    """``x`` and ``levels`` chained 5x5 pools, concatenated: MindSpore's operators (op None)
    or the kernel's operator."""

    def __init__(self, op, levels: int = 3):
        super().__init__()
        self.op = op
        self.pools = nn.CellList([nn.MaxPool2d(5, 1, pad_mode="same") for _ in range(levels)])

    def construct(self, x):
        if self.op is not None:
            return self.op(x)
        pooled = [x]
        y = x
        for pool in self.pools:
            y = pool(y)
            pooled.append(y)
        return ops.concat(pooled, 1)


class WeightedSum(nn.Cell):
    def __init__(self, net: Pools):
        super().__init__()
        self.net = net

    def construct(self, x, dy):
        return (self.net(x) * dy).sum()


def _run(op, x: np.ndarray, dy: np.ndarray, levels: int = 3):
    net = Pools(op, levels)
    y = net(ms.Tensor(x)).asnumpy()
    dx = ms.grad(WeightedSum(net), 0)(ms.Tensor(x), ms.Tensor(dy)).asnumpy()
    return y, dx


@pytest.mark.parametrize("shape", [(8, 128, 10, 10), (2, 3, 13, 7), (1, 2, 3, 1)])
def test_the_kernel_gives_mindspores_values_and_gradient_bit_for_bit(library, shape):
    n, c, h, w = shape
    rng = np.random.default_rng(sum(shape))
    x = rng.standard_normal(shape).astype(np.float32)
    dy = _spread_gradient(rng, (n, 4 * c, h, w))
    ref_y, ref_dx = _run(None, x, dy)
    got_y, got_dx = _run(spp_pools_op(library, 3), x, dy)
    assert got_y.shape == ref_y.shape == (n, 4 * c, h, w)
    np.testing.assert_array_equal(got_y, ref_y)
    np.testing.assert_array_equal(got_dx, ref_dx)


def _spread_gradient(rng, shape):
    """Gradients over 2^-11 .. 2^11 times their scale: float32 sums of them round
    differently in each order, so only MindSpore's order of additions gives its bits."""
    return (rng.standard_normal(shape) * np.exp2(rng.uniform(-11, 11, shape))).astype(np.float32)


def test_ties_and_signed_zeros_go_where_mindspore_sends_them(library):
    rng = np.random.default_rng(7)
    shape = (4, 16, 12, 11)
    # Four values (one of them zero, of either sign) in plateaus: most windows hold several
    # maxima, and every pool after the first is a plateau of its input's maxima.
    x = rng.integers(-1, 3, shape).astype(np.float32)
    x[(x == 0) & (rng.uniform(size=shape) < 0.5)] = -0.0
    dy = _spread_gradient(rng, (4, 64, 12, 11))
    ref_y, ref_dx = _run(None, x, dy)
    got_y, got_dx = _run(spp_pools_op(library, 3), x, dy)
    np.testing.assert_array_equal(np.signbit(got_y), np.signbit(ref_y))
    np.testing.assert_array_equal(got_y, ref_y)
    np.testing.assert_array_equal(got_dx, ref_dx)
    # The ties decide the gradient: sending each gradient to the first maximum of its window
    # in row-major order gives MindSpore's (up to the order of additions), the last another.
    np.testing.assert_allclose(_routed(x, dy, first=True), ref_dx, rtol=1e-5, atol=1e-3)
    assert not np.allclose(_routed(x, dy, first=False), ref_dx, rtol=1e-5, atol=1e-3)


def _routed(x: np.ndarray, dy: np.ndarray, first: bool) -> np.ndarray:
    """The chained pools' gradient in numpy (float64), each output's gradient sent to the
    first (or last) maximum of its window in row-major order."""
    n, c, h, w = x.shape
    levels = [x.astype(np.float64)]
    for _ in range(3):
        prev, nxt = levels[-1], np.empty_like(levels[-1])
        for i in range(h):
            for j in range(w):
                win = prev[:, :, max(i - 2, 0) : i + 3, max(j - 2, 0) : j + 3]
                nxt[:, :, i, j] = win.max(axis=(2, 3))
        levels.append(nxt)
    grads = dy.astype(np.float64).reshape(n, 4, c, h, w)
    grad = grads[:, 3].copy()
    for level in (3, 2, 1):
        prev, routed = levels[level - 1], np.zeros((n, c, h, w))
        for i in range(h):
            for j in range(w):
                r0, c0 = max(i - 2, 0), max(j - 2, 0)
                win = prev[:, :, r0 : i + 3, c0 : j + 3]
                flat = win.reshape(n, c, -1)
                hit = flat == levels[level][:, :, i, j][..., None]
                k = hit.argmax(-1) if first else flat.shape[-1] - 1 - hit[..., ::-1].argmax(-1)
                rows, cols = np.divmod(k, win.shape[3])
                for b in range(n):
                    np.add.at(
                        routed[b], (np.arange(c), r0 + rows[b], c0 + cols[b]), grad[b, :, i, j]
                    )
        grad = grads[:, level - 1] + routed
    return grad


def test_models_use_the_kernel_only_when_enabled_and_for_chained_5x5_pools(library):
    kernels = cpu_kernels.CpuKernels(library, ("spp",))
    fast = SPPBottleneck(8, 8, kernels=kernels)
    backbone = CSPDarknet(0.33, 0.25, depthwise=True, kernels=kernels)
    unchained = SPPBottleneck(8, 8, kernel_sizes=(5, 7), kernels=kernels)
    plain = SPPBottleneck(8, 8, kernels=kernels.only("upsample"))
    assert fast.fused is not None and backbone.dark5[1].fused is not None
    assert unchained.fused is None and plain.fused is None
    ms.load_param_into_net(plain, fast.parameters_dict())
    rng = np.random.default_rng(3)
    x = ms.Tensor(rng.standard_normal((2, 8, 9, 6)).astype(np.float32))
    expected = plain(x).asnumpy()
    assert expected.shape == (2, 8, 9, 6) and np.abs(expected).max() > 0.1
    np.testing.assert_array_equal(fast(x).asnumpy(), expected)
