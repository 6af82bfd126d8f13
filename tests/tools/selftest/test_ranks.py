"""The self-test's rank side: the weights it compares across ranks and the loss scale that
makes one rank overflow (the ranks themselves: the tiny self-test with 2 cards, slow)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
from mindspore import Tensor

from msdet.tools.selftest.ranks import OVERFLOW_SCALE, flat_weights


def test_a_steps_weights_flatten_in_the_optimizers_order():
    params = [Tensor(np.float32([[1, 2], [3, 4]])), Tensor(np.float32([5]))]
    step = SimpleNamespace(optimizer=SimpleNamespace(parameters=params))
    np.testing.assert_array_equal(flat_weights(step), np.float32([1, 2, 3, 4, 5]))


def test_the_overflow_scale_overflows_float32_for_any_loss_above_two():
    scale = np.float32(OVERFLOW_SCALE)
    with np.errstate(over="ignore"):
        assert np.isinf(np.float32(2.01) * scale) and np.isinf(np.float32(40.0) * scale)
    assert np.isfinite(np.float32(1.9) * scale)
