"""SimOTA's matching on the compiled operator (kernels/simota_match.cc) against MindSpore's
operators (SimOTAAssigner._match) and, where costs tie, against the rule it documents."""

from __future__ import annotations

import mindspore as ms
import numpy as np
import pytest

from msdet.ops.assigner import EXCLUDED_COST, TOPK_CANDIDATES, SimOTAAssigner, simota_match_op

B, M, A = 8, 50, 2100  # the training step's shapes: batch 8, 50 slots, 320 px


def _rows(seed: int):
    """cost, ious [B, M, A] and gt_mask [B, M] shaped like the assigner's: each real ground
    truth has a window of candidate anchors (overlapping other boxes' windows, so anchors are
    claimed twice), IoUs from near 0 (k = 1) to near 1 (k up to 10) there and 0 elsewhere,
    and a cost near 1e9 off its candidates and for padded slots."""
    rng = np.random.default_rng(seed)
    cost = (EXCLUDED_COST + rng.uniform(0, 1e5, (B, M, A))).astype(np.float32)
    ious = np.zeros((B, M, A), np.float32)
    mask = np.zeros((B, M), np.float32)
    for b in range(B):
        real = rng.integers(3, 14)
        mask[b, :real] = 1.0
        for m in range(real):
            start, width = rng.integers(0, 400), rng.integers(12, 200)
            window = slice(start, start + width)
            ious[b, m, window] = rng.uniform(0, 1, width) ** rng.choice([0.5, 2.0, 8.0])
            cost[b, m, window] = rng.uniform(0, 60, width)
    return cost, ious, mask


def _operator_path(cost, ious, mask):
    native = SimOTAAssigner(80, library=None)
    b, m = mask.shape
    valid = ms.Tensor(mask).expand_dims(-1)
    ones_m = ms.ops.ones((b, 1, m), ms.float32)
    # Every pair cheaper than the exclusion cost is in both regions here (no penalty).
    inside = ms.Tensor(cost < EXCLUDED_COST)
    excluded = ms.Tensor(np.where(cost < EXCLUDED_COST, 0.0, EXCLUDED_COST).astype(np.float32))
    out = native._match(ms.Tensor(cost), ms.Tensor(ious), valid, ones_m, ms.Tensor(cost), inside,
                        excluded)  # fmt: skip
    return [x.asnumpy() for x in out]


def _kernel(library, cost, ious, mask):
    out = simota_match_op(library)(ms.Tensor(cost), ms.Tensor(ious), ms.Tensor(mask))
    return [x.asnumpy() for x in out]


def _reference(cost, ious, mask):
    """The documented rule in numpy: dynamic k from the sum of the 10 largest IoUs (added in
    double, rounded once to float32, truncated), the k cheapest anchors (the lower index first among equal costs), and
    an anchor claimed twice to the first ground truth of least cost. Also returns how many
    anchors were claimed more than once and the dynamic ks of the real ground truths."""
    b_, m_, a_ = cost.shape
    claims = np.zeros((b_, a_), np.int64)
    first = np.zeros((b_, a_), np.int64)
    ks = []
    for b in range(b_):
        for m in range(m_):
            if mask[b, m] < 0.5:
                continue
            top = np.sort(ious[b, m])[::-1][:TOPK_CANDIDATES]
            k = max(1, int(np.float32(top.astype(np.float64).sum())))
            ks.append(k)
            for a in np.argsort(cost[b, m], kind="stable")[:k]:
                if claims[b, a] == 0:
                    first[b, a] = m
                claims[b, a] += 1
    gt = np.where(claims > 1, cost.argmin(1), first)
    fg = (claims > 0).astype(np.float32)
    matched_iou = np.take_along_axis(ious, gt[:, None, :], 1)[:, 0] * fg
    return [fg, (gt * fg).astype(np.float32), matched_iou], int((claims > 1).sum()), ks


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_matching_is_the_operator_paths(library, seed):
    cost, ious, mask = _rows(seed)
    want = _operator_path(cost, ious, mask)
    got = _kernel(library, cost, ious, mask)
    reference, claimed_twice, ks = _reference(cost, ious, mask)
    # not a comparison of empty matchings: many foreground anchors, anchors claimed by two
    # ground truths, and dynamic ks from 1 to several
    assert want[0].sum() > 100 and claimed_twice > 5
    assert min(ks) == 1 and max(ks) >= 4
    for name, w, g, r in zip(("fg", "matched_gt", "matched_iou"), want, got, reference):
        assert g.shape == w.shape == (B, A), name
        np.testing.assert_array_equal(g, w, err_msg=name)
        np.testing.assert_array_equal(g, r, err_msg=name)


def test_dynamic_k_is_the_sum_rounded_once_then_truncated(library):
    """Ten equal IoUs whose sum lands next to an integer, where the order and precision of
    the additions decide k: 0.7 (0.69999999 in float32) ten times is 6.9999999 in double,
    7.0 once rounded to float32 (k = 7), but 6.9999995 added up in float32 (k = 6)."""
    cost, ious, mask = _rows(3)
    values = [0.1, 0.2, 0.3, 0.7, 0.9, 0.6, 0.4, 0.8]
    for m, v in enumerate(values):
        ious[0, m], cost[0, m] = 0.0, np.float32(EXCLUDED_COST)
        ious[0, m, 100 + 20 * m : 110 + 20 * m] = v
        cost[0, m, 100 + 20 * m : 130 + 20 * m] = np.linspace(1, 30, 30)
    mask[0, : len(values)] = 1.0
    mask[0, len(values) :] = 0.0
    got = _kernel(library, cost, ious, mask)
    reference, _, ks = _reference(cost, ious, mask)
    sequential = []
    for v in values:
        total = np.float32(0)
        for _ in range(TOPK_CANDIDATES):
            total = np.float32(total + np.float32(v))
        sequential.append(max(1, int(total)))
    assert ks[: len(values)] == [1, 2, 3, 7, 9, 6, 4, 8]
    assert sequential != ks[: len(values)]  # the case tells the two sums apart
    for m, k in enumerate(ks[: len(values)]):  # the windows do not overlap: k anchors each
        assert got[0][0, 100 + 20 * m : 120 + 20 * m].sum() == k
    for g, r in zip(got, reference):
        np.testing.assert_array_equal(g, r)
    # MindSpore's CPU ReduceSum over the last axis of [B, M, 10] adds this way too (its
    # generic path accumulates float in double, on every CPU), so the operator path agrees
    want = _operator_path(cost, ious, mask)
    for w, g in zip(want, got):
        np.testing.assert_array_equal(g, w)


def test_tied_costs_at_the_kth_place_take_the_lower_index(library):
    """A real ground truth with no candidate at all (every cost the same, every IoU 0) takes
    one anchor: here the first; MindSpore's TopK takes one of the tied anchors by its own
    order, which is the one documented difference."""
    cost, ious, mask = _rows(4)
    cost[1, 0] = np.float32(EXCLUDED_COST)
    ious[1, 0] = 0.0
    cost[1, 1:] = np.float32(2 * EXCLUDED_COST)  # every other slot dearer, so no one competes
    mask[1, 1:] = 0.0
    got = _kernel(library, cost, ious, mask)
    reference, _, _ = _reference(cost, ious, mask)
    for g, r in zip(got, reference):
        np.testing.assert_array_equal(g, r)
    assert got[0][1].sum() == 1 and got[0][1, 0] == 1.0 and got[1][1, 0] == 0.0
    want = _operator_path(cost, ious, mask)
    assert want[0][1].sum() == 1  # the operator path also takes exactly one anchor there


def test_non_finite_costs_give_outputs_of_the_right_shape(library):
    """NaN predictions make NaN costs and IoUs; the step's finite check stops such a step,
    and the kernel must still return without reading or writing out of bounds."""
    cost, ious, mask = _rows(5)
    cost[2] = np.nan
    ious[2, :3] = np.nan
    fg, matched_gt, matched_iou = _kernel(library, cost, ious, mask)
    assert fg.shape == matched_gt.shape == matched_iou.shape == (B, A)
    assert np.isin(fg, (0.0, 1.0)).all() and (matched_gt >= 0).all() and (matched_gt < M).all()
    want = _operator_path(cost, ious, mask)
    np.testing.assert_array_equal(fg[:2], want[0][:2])  # the finite images are unaffected
