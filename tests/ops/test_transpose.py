"""ops.transpose: the compiled swap of the last two axes against MindSpore's Transpose."""

from __future__ import annotations

import mindspore as ms
import numpy as np
import pytest
from mindspore import nn, ops

from msdet.models.head import YOLOXHead
from msdet.ops import cpu_kernels
from msdet.ops.transpose import swap_last_axes_op

# Every test here takes seconds: it compiles, trains or starts a process.
pytestmark = pytest.mark.slow


class WeightedSum(nn.Cell):
    """sum(swap(x) * dy), MindSpore's Transpose (op None) or the kernel's operator: its
    gradient w.r.t. x is the swap's backward pass fed dy."""

    def __init__(self, op):
        super().__init__()
        self.op = op

    def construct(self, x, dy):
        y = ops.transpose(x, (0, 2, 1)) if self.op is None else self.op(x)
        return (y * dy).sum()


@pytest.mark.parametrize("shape", [(8, 85, 2100), (2, 33, 65), (1, 1, 7), (3, 5, 1)])
def test_the_kernel_gives_transposes_bits_both_ways(library, shape):
    rng = np.random.default_rng(sum(shape))
    x = rng.standard_normal(shape).astype(np.float32)
    dy = rng.standard_normal((shape[0], shape[2], shape[1])).astype(np.float32)
    op = swap_last_axes_op(library)
    got = op(ms.Tensor(x)).asnumpy()
    assert got.shape == dy.shape
    np.testing.assert_array_equal(got, x.transpose(0, 2, 1))
    dx = ms.grad(WeightedSum(op), 0)(ms.Tensor(x), ms.Tensor(dy)).asnumpy()
    ref = ms.grad(WeightedSum(None), 0)(ms.Tensor(x), ms.Tensor(dy)).asnumpy()
    np.testing.assert_array_equal(ref, dy.transpose(0, 2, 1))
    np.testing.assert_array_equal(dx, ref)


def test_the_head_uses_the_kernel_only_when_enabled(library):
    kernels = cpu_kernels.CpuKernels(library, ("transpose",))
    head = {"width": 0.25, "in_channels": (256, 512, 1024), "depthwise": True}
    fast = YOLOXHead(3, **head, kernels=kernels)
    plain = YOLOXHead(3, **head, kernels=kernels.only("upsample"))
    assert fast.swap is not None and plain.swap is None
    for mine, theirs in zip(plain.get_parameters(), fast.get_parameters(), strict=True):
        mine.set_data(theirs.data.copy())
    rng = np.random.default_rng(5)
    feats = tuple(
        ms.Tensor(rng.standard_normal((2, c, s, s)).astype(np.float32))
        for c, s in ((64, 8), (128, 4), (256, 2))
    )
    for training in (True, False):
        fast.set_train(training)
        plain.set_train(training)
        expected, got = plain(feats), fast(feats)
        expected, got = (expected[0], got[0]) if training else (expected, got)
        assert expected.shape == (2, 84, 8) and np.abs(expected.asnumpy()).max() > 0.1
        np.testing.assert_array_equal(got.asnumpy(), expected.asnumpy())
