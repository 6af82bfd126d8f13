"""ops.upsample: the compiled 2x upsampling kernel against reshape + Tile, bit for bit."""

from __future__ import annotations

import mindspore as ms
import numpy as np
import pytest
from mindspore import nn

from msdet.models.layers import Upsample2x
from msdet.models.neck import YOLOPAFPN
from msdet.ops import cpu_kernels
from msdet.ops.upsample import upsample2x, upsample2x_op


class Up(nn.Cell):
    """reshape + Tile (op None) or the kernel's operator, as a graph."""

    def __init__(self, op):
        super().__init__()
        self.op = op

    def construct(self, x):
        return upsample2x(x) if self.op is None else self.op(x)


class WeightedSum(nn.Cell):
    """sum(up(x) * dy): its gradient w.r.t. x is the upsampling's backward pass fed dy."""

    def __init__(self, up: Up):
        super().__init__()
        self.up = up

    def construct(self, x, dy):
        return (self.up(x) * dy).sum()


def _forward_and_grad(op, x: np.ndarray, dy: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    up = Up(op)
    y = up(ms.Tensor(x)).asnumpy()
    dx = ms.grad(WeightedSum(up), 0)(ms.Tensor(x), ms.Tensor(dy)).asnumpy()
    return y, dx


@pytest.mark.slow
@pytest.mark.parametrize("shape", [(8, 64, 20, 20), (2, 3, 5, 7), (1, 1, 1, 1)])
def test_the_kernel_gives_the_tile_paths_bits(library, shape):
    n, c, h, w = shape
    rng = np.random.default_rng(sum(shape))
    x = rng.standard_normal(shape).astype(np.float32)
    # Gradients spread over 2^-11 .. 2^11 times their scale, so the four terms of a sum
    # round differently in float32 in each order: only the sum MindSpore forms gives its bits.
    big = (2 * h, 2 * w)
    dy = rng.standard_normal((n, c, *big)) * np.exp2(rng.uniform(-11, 11, (n, c, *big)))
    dy = dy.astype(np.float32)
    ref_y, ref_dx = _forward_and_grad(None, x, dy)
    got_y, got_dx = _forward_and_grad(upsample2x_op(library), x, dy)
    assert ref_y.shape == got_y.shape == (n, c, *big)
    np.testing.assert_array_equal(got_y, ref_y)
    assert np.count_nonzero(ref_dx) == ref_dx.size  # every gradient entry is a real sum
    np.testing.assert_array_equal(got_dx, ref_dx)
    # The kernel's value is the four gradients summed exactly, rounded once.
    exact = dy.astype(np.float64).reshape(n, c, h, 2, w, 2).sum(axis=(3, 5)).astype(np.float32)
    np.testing.assert_array_equal(got_dx, exact)
    if ref_dx.size > 16:  # a float32 sum in one fixed order differs somewhere
        quads = dy.reshape(n, c, h, 2, w, 2)
        d00, d01 = quads[:, :, :, 0, :, 0], quads[:, :, :, 0, :, 1]
        d10, d11 = quads[:, :, :, 1, :, 0], quads[:, :, :, 1, :, 1]
        in_order = ((d00 + d01) + d10) + d11
        assert (in_order != ref_dx).any()


def test_models_use_the_kernel_only_when_enabled(library):
    kernels = cpu_kernels.CpuKernels(library, ("upsample",))
    fast = Upsample2x(kernels)
    neck = YOLOPAFPN(0.33, 0.25, depthwise=True, kernels=kernels)
    plain = Upsample2x(kernels.only("depthwise", "batchnorm_silu"))
    assert fast.op is not None and plain.op is None
    assert neck.upsample.op is not None  # the neck's two upsamplings run on it
    x = ms.Tensor(np.arange(2 * 3 * 4 * 5, dtype=np.float32).reshape(2, 3, 4, 5))
    np.testing.assert_array_equal(fast(x).asnumpy(), plain(x).asnumpy())
    assert fast(x).shape == (2, 3, 8, 10) and not list(fast.get_parameters())
