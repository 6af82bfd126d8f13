"""ops.bce: the element-wise BCE's gradient, and the class term on its compiled operator
against MindSpore's operators and a float64 reference."""

from __future__ import annotations

import mindspore as ms
import numpy as np
import pytest
from mindspore import nn

from msdet.ops.bce import BCEWithLogits, ClassBCE
from tests.support.loss_cases import loss_with_and_without
from tests.support.modes import execution_mode

CLASSES = 80
# Logits a trained head produces, and the edges of the kernel's exp and log1p: signed zeros,
# the clamps of exp (-87, 89), beyond float's exp range, and a subnormal.
EDGES = [0.0, -0.0, 1e-30, -1e-40, 16.6, -16.6, 17.0, 87.5, -87.5, 89.0, -89.0, 100.0, -100.0]


def test_bce_gradient_is_sigmoid_minus_target_times_the_incoming_gradient():
    """BCEWithLogits back-propagates (sigmoid(x) - t) * dout, finite at any logit, and no
    gradient into the targets; its value is the element-wise BCE."""
    x = np.array([-100.0, -20.0, -3.0, -0.5, 0.0, 0.5, 3.0, 20.0, 100.0], np.float32)
    t = np.array([0.0, 1.0, 0.3, 1.0, 0.5, 0.0, 0.9, 0.0, 1.0], np.float32)
    dout = np.linspace(0.5, 2.0, x.size).astype(np.float32)
    bce = BCEWithLogits()

    def weighted(a, b):
        return (bce(a, b) * ms.Tensor(dout)).sum()

    gx, gt = ms.grad(weighted, grad_position=(0, 1))(ms.Tensor(x), ms.Tensor(t))
    expected = (1.0 / (1.0 + np.exp(-x.astype(np.float64))) - t) * dout
    np.testing.assert_allclose(gx.asnumpy(), expected, rtol=1e-6, atol=1e-7)
    np.testing.assert_array_equal(gt.asnumpy(), 0.0)
    value = bce(ms.Tensor(x), ms.Tensor(t)).asnumpy()
    exact = np.maximum(x, 0) - x * t + np.log1p(np.exp(-np.abs(x.astype(np.float64))))
    np.testing.assert_allclose(value, exact, rtol=1e-6, atol=1e-6)


class WeightedTerm(nn.Cell):
    """sum(ClassBCE(...) * dloss): its gradient w.r.t. the logits is the term's backward
    pass fed dloss."""

    def __init__(self, library):
        super().__init__()
        self.term = ClassBCE(CLASSES, library)

    def construct(self, logits, cls, iou, weight, dloss):
        return (self.term(logits, cls, iou, weight) * dloss).sum()


def _inputs(rows=(4, 700), seed=0):
    rng = np.random.default_rng(seed)
    # logits over 2^-6 .. 2^5 in both signs, and the edge values in the first rows
    scale = np.exp2(rng.uniform(-6, 5, (*rows, CLASSES)))
    logits = (rng.standard_normal((*rows, CLASSES)) * scale).astype(np.float32)
    logits[0, : len(EDGES)] = np.array(EDGES, np.float32)[:, None]
    cls = rng.integers(0, CLASSES, rows).astype(np.int32)
    cls[0, : len(EDGES)] = np.arange(len(EDGES))  # the matched class at an edge value too
    iou = rng.random(rows).astype(np.float32)
    weight = (rng.random(rows) < 0.3).astype(np.float32)
    weight[0, : len(EDGES)] = 1.0
    dloss = rng.uniform(0.5, 2.0, rows).astype(np.float32)
    return logits, cls, iou, weight, dloss


def _run(library, mode, inputs):
    with execution_mode(mode):
        net = WeightedTerm(library)
        tensors = [ms.Tensor(x) for x in inputs]
        loss = net.term(*tensors[:4]).asnumpy()
        grad = ms.grad(net, grad_position=0)(*tensors).asnumpy()
        return net.term.op is not None, loss, grad


def _reference(logits, cls, iou, weight, dloss):
    """float64: the per-anchor loss and the logits' gradient, YOLOX's one-hot x IoU target."""
    x = logits.astype(np.float64)
    target = (np.arange(CLASSES) == cls[..., None]) * iou[..., None].astype(np.float64)
    bce = np.maximum(x, 0) - x * target + np.log1p(np.exp(-np.abs(x)))
    loss = bce.sum(-1) * weight
    grad = (1.0 / (1.0 + np.exp(-x)) - target) * (dloss * weight)[..., None]
    return loss, grad


@pytest.mark.slow
@pytest.mark.parametrize("mode", [ms.GRAPH_MODE, ms.PYNATIVE_MODE])
def test_the_kernel_gives_the_operators_values(library, mode):
    inputs = _inputs()
    on_kernel, loss, grad = _run(library, mode, inputs)
    on_ops, ops_loss, ops_grad = _run(None, mode, inputs)
    assert on_kernel and not on_ops
    exact_loss, exact_grad = _reference(*inputs)
    weight = inputs[3]
    assert (weight == 0).any() and np.all(loss[weight == 0] == 0)
    assert np.all(np.isfinite(loss)) and np.abs(loss).max() > 100  # the edge rows count
    # Measured from float64: the kernel 6.7e-8 relative at most, MindSpore's operators
    # 1.1e-6 (their Exp and Log1p are approximations too).
    np.testing.assert_allclose(loss, exact_loss, rtol=3e-7, atol=1e-30)
    np.testing.assert_allclose(ops_loss, exact_loss, rtol=2e-6, atol=1e-30)
    np.testing.assert_allclose(loss, ops_loss, rtol=2e-6, atol=1e-30)
    assert np.all(np.isfinite(grad)) and np.abs(grad).max() > 0.5
    assert np.all(grad[weight == 0] == 0)
    np.testing.assert_allclose(grad, exact_grad, rtol=1e-5, atol=3e-7)
    # MindSpore's CPU Sigmoid is less exact (measured: 2 of 224,000 gradients 1.5e-6 from
    # float64 where dloss ~2), so the two paths agree to its error, not the kernel's.
    np.testing.assert_allclose(grad, ops_grad, rtol=1e-5, atol=3e-6)


@pytest.mark.slow
def test_the_kernel_rejects_what_it_does_not_compute(library):
    """A class index array that is not int32 is converted; logits whose leading shape is
    not the targets' fail loudly instead of reading out of bounds."""
    logits, cls, iou, weight, _ = _inputs(rows=(2, 50))
    term = ClassBCE(CLASSES, library)
    converted = term(
        ms.Tensor(logits), ms.Tensor(cls.astype(np.int64)), ms.Tensor(iou), ms.Tensor(weight)
    ).asnumpy()
    expected = term(ms.Tensor(logits), ms.Tensor(cls), ms.Tensor(iou), ms.Tensor(weight))
    np.testing.assert_array_equal(converted, expected.asnumpy())
    with pytest.raises((RuntimeError, ValueError)):
        term(ms.Tensor(logits[:, :49]), ms.Tensor(cls), ms.Tensor(iou), ms.Tensor(weight)).asnumpy()


@pytest.mark.slow
def test_the_loss_on_the_kernel_is_the_loss_on_operators(library):
    """YOLOXLoss built with the class kernel enabled: the same total, class term and
    gradient as without it, to float rounding."""
    (on_kernel, kernel_values, kernel_grad), (on_ops, ops_values, ops_grad) = loss_with_and_without(
        library, ("class_bce",), CLASSES
    )
    assert on_kernel.terms.class_bce.op is not None and on_ops.terms.class_bce.op is None
    assert ops_values[3] > 0.1 and ops_values[5] > 0  # a class term, foreground anchors
    np.testing.assert_allclose(kernel_values, ops_values, rtol=2e-6)
    assert np.abs(ops_grad[..., 5:]).max() > 1e-3
    np.testing.assert_allclose(kernel_grad, ops_grad, rtol=1e-5, atol=1e-8)
