"""ops.loss_terms: the YOLOX loss's four terms on the compiled operator against MindSpore's
operators, a float64 reference and its finite differences, and inside YOLOXLoss."""

from __future__ import annotations

import mindspore as ms
import numpy as np
import pytest
from mindspore import nn

from msdet.ops.loss_terms import TERMS, LossTerms
from tests.support.loss_cases import anchor_grid, loss_with_and_without, random_raw_outputs
from tests.support.modes import execution_mode

CLASSES = 80
WEIGHTS = np.array([5.0, 1.0, 1.3, 0.7])  # the IoU term's weight, and the others differ


def _inputs(batch=4, side=160, seed=0):
    """Head outputs, and matched boxes near their anchors, a fifth of the anchors in the
    foreground; some foreground boxes far from their anchor (IoU 0), and background
    anchors whose size logits overflow exp (the kernel must not decode them)."""
    rng = np.random.default_rng(seed)
    grids, strides = anchor_grid(side)
    a = len(strides)
    raw = random_raw_outputs(rng, batch, a, CLASSES)
    raw[..., 2:4] = rng.normal(0.0, 0.6, (batch, a, 2))
    centres = (grids + 0.5) * strides[:, None] + rng.normal(0, 3, (batch, a, 2))
    sizes = strides[None, :, None] * np.exp(rng.normal(0.2, 0.5, (batch, a, 2)))
    box_target = np.concatenate([centres, sizes], -1).astype(np.float32)
    fg = (rng.random((batch, a)) < 0.2).astype(np.float32)
    box_target[0, :40, :2] += 10 * side * fg[0, :40, None]  # foreground, no overlap
    raw[1, :40, 2:4] = np.where(fg[1, :40, None] > 0, raw[1, :40, 2:4], 100.0)
    cls = rng.integers(0, CLASSES, (batch, a)).astype(np.int32)
    iou = rng.random((batch, a)).astype(np.float32)
    return raw, grids, strides, box_target, fg, cls, iou


def _reference(raw, grids, strides, box_target, fg, cls, iou):
    """float64: the four sums, YOLOX's formulas (IOUloss, the stable BCE, the L1 term)."""
    r, t, s = raw.astype(np.float64), box_target.astype(np.float64), strides[:, None]
    is_fg = fg > 0.5
    reg = np.where(is_fg[..., None], r[..., :4], 0.0)
    p = np.concatenate([(reg[..., :2] + grids) * s, np.exp(reg[..., 2:4]) * s], -1)
    tl = np.maximum(p[..., :2] - p[..., 2:] / 2, t[..., :2] - t[..., 2:] / 2)
    br = np.minimum(p[..., :2] + p[..., 2:] / 2, t[..., :2] + t[..., 2:] / 2)
    inter = np.prod(np.maximum(br - tl, 0.0), -1)
    value = inter / (p[..., 2] * p[..., 3] + t[..., 2] * t[..., 3] - inter + 1e-16)

    def bce(x, target):
        return np.maximum(x, 0) - x * target + np.log1p(np.exp(-np.abs(x)))

    target = (np.arange(CLASSES) == cls[..., None]) * iou[..., None].astype(np.float64)
    l1_target = np.concatenate([t[..., :2] / s - grids, np.log(t[..., 2:4] / s + 1e-8)], -1)
    return np.array(
        [
            np.where(is_fg, 1.0 - value**2, 0.0).sum(),
            bce(r[..., 4], fg).sum(),
            (bce(r[..., 5:], target).sum(-1) * fg).sum(),
            np.where(is_fg, np.abs(r[..., :4] - l1_target).sum(-1), 0.0).sum(),
        ]
    )


class Weighted(nn.Cell):
    """WEIGHTS . LossTerms(...): its gradient w.r.t. the head's output is the terms'
    backward pass fed WEIGHTS."""

    def __init__(self, library):
        super().__init__()
        self.terms = LossTerms(CLASSES, library, None)
        self.weights = ms.Tensor(WEIGHTS.astype(np.float32))

    def construct(self, *inputs):
        return (self.terms(*inputs) * self.weights).sum()


def _run(library, mode, inputs):
    with execution_mode(mode):
        net = Weighted(library)
        tensors = [ms.Tensor(x) for x in inputs]
        sums = net.terms(*tensors).asnumpy()
        grad = ms.grad(net, grad_position=0)(*tensors).asnumpy()
        return net.terms.op is not None, sums, grad


@pytest.mark.slow
@pytest.mark.parametrize("mode", [ms.GRAPH_MODE, ms.PYNATIVE_MODE])
def test_the_kernel_gives_the_operators_values(library, mode):
    inputs = _inputs()
    on_kernel, sums, grad = _run(library, mode, inputs)
    on_ops, ops_sums, ops_grad = _run(None, mode, inputs)
    assert on_kernel and not on_ops and sums.shape == (len(TERMS),)
    exact = _reference(*inputs)
    assert np.all(exact > 100), exact  # every term counts
    # Measured from float64: the kernel 3e-8 relative at most, MindSpore's operators 2e-7.
    np.testing.assert_allclose(sums, exact, rtol=3e-7)
    np.testing.assert_allclose(ops_sums, exact, rtol=2e-6)
    np.testing.assert_allclose(sums, ops_sums, rtol=2e-6)
    fg = inputs[4] > 0.5
    assert np.all(np.isfinite(grad)) and np.abs(grad[..., :4]).max() > 1.0
    assert np.all(grad[..., :4][~fg] == 0) and np.all(grad[..., 5:][~fg] == 0)
    # foreground boxes that miss their target: the L1 term's gradient alone, sign x 0.7
    missing = grad[0, :40][fg[0, :40], :4]
    assert missing.size >= 8
    np.testing.assert_allclose(np.abs(missing), WEIGHTS[3], rtol=1e-6)
    # Measured: the two paths' gradients 2.8e-5 apart at most where |g| reaches 2.6, the
    # operators' side the farther from float64 (their IoU is float32 arithmetic).
    np.testing.assert_allclose(grad, ops_grad, rtol=1e-4, atol=1e-4)


def test_the_kernels_gradient_is_the_float64_references_slope(library):
    """Central differences of the float64 reference at foreground regressions (both
    overlapping and missing boxes), objectness and class logits: the kernel's backward."""
    inputs = _inputs(batch=2, side=96, seed=1)
    _, _, grad = _run(library, ms.GRAPH_MODE, inputs)
    raw, fg = inputs[0], inputs[4]
    rng = np.random.default_rng(2)
    picks = [(b, a, k) for b, a in zip(*np.nonzero(fg > 0.5)) for k in range(4)]
    picks = [picks[i] for i in rng.choice(len(picks), 24, replace=False)]
    picks += [(0, 5, 4), (1, 7, 4), (0, int(np.argmax(fg[0])), 9)]
    step = 1e-3
    for b, a, k in picks:
        changed = [raw.astype(np.float64).copy() for _ in range(2)]
        changed[0][b, a, k] += step
        changed[1][b, a, k] -= step
        up, down = (WEIGHTS @ _reference(c, *inputs[1:]) for c in changed)
        slope = (up - down) / (2 * step)
        assert grad[b, a, k] == pytest.approx(slope, rel=2e-3, abs=2e-4), (b, a, k)


@pytest.mark.slow
def test_the_kernel_rejects_what_it_does_not_compute(library):
    """A class index array that is not int32 is converted; targets whose shape is not the
    head's fail loudly instead of reading out of bounds."""
    raw, grids, strides, box_target, fg, cls, iou = _inputs(batch=2, side=64)
    terms = LossTerms(CLASSES, library, None)
    tensors = [ms.Tensor(x) for x in (raw, grids, strides, box_target, fg)]
    converted = terms(*tensors, ms.Tensor(cls.astype(np.int64)), ms.Tensor(iou)).asnumpy()
    expected = terms(*tensors, ms.Tensor(cls), ms.Tensor(iou)).asnumpy()
    np.testing.assert_array_equal(converted, expected)
    with pytest.raises((RuntimeError, ValueError)):
        terms(*tensors[:3], ms.Tensor(box_target[:, :-1]), *tensors[4:], ms.Tensor(cls),
              ms.Tensor(iou)).asnumpy()  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("use_l1", [0.0, 1.0])
def test_the_loss_on_the_kernel_is_the_loss_on_operators(library, use_l1):
    """YOLOXLoss built with the terms' kernel enabled: the same total, terms and gradient
    as on MindSpore's operators, to float rounding, with the L1 term off and on."""
    (on_kernel, kernel_values, kernel_grad), (on_ops, ops_values, ops_grad) = loss_with_and_without(
        library, ("loss_terms",), CLASSES, use_l1
    )
    assert on_kernel.terms.op is not None and on_ops.terms.op is None
    assert min(ops_values[1:4]) > 0.1 and ops_values[5] > 0  # every term, foreground anchors
    assert (ops_values[4] > 0.1) == (use_l1 == 1.0)
    np.testing.assert_allclose(kernel_values, ops_values, rtol=2e-6)
    assert np.abs(ops_grad[..., :4]).max() > 1e-2 and np.abs(ops_grad[..., 5:]).max() > 1e-3
    np.testing.assert_allclose(kernel_grad, ops_grad, rtol=1e-4, atol=1e-6)
