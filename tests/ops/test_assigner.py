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
