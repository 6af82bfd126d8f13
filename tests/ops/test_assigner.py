"""ops.assigner: SimOTA's cost never forms an inf, so chips that read overflow from a status
register do not see one in a float32 step."""

from __future__ import annotations

import math

import mindspore as ms
import numpy as np
import pytest
from mindspore import ops

from msdet.ops import assigner
from msdet.ops.assigner import LOG_CLAMP, TINY, _clamped_log


def test_clamped_log_is_torchs_clamp_at_0_and_1_and_in_between():
    x = np.array([0.0, 1e-45, 1e-30, TINY, 0.5, 1.0], np.float32)
    got = _clamped_log(ms.Tensor(x)).asnumpy()
    expected = [LOG_CLAMP, LOG_CLAMP, math.log(1e-30), math.log(TINY), math.log(0.5), 0.0]
    np.testing.assert_allclose(got, expected, rtol=1e-6)
    assert np.isfinite(got).all()


def test_clamped_log_never_takes_the_log_of_zero(monkeypatch):
    """Every input the log receives is at least the smallest normal float32: log(0) = -inf
    (the old ``max(log(p), -100)``) would set an Atlas chip's overflow flag."""
    seen = []
    real_log = ops.log

    def recording_log(t):
        seen.append(float(t.asnumpy().min()))
        return real_log(t)

    monkeypatch.setattr(assigner.ops, "log", recording_log)
    probabilities = ms.Tensor(np.array([0.0, 0.0, 1.0, 0.3], np.float32))
    _clamped_log(probabilities)  # eager: each primitive runs, and is seen, on its own
    _clamped_log(1.0 - probabilities)  # p = 1 makes 1 - p exactly 0
    assert len(seen) == 2 and min(seen) >= TINY, seen


@pytest.mark.parametrize("logit", [-200.0, 200.0])
def test_saturated_class_probabilities_give_finite_costs(logit):
    """sigmoid(+-200) is exactly 1 or 0 in float32: the class cost of SimOTA stays finite."""
    p = ops.sigmoid(ms.Tensor(np.full((1, 4, 3), logit, np.float32)))
    assert set(np.unique(p.asnumpy())) <= {0.0, 1.0}
    cost = -_clamped_log(1.0 - p) - _clamped_log(p)
    np.testing.assert_array_equal(cost.asnumpy(), -LOG_CLAMP)


def _assign(monkeypatch, rule: str, float16_topk: bool = False):
    """SimOTA on a random batch (padded ground truths, empty image, non-candidates) in
    PyNative mode on MindSpore's operators; returns (fg, matched_iou, every TopK input).
    ``float16_topk``: TopK sees its input cast to float16, as on the Atlas training series
    under ``allow_fp32_to_fp16``."""
    from msdet.ops.boxes import decode_boxes
    from tests.support.loss_cases import anchor_grid, random_raw_outputs, random_targets
    from tests.support.modes import execution_mode

    seen = []
    real_topk = ops.topk

    def recording_topk(x, k, dim=-1, *args, **kwargs):
        seen.append(x.asnumpy())
        if float16_topk:
            values, index = real_topk(x.astype(ms.float16), k, dim, *args, **kwargs)
            return values.astype(ms.float32), index
        return real_topk(x, k, dim, *args, **kwargs)

    monkeypatch.setattr(assigner.ops, "topk", recording_topk)
    rng = np.random.default_rng(5)
    classes, img = 4, 128
    grids, strides = anchor_grid(img)
    raw = random_raw_outputs(rng, 3, len(strides), classes)
    targets, mask = random_targets(rng, [5, 0, 9], img, classes, 12)
    with execution_mode(ms.PYNATIVE_MODE):
        boxes = decode_boxes(ms.Tensor(raw[..., :4]), ms.Tensor(grids), ms.Tensor(strides))
        fg, _, matched_iou, _ = assigner.SimOTAAssigner(classes, rule)(
            boxes, ms.Tensor(raw[..., 4]), ms.Tensor(raw[..., 5:]), ms.Tensor(grids),
            ms.Tensor(strides), ms.Tensor(targets[..., 1:]), ms.Tensor(targets[..., 0]),
            ms.Tensor(mask),
        )  # fmt: skip
    return fg.asnumpy(), matched_iou.asnumpy(), seen


@pytest.mark.parametrize("rule", assigner.RULES)
def test_every_cost_topk_sees_is_within_float16(monkeypatch, rule):
    """The 910A's TopK takes float16 only: a cost beyond 65,504 becomes inf there."""
    fg, _, seen = _assign(monkeypatch, rule)
    assert len(seen) == 3 and fg.sum() > 0  # IoUs, candidates in both regions, the others
    largest = max(float(np.abs(x).max()) for x in seen)
    assert largest <= assigner.FLOAT16_MAX, largest
    # the excluded pairs (padded slots, non-candidates) are there, at EXCLUDED_COST
    assert any(np.isin(-assigner.EXCLUDED_COST, x) for x in seen)


@pytest.mark.slow
@pytest.mark.parametrize("rule", assigner.RULES)
def test_a_float16_topk_keeps_the_assignment_finite_and_on_candidates(monkeypatch, rule):
    fg32, iou32, _ = _assign(monkeypatch, rule)
    fg16, iou16, seen = _assign(monkeypatch, rule, float16_topk=True)
    assert all(np.isfinite(x.astype(np.float16)).all() for x in seen)
    assert fg16.sum() > 0 and np.isfinite(iou16).all()
    # every matched anchor has a real overlap with its ground truth: none is excluded
    assert (iou16[fg16 > 0] > 0).all() and (iou32[fg32 > 0] > 0).all()
    # the costs' order is float32's wherever float16 keeps them apart: most anchors agree
    assert (fg16 == fg32).mean() > 0.99


def test_the_cost_scale_orders_like_the_originals_penalties():
    """The largest class + IoU cost of a candidate stays under the cap up to 159 classes,
    the cap under the penalty, every candidate under the exclusion cost, all in float16."""
    largest_base = 100.0 * 159 + 3.0 * -math.log(1e-8)
    assert largest_base < assigner.COST_CAP
    for penalty in assigner.GEOMETRY_PENALTY.values():
        assert assigner.COST_CAP < penalty
        assert penalty + assigner.COST_CAP < assigner.EXCLUDED_COST <= assigner.FLOAT16_MAX
