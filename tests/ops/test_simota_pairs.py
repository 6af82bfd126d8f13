"""ops.assigner on its compiled operators (kernels/simota_pairs.cc, and for the assignment and
the loss also kernels/simota_match.cc): the same bits as MindSpore's operators, for the
pairwise terms, the assignment and the loss's gradient."""

from __future__ import annotations

import mindspore as ms
import numpy as np
import pytest

from msdet.models.loss import YOLOXLoss
from msdet.ops import cpu_kernels
from msdet.ops.assigner import RULES, SimOTAAssigner, simota_pairs_op

STRIDES = (8, 16, 32)
SIDE = 64  # input pixels: 8x8 + 4x4 + 2x2 = 84 anchors


def _anchors() -> tuple[np.ndarray, np.ndarray]:
    grids, strides = [], []
    for s in STRIDES:
        n = SIDE // s
        ys, xs = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")
        grids.append(np.stack([xs.ravel(), ys.ravel()], -1))
        strides.append(np.full(n * n, s))
    return np.concatenate(grids).astype(np.float32), np.concatenate(strides).astype(np.float32)


def _targets(rng, b: int, m: int) -> tuple[np.ndarray, np.ndarray]:
    """Boxes on a half-pixel lattice, so that many anchor centres (at (i + 0.5) * stride) lie
    exactly on a box edge or a centre-region edge; the last slots of each image padded."""
    boxes = np.zeros((b, m, 4), np.float32)
    mask = np.zeros((b, m), np.float32)
    for i in range(b):
        real = rng.integers(1, m)
        boxes[i, :real, :2] = rng.integers(0, 2 * SIDE, (real, 2)) / 2.0
        boxes[i, :real, 2:] = rng.integers(1, SIDE, (real, 2)) / 2.0
        mask[i, :real] = 1.0
    # edges through anchor centres: x from 12 to 20 (stride 8 centres 12 and 20), and a
    # centre region 32 +- 2.5 * 8 = 12 .. 52
    boxes[0, 0] = (16.0, 16.0, 8.0, 8.0)
    boxes[0, 1] = (32.0, 32.0, 6.0, 6.0)
    mask[0, :2] = 1.0
    return boxes, mask


def _predictions(rng, b: int, a: int) -> np.ndarray:
    pred = np.empty((b, a, 4), np.float32)
    pred[..., :2] = rng.uniform(0, SIDE, (b, a, 2))
    pred[..., 2:] = np.exp(rng.uniform(-1, 3.5, (b, a, 2)))
    pred[0, :3, 2] = np.inf  # an overflowed w logit decodes to an inf box
    pred[1, :2, 2:] = 0.0  # and a vanished one to a point
    return pred


def _inputs(seed: int, b: int = 4, m: int = 9):
    rng = np.random.default_rng(seed)
    grids, strides = _anchors()
    boxes, mask = _targets(rng, b, m)
    pred = _predictions(rng, b, len(strides))
    return grids, strides, boxes, mask, pred


@pytest.mark.parametrize("rule", RULES)
def test_pairwise_terms_are_the_operator_paths_bits(library, graph_mode, rule):
    grids, strides, boxes, mask, pred = (ms.Tensor(x) for x in _inputs(1))
    native = SimOTAAssigner(80, rule, library=None)
    centers = (grids + 0.5) * strides.expand_dims(-1)
    ones_m = ms.ops.ones((boxes.shape[0], 1, boxes.shape[1]), ms.float32)
    want = native._pairs(centers, strides, boxes, mask.expand_dims(-1), pred, ones_m)
    got = simota_pairs_op(library)(
        boxes, mask, pred, centers, strides * native.radius, native.pairs_hyper
    )
    for name, w, g in zip(("ious", "geometry_cost", "excluded_cost"), want, got):
        w, g = w.asnumpy(), g.asnumpy()
        assert g.shape == w.shape == (4, 9, 84), name
        np.testing.assert_array_equal(g, w, err_msg=name)
    ious, geometry, excluded = (w.asnumpy() for w in want)
    # not a comparison of empty masks: candidates, matches of geometry, exclusions and
    # IoUs of every kind are present
    assert (ious > 0).sum() > 100 and (ious == 0).sum() > 100
    assert (geometry == 0).sum() > 20 and (geometry > 0).sum() > 100
    assert (excluded == 0).sum() > 100 and (excluded > 0).sum() > 100


@pytest.mark.slow
@pytest.mark.parametrize("rule", RULES)
def test_the_assignment_is_the_same(library, graph_mode, rule):
    grids, strides, boxes, mask, pred = _inputs(2, b=8, m=12)
    rng = np.random.default_rng(3)
    obj = rng.standard_normal(pred.shape[:2]).astype(np.float32)
    cls = rng.standard_normal((*pred.shape[:2], 5)).astype(np.float32)
    classes = rng.integers(0, 5, mask.shape).astype(np.int32)
    args = [ms.Tensor(x) for x in (pred, obj, cls, grids, strides, boxes, classes, mask)]
    want = [x.asnumpy() for x in SimOTAAssigner(5, rule, library=None)(*args)]
    got = [x.asnumpy() for x in SimOTAAssigner(5, rule, library=library)(*args)]
    assert want[0].sum() > 20  # foreground anchors were assigned
    images, _ = np.nonzero(want[0] > 0)
    matched = set(zip(images, want[1][want[0] > 0]))
    assert len(matched) > 20  # of many ground truths in every image
    for w, g in zip(want, got):
        np.testing.assert_array_equal(g, w)


@pytest.mark.slow
def test_the_loss_and_its_gradient_are_the_same(library, graph_mode):
    grids, strides, boxes, mask, _ = _inputs(4, b=4, m=8)
    rng = np.random.default_rng(5)
    raw = rng.standard_normal((4, len(strides), 4 + 1 + 6)).astype(np.float32)
    targets = np.concatenate([rng.integers(0, 6, (4, 8, 1)).astype(np.float32), boxes], -1)
    args = [ms.Tensor(x) for x in (raw, grids, strides, targets, mask)]

    def loss_and_grad(kernels: tuple[str, ...]):
        loss = YOLOXLoss(6, kernels=cpu_kernels.CpuKernels(library, kernels))
        assert (loss.assigner.pairs_op is not None) == bool(kernels)
        assert (loss.assigner.match_op is not None) == bool(kernels)

        def total(*inputs):
            return loss(*inputs)[0]

        value, grad = ms.value_and_grad(total, 0)(*args)
        return value.asnumpy(), grad.asnumpy()

    want_loss, want_grad = loss_and_grad(())
    got_loss, got_grad = loss_and_grad(("assigner",))
    assert want_loss > 0
    assert np.count_nonzero(want_grad[..., 4]) == want_grad[..., 4].size  # objectness: every anchor
    assert np.count_nonzero(want_grad[..., :4].any(-1)) > 10  # boxes: the assigned anchors
    np.testing.assert_array_equal(got_loss, want_loss)
    np.testing.assert_array_equal(got_grad, want_grad)
