"""ops.depthwise: the compiled depthwise kernel against MindSpore's Conv2D."""

from __future__ import annotations

import mindspore as ms
import numpy as np
import pytest
from mindspore import nn, ops

from msdet.ops import cpu_kernels
from msdet.ops.depthwise import DepthwiseConv2d
from msdet.ops.pointwise_conv import PointwiseConv2d
from tests.support.modes import execution_mode


class WithSens(nn.Cell):
    """sum(conv(x) * dy): its gradients are the backward pass fed ``dy``."""

    def __init__(self, conv: nn.Cell, dy: ms.Tensor):
        super().__init__()
        self.conv = conv
        self.dy = dy

    def construct(self, x):
        return (self.conv(x) * self.dy).sum()


class Grads(nn.Cell):
    """Output, d/dx and d/dweight of ``WithSens`` in one compiled graph."""

    def __init__(self, net: WithSens):
        super().__init__()
        self.net = net
        self.params = ms.ParameterTuple(net.trainable_params())
        self.grad = ops.GradOperation(get_all=True, get_by_list=True)

    def construct(self, x):
        dx, dw = self.grad(self.net, self.params)(x)
        return self.net.conv(x), dx[0], dw[0]


def _run_both(library: str, shape: tuple, ksize: int, stride: int) -> tuple:
    n, c, h, w = shape
    rng = np.random.default_rng(sum(shape) + stride)
    x = ms.Tensor(rng.standard_normal(shape).astype(np.float32))
    weight = rng.standard_normal((c, 1, ksize, ksize)).astype(np.float32)
    native = nn.Conv2d(
        c, c, ksize, stride, pad_mode="pad", padding=(ksize - 1) // 2, group=c, has_bias=False
    )
    native.weight.set_data(ms.Tensor(weight))
    custom = DepthwiseConv2d(c, ksize, stride, "zeros", library)
    custom.weight.set_data(ms.Tensor(weight))
    out_shape = native(x).shape
    dy = ms.Tensor(rng.standard_normal(out_shape).astype(np.float32))
    ref = [t.asnumpy() for t in Grads(WithSens(native, dy))(x)]
    got = [t.asnumpy() for t in Grads(WithSens(custom, dy))(x)]
    return ref, got


@pytest.mark.slow
@pytest.mark.parametrize(
    "shape, ksize, stride",
    [
        ((2, 3, 9, 7), 3, 1),
        ((2, 3, 9, 7), 3, 2),  # odd sizes: the last output column sees the padding
        ((3, 4, 10, 11), 3, 2),
        ((1, 5, 6, 8), 3, 2),
        ((2, 4, 13, 9), 5, 1),
        ((2, 16, 40, 40), 3, 1),  # a YOLOX-nano size: long sums for the weight gradient
    ],
)
def test_matches_conv2d_forward_and_gradients_in_graph_mode(
    library, graph_mode, shape, ksize, stride
):
    ref, got = _run_both(library, shape, ksize, stride)
    for name, r, g in zip(("output", "grad input", "grad weight"), ref, got):
        assert g.shape == r.shape, name
        # float32 rounding of sums of up to N*H*W terms, relative to the largest value:
        # measured <= 3.6e-7 under every CPU variant of docs/porting.md, 28x below
        assert np.abs(g - r).max() <= 1e-5 * max(1.0, np.abs(r).max()), name


def _custom_grads(library: str, shape: tuple, stride: int, general: bool) -> list:
    """Output and both gradients of the kernel for a 3x3 filter, on its fast path or (with
    ``general``) on the loops every other filter size takes."""
    n, c, h, w = shape
    rng = np.random.default_rng(sum(shape) * 3 + stride)
    x = ms.Tensor(rng.standard_normal(shape).astype(np.float32))
    custom = DepthwiseConv2d(c, 3, stride, "zeros", library)
    custom.weight.set_data(ms.Tensor(rng.standard_normal((c, 1, 3, 3)).astype(np.float32)))
    out = (h + 2 - 3) // stride + 1, (w + 2 - 3) // stride + 1
    dy = ms.Tensor(rng.standard_normal((n, c, *out)).astype(np.float32))
    cpu_kernels.set_depthwise_general(library, general)
    try:
        return [t.asnumpy() for t in Grads(WithSens(custom, dy))(x)]
    finally:
        cpu_kernels.set_depthwise_general(library, False)


@pytest.mark.slow
@pytest.mark.parametrize("shape", [(2, 3, 9, 7), (3, 4, 10, 11), (2, 16, 40, 40)])
def test_the_3x3_fast_path_gives_the_general_loops_bits(library, graph_mode, shape):
    """At stride 1 the forward pass and the input gradient of a 3x3 filter have a fast path;
    it gives the same bits as the general loops, not just close ones: a training run on
    either takes the same steps (SimOTA's discrete assignment would turn any rounding
    difference into another run). The weight gradient has one path."""
    fast = _custom_grads(library, shape, 1, general=False)
    general = _custom_grads(library, shape, 1, general=True)
    for name, f, g in zip(("output", "grad input"), fast, general):
        assert np.abs(g).max() > 0.1, name  # non-trivial values
        np.testing.assert_array_equal(f, g, err_msg=name)


def test_matches_conv2d_in_pynative_mode(library):
    with execution_mode(ms.PYNATIVE_MODE):
        ref, got = _run_both(library, (2, 3, 11, 9), 3, 2)
    for r, g in zip(ref, got):  # measured <= 9.7e-8 relative under every CPU variant
        np.testing.assert_allclose(g, r, rtol=0, atol=1e-5 * max(1.0, np.abs(r).max()))


def test_unsupported_stride_and_kernel_size_are_refused(library):
    with pytest.raises(ValueError, match="strides"):
        DepthwiseConv2d(4, 3, 3, "zeros", library)
    with pytest.raises(ValueError, match="odd kernel size"):
        DepthwiseConv2d(4, 2, 1, "zeros", library)


def test_models_use_the_kernel_only_when_enabled(library):
    from msdet.models.layers import DWConv

    fast = DWConv(8, 16, 3, stride=2, kernels=cpu_kernels.CpuKernels.all(library))
    plain = DWConv(8, 16, 3, stride=2)
    assert isinstance(fast.dconv.conv, DepthwiseConv2d)
    assert type(plain.dconv.conv) is nn.Conv2d
    # the 1x1 pointwise half on its own kernel (ops.pointwise_conv), Conv2D without
    assert isinstance(fast.pconv.conv, PointwiseConv2d)
    assert type(plain.pconv.conv) is nn.Conv2d
    # Checkpoints are interchangeable: same names and shapes.
    names = lambda cell: [(p.name, p.shape) for p in cell.get_parameters()]  # noqa: E731
    assert names(fast) == names(plain)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        cpu_kernels.CpuKernels("/nonexistent/lib.so", ("depthwise",))
