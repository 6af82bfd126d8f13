"""The training step's overflow skip as a select on the update, no graph branch: the same
numbers as the branching step it replaces, a skipped step leaves every Parameter of the
optimizer as it was, and the compiled graph holds no control flow."""

from __future__ import annotations

import json

import mindspore as ms
import numpy as np
import pytest
from omegaconf import OmegaConf

from msdet.engine.training.optim import build_optimizer
from msdet.engine.training.step import TrainStep
from tests.support import run_python
from tests.support.branching_step import Affine, BranchingStep

CFG = OmegaConf.create({"momentum": 0.9, "nesterov": True, "weight_decay": 5e-4})
# Finite, not finite (a NaN input: NaN gradients and loss), finite, inf, finite.
INPUTS = ([1.0, 2.0, -1.0], [np.nan, 0.0, 1.0], [0.5, -1.0, 2.0], [np.inf, 1.0, 0.0],
          [2.0, 0.0, 1.0])  # fmt: skip


def run(cls, **kwargs):
    """Each step's outputs and the optimizer's Parameters after each step, as bytes."""
    net = Affine()
    lrs = np.array([0.1, 0.05, 0.2, 0.1, 0.05], np.float32)
    step = cls(net, build_optimizer(net, lrs, CFG), **kwargs)
    one = ms.Tensor(np.ones(1, np.float32))
    outputs, states = [], []
    for x in INPUTS:
        out = step(ms.Tensor(np.asarray(x, np.float32)), one, one)
        outputs.append([o.asnumpy().tobytes() for o in out])
        states.append({p.name: p.asnumpy().copy() for p in step.optimizer.get_parameters()})
    return outputs, states


@pytest.mark.parametrize(
    "kwargs", [{"skip_nonfinite": True}, {"loss_scale": 4.0, "dynamic_scale": True}]
)
def test_the_select_gives_the_branching_steps_numbers_bit_for_bit(kwargs):
    outputs, states = run(TrainStep, **kwargs)
    expected_outputs, expected_states = run(BranchingStep, **kwargs)
    assert outputs == expected_outputs  # losses, lr, scale and skipped flags, every step
    for got, expected in zip(states, expected_states):
        assert sorted(got) == sorted(expected)
        for name, value in expected.items():
            assert got[name].tobytes() == value.tobytes(), name
    skipped = [bool(np.frombuffer(o[8], np.bool_)[0]) for o in outputs]
    assert skipped == [False, True, False, True, False]


def test_a_skipped_step_leaves_weights_momentum_and_flags_and_counts_the_step():
    _, states = run(TrainStep, skip_nonfinite=True)
    before, after = states[0], states[1]  # step 2 is skipped, with momentum already built
    assert np.abs(before["accum.conv.weight"]).min() > 0  # a real momentum buffer to keep
    for name in ("conv.weight", "conv.bias", "accum.conv.weight", "accum.conv.bias",
                 "stat.conv.weight", "stat.conv.bias"):  # fmt: skip
        assert after[name].tobytes() == before[name].tobytes(), name
    assert int(after["global_step"].reshape(-1)[0]) == 2
    moved = states[2]  # the next finite step updates again
    assert not np.array_equal(moved["conv.weight"], after["conv.weight"])
    assert not np.array_equal(moved["accum.conv.bias"], after["accum.conv.bias"])


@pytest.mark.slow
def test_the_compiled_step_holds_no_control_flow():
    found = json.loads(run_python(["-m", "tests.engine.training.branch_probe"]).splitlines()[-1])
    assert "Switch" in found["branch"]  # what the listing shows for a branch
    assert "Switch" not in found["select"] and "SGD" in found["select"]
    assert "Select" in found["select"]
    # The chip check fails the branch in a sunk graph, and passes the select.
    assert found["branch_failing"] == [["Switch", "control-flow"]]
    assert found["select_failing"] == []
    # An accumulation window (train.accumulate=4) ends with a select too.
    assert "Switch" not in found["window"] and "SGD" in found["window"]
    assert found["window_failing"] == []
