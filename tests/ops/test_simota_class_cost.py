"""msdet.ops.assigner's class cost on its compiled operator (kernels/simota_class_cost.cc) against
MindSpore's operators and a float64 reference: the same costs to float rounding, and the
same assignment."""

from __future__ import annotations

import mindspore as ms
import numpy as np
import pytest

from msdet.ops.assigner import SimOTAAssigner, simota_class_cost_op

B, A, C, M = 4, 300, 80, 12
# Saturated logits: probabilities of exactly 1 and of nearly 0, where the clamped logs
# take over (-log(1 - 1) -> 100).
SATURATED = (100.0, -100.0, 60.0, -60.0)


def _inputs(seed: int = 0):
    rng = np.random.default_rng(seed)
    cls = (rng.standard_normal((B, A, C)) * 3).astype(np.float32)
    obj = (rng.standard_normal((B, A)) * 3).astype(np.float32)
    cls[0, : len(SATURATED)] = np.array(SATURATED, np.float32)[:, None]
    obj[0, : len(SATURATED)] = 100.0
    classes = rng.integers(0, C, (B, M)).astype(np.int32)
    classes[1, 0] = C  # out of range: a row of the one-hot is all zero
    classes[1, 1] = -1
    return cls, obj, classes


def _reference(cls, obj, classes):
    """float64 with float32's saturation: a sigmoid below the smallest normal float is 0
    (MindSpore's CPU Sigmoid and the kernel's both give 0 there: at a logit of -100 the
    cost is the clamp's 100, not the 50 of the subnormal 3.7e-44), and 1 - p is 0 where
    float32 rounds p to 1; the clamped logs as torch's."""
    x, o = cls.astype(np.float64), obj.astype(np.float64)

    def sigmoid(v):
        s = 1 / (1 + np.exp(-v))
        return np.where(s < np.finfo(np.float32).tiny, 0.0, s)

    p = np.sqrt(sigmoid(x) * sigmoid(o)[..., None])
    p32 = p.astype(np.float32).astype(np.float64)  # 1 - p is 0 where float32 rounds p to 1
    with np.errstate(divide="ignore"):
        nlq = -np.maximum(np.log(1 - p32), -100.0)
        nlp = -np.maximum(np.log(p32), -100.0)
    total = nlq.sum(-1)  # [B, A]
    onehot = (np.arange(C) == classes[..., None]).astype(np.float64)  # [B, M, C]
    return total[:, None, :] + np.einsum("bmc,bac->bma", onehot, nlp - nlq)


def test_the_kernel_gives_the_operators_costs(library, graph_mode):
    cls, obj, classes = _inputs()
    tensors = [ms.Tensor(x) for x in (cls, obj, classes)]
    got = simota_class_cost_op(library)(*tensors).asnumpy()
    want = SimOTAAssigner(C, library=None)._class_cost(*tensors, M).asnumpy()
    exact = _reference(cls, obj, classes)
    assert got.shape == want.shape == (B, M, A)
    assert np.all(np.isfinite(got)) and got.min() > 0.0
    # the saturated anchors' costs (100 per class of probability 1) are present
    assert got[0, :, 0].min() > 7000
    # measured: the kernel 1.4e-6 relative from float64 at most, MindSpore's operators 7.9e-6
    np.testing.assert_allclose(got, exact, rtol=5e-6)
    np.testing.assert_allclose(want, exact, rtol=2e-5)
    np.testing.assert_allclose(got, want, rtol=2e-5)
    # a class outside [0, C) costs the sum alone, as the all-zero one-hot row gives it
    np.testing.assert_allclose(got[1, 0], got[1, 1], rtol=0)
    np.testing.assert_allclose(got[1, 0], exact[1, 0], rtol=5e-6)


@pytest.mark.slow
def test_the_assignment_with_the_class_kernel_is_the_operators(library, graph_mode):
    """The full assigner on its three operators against MindSpore's: the same anchors,
    ground truths and IoUs at the training step's shapes (2,100 anchors at 320 px)."""
    rng = np.random.default_rng(7)
    grids, strides = [], []
    for stride in (8, 16, 32):
        n = 320 // stride
        ys, xs = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")
        grids.append(np.stack([xs.ravel(), ys.ravel()], -1))
        strides.append(np.full(n * n, stride))
    grid = np.concatenate(grids).astype(np.float32)
    stride = np.concatenate(strides).astype(np.float32)
    a = len(stride)
    pred = np.concatenate(
        [rng.uniform(0, 320, (B, a, 2)), np.exp(rng.uniform(1, 4, (B, a, 2)))], -1
    ).astype(np.float32)
    boxes = np.zeros((B, M, 4), np.float32)
    mask = np.zeros((B, M), np.float32)
    real = 6
    boxes[:, :real, :2] = rng.uniform(40, 280, (B, real, 2))
    boxes[:, :real, 2:] = rng.uniform(16, 120, (B, real, 2))
    mask[:, :real] = 1.0
    classes = rng.integers(0, C, (B, M)).astype(np.int32)
    obj = rng.standard_normal((B, a)).astype(np.float32)
    cls = rng.standard_normal((B, a, C)).astype(np.float32)
    args = [ms.Tensor(x) for x in (pred, obj, cls, grid, stride, boxes, classes, mask)]
    kernel = SimOTAAssigner(C, library=library)
    assert kernel.class_cost_op is not None
    want = [x.asnumpy() for x in SimOTAAssigner(C, library=None)(*args)]
    got = [x.asnumpy() for x in kernel(*args)]
    # not a comparison of empty assignments: anchors matched to most of the 24 real boxes
    images = np.nonzero(want[0] > 0)[0]
    assert want[0].sum() >= 20
    assert len(set(zip(images, want[1][want[0] > 0]))) >= 15
    for w, g in zip(want, got):
        np.testing.assert_array_equal(g, w)
