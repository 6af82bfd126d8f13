"""The self-test's comparisons: like compared with like (probabilities apart from box
coordinates, each loss term with itself, the foreground count as a count)."""

from __future__ import annotations

import numpy as np
import pytest

from msdet.tools.selftest.cases import (
    TOL_FP32,
    TOL_PROB_FP32,
    Check,
    compare,
    compare_losses,
    compare_predictions,
    relative_error,
)
from msdet.tools.selftest.report import (
    format_table,
)


def test_relative_error_and_compare_fail_on_what_they_should():
    ref = np.array([1.0, -4.0, 2.0])
    assert relative_error(ref, ref) == 0.0
    assert relative_error(ref + [0, 0.004, 0], ref) == pytest.approx(1e-3)
    assert relative_error(ref[:2], ref) == float("inf")  # another shape
    assert relative_error(np.array([1.0, np.nan, 2.0]), ref) == float("inf")
    assert compare("x", ref * (1 + 1e-5), ref, 1e-4).status == "passed"
    assert compare("x", ref * 1.01, ref, 1e-4).status == "failed"
    table = format_table(
        [Check("a check", "skipped", note="needs Ascend"), compare("b", ref, ref, 1e-4)]
    )
    assert "a check" in table and "needs Ascend" in table and "max_rel_error=0" in table


def predictions(seed=0) -> np.ndarray:
    """Decoded predictions [1, 50, 85]: boxes up to 320 px, probabilities in (0, 1)."""
    rng = np.random.default_rng(seed)
    out = rng.uniform(0, 1, (1, 50, 85)).astype(np.float32)
    out[..., :4] *= 320
    return out


def test_probabilities_are_compared_apart_from_box_coordinates():
    ref = predictions()
    got = ref.copy()
    got[0, 7, 20] += 0.02  # one class probability off by 0.02
    # One relative figure over the whole output hides it behind the 320 px coordinates:
    assert relative_error(got, ref) < TOL_FP32
    check = compare_predictions("forward O0", got, ref, fp16=False)
    assert check.status == "failed"
    assert check.figures["probs_max_abs_error"] == pytest.approx(0.02, rel=1e-3)
    assert check.figures["boxes_max_rel_error"] == 0.0
    assert compare_predictions("forward O2", got, ref, fp16=True).status == "failed"
    small = ref.copy()
    small[0, 7, 20] += TOL_PROB_FP32 / 2
    small[0, 3, 1] *= 1 + TOL_FP32 / 2  # a coordinate within float32 rounding
    assert compare_predictions("forward O0", small, ref, fp16=False).status == "passed"
    boxes = ref.copy()
    boxes[0, 3, 1] += 1.0  # a pixel
    failed = compare_predictions("forward O0", boxes, ref, fp16=False)
    assert failed.status == "failed" and failed.figures["probs_max_abs_error"] == 0.0
    assert compare_predictions("x", ref[:, :10], ref, fp16=True).status == "failed"


def test_each_loss_term_is_compared_to_itself_and_the_foreground_count_as_a_count():
    ref = np.array([5.0, 2.0, 2.9, 0.1, 0.0, 40.0])  # total, iou, obj, cls, l1, num_fg
    assert compare_losses(ref.copy(), ref, fp16=False)[0]
    cls_off = ref.copy()
    cls_off[3] *= 1.005  # 0.5% on the class term: 1.25e-5 of the largest figure
    assert relative_error(cls_off, ref) < TOL_FP32
    ok, figures = compare_losses(cls_off, ref, fp16=False)
    assert not ok and figures["loss_rel_errors"]["cls"] == pytest.approx(0.005)
    one_more = ref.copy()
    one_more[5] = 41.0  # one more foreground anchor, every loss term equal
    ok, figures = compare_losses(one_more, ref, fp16=False)
    assert not ok and figures["num_fg"] == 41.0 and figures["reference_num_fg"] == 40.0
    assert not compare_losses(one_more, ref, fp16=True)[0]  # 2.5% > TOL_FG_FP16
    many = np.array([5.0, 2.0, 2.9, 0.1, 0.0, 101.0])
    assert compare_losses(many, np.r_[ref[:5], 100.0], fp16=True)[0]  # 1% in fp16
    l1_on = ref.copy()
    l1_on[4] = 1e-3  # a term that must be 0
    assert not compare_losses(l1_on, ref, fp16=True)[0]
    assert not compare_losses(ref[:5], ref, fp16=False)[0]
