"""The box IoUs of SimOTA and of the loss pick their corners with selects (ops.boxes): the
same values and gradients as Maximum and Minimum, and a gradient graph without the Divs that
MindSpore 2.10's Maximum/Minimum gradients hold (no GE adapter, no GE fallback: the 910A's
whole-graph compile would fail on it)."""

from __future__ import annotations

import json

import mindspore as ms
import numpy as np
import pytest
from mindspore import ops

from msdet.ops.boxes import Extremum, pairwise_iou_cxcywh
from tests.support import run_python


def iou_with_maximum_and_minimum(a, b):
    """The same IoU with Maximum and Minimum (the formula YOLOX's bboxes_iou uses)."""
    m, n = a.shape[1], b.shape[1]
    a1, a2 = a[..., :2] - a[..., 2:4] * 0.5, a[..., :2] + a[..., 2:4] * 0.5
    b1, b2 = b[..., :2] - b[..., 2:4] * 0.5, b[..., :2] + b[..., 2:4] * 0.5
    sides = []
    for k in range(2):
        tl = ops.maximum(ops.tile(a1[..., k : k + 1], (1, 1, n)),
                         ops.tile(b1[..., k].expand_dims(1), (1, m, 1)))  # fmt: skip
        br = ops.minimum(ops.tile(a2[..., k : k + 1], (1, 1, n)),
                         ops.tile(b2[..., k].expand_dims(1), (1, m, 1)))  # fmt: skip
        sides.append(ops.relu(br - tl))
    inter = sides[0] * sides[1]
    area_a = (a[..., 2] * a[..., 3]).expand_dims(-1)
    area_b = (b[..., 2] * b[..., 3]).expand_dims(1)
    return inter / (area_a + area_b - inter + 1e-30)


def test_the_selects_give_maximum_and_minimums_iou_bit_for_bit():
    rng = np.random.default_rng(0)
    a = rng.uniform(4, 60, (2, 7, 4)).astype(np.float32)
    b = rng.uniform(4, 60, (2, 30, 4)).astype(np.float32)
    b[0, :7] = a[0]  # identical boxes: every corner ties
    b[1, 3, :2] = a[1, 2, :2]  # shared centre, other size
    got = pairwise_iou_cxcywh(ms.Tensor(a), ms.Tensor(b)).asnumpy()
    expected = iou_with_maximum_and_minimum(ms.Tensor(a), ms.Tensor(b)).asnumpy()
    assert got.tobytes() == expected.tobytes()
    assert np.allclose(got[0, np.arange(7), np.arange(7)], 1.0) and (got == 0).any()
    b[1, 5, 0] = np.nan  # a NaN prediction: what Maximum and Minimum make of it
    got = pairwise_iou_cxcywh(ms.Tensor(a), ms.Tensor(b)).asnumpy()
    expected = iou_with_maximum_and_minimum(ms.Tensor(a), ms.Tensor(b)).asnumpy()
    assert got.tobytes() == expected.tobytes()


def weighted(fn, dout):
    """``fn(x, y) * dout``: its gradient is ``fn``'s applied to ``dout``."""

    def product(x, y):
        return fn(x, y) * dout

    return product


def test_extremum_gives_maximum_and_minimums_values_and_gradients_ties_included():
    rng = np.random.default_rng(1)
    a = rng.normal(size=(4, 6)).astype(np.float32)
    b = rng.normal(size=(4, 6)).astype(np.float32)
    b[:, :2] = a[:, :2]  # ties: MindSpore gives each input half the gradient
    dout = ms.Tensor(rng.normal(size=(4, 6)).astype(np.float32))
    for largest, reference in ((True, ops.maximum), (False, ops.minimum)):
        ours = Extremum(largest)
        got = ours(ms.Tensor(a), ms.Tensor(b)).asnumpy()
        assert got.tobytes() == reference(ms.Tensor(a), ms.Tensor(b)).asnumpy().tobytes()
        grads = ms.grad(weighted(ours, dout), grad_position=(0, 1))
        expected = ms.grad(weighted(reference, dout), grad_position=(0, 1))
        for g, e in zip(grads(ms.Tensor(a), ms.Tensor(b)), expected(ms.Tensor(a), ms.Tensor(b))):
            assert g.asnumpy().tobytes() == e.asnumpy().tobytes()
        shared = grads(ms.Tensor(a), ms.Tensor(b))[0].asnumpy()[:, :2]
        np.testing.assert_array_equal(shared, dout.asnumpy()[:, :2] * 0.5)


@pytest.mark.slow
def test_the_loss_gradient_holds_no_divs():
    """The assignment has no gradient, but its graph is built: no Divs anywhere in it."""
    rows = json.loads(run_python(["-m", "tests.ops.assigner_grad_probe"]).splitlines()[-1])
    prims = {prim for prim, _, _ in rows}
    assert {"Select", "TopK", "Log", "ReluGrad"} <= prims  # assignment and loss gradient
    assert [scope for prim, scope, _ in rows if prim == "Divs"] == []
