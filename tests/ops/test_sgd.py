"""ops.sgd: one SGD operator over all parameters, writing them in place, against
MindSpore's SGD per parameter (engine.training.optim.DecayInKernelSGD on either)."""

from __future__ import annotations

import mindspore as ms
import numpy as np
import pytest
from mindspore import Parameter, nn, ops

from msdet.engine.training.optim import DecayInKernelSGD
from tests.support.modes import execution_mode
from tests.support.sgd import SHAPES, sgd_optimizer


class StepThenRead(nn.Cell):
    """The optimizer, then a read of the weights (as the EMA reads them after it)."""

    def __init__(self, opt):
        super().__init__()
        self.opt = opt

    def construct(self, *grads):
        done = self.opt(grads)
        total = ops.depend(ops.zeros((), ms.float32), done)
        for weight in self.opt.parameters:
            total = total + weight.sum()
        return total


def _run(library, nesterov: bool):
    weights, opt = sgd_optimizer(library, nesterov)
    step = StepThenRead(opt)
    rng = np.random.default_rng(1)
    read = []
    for _ in range(4):
        # Gradients over 2^-8 .. 2^8 of their scale, so a product fused into a sum (one
        # rounding instead of MindSpore's two) would show in the bits.
        grads = tuple(
            ms.Tensor((rng.standard_normal(s) * np.exp2(rng.uniform(-8, 8, s))).astype(np.float32))
            for s in SHAPES
        )
        read.append(float(step(*grads).asnumpy()))
    # (named inside StepThenRead: "opt." in front of the optimizer's own Parameters)
    state = {p.name.removeprefix("opt."): p.asnumpy().copy() for p in opt.get_parameters()}
    return opt, weights, state, read


@pytest.mark.slow
@pytest.mark.parametrize("nesterov", [True, False])
def test_one_operator_gives_mindspores_sgd_bits_and_parameters(library, nesterov):
    flat, weights, got, read = _run(library, nesterov)
    per_param, _, expected, _ = _run(None, nesterov)
    assert flat.flat is not None and per_param.flat is None
    # The same Parameters (checkpoints keep their names) ...
    assert sorted(got) == sorted(expected)
    assert {"accum.w0.weight", "stat.w3.weight", "global_step"} <= set(got)
    # ... with the same values: weights, momentum buffers, first-step flags, step count.
    for name, value in expected.items():
        np.testing.assert_array_equal(got[name], value, err_msg=name)
    start = [w.asnumpy() for w in sgd_optimizer(None, nesterov)[0]]
    assert all(np.abs(got[f"w{i}.weight"] - w).min() > 0 for i, w in enumerate(start))
    assert all(not got[f"stat.w{i}.weight"].any() for i in range(len(SHAPES)))
    assert int(got["global_step"].reshape(-1)[0]) == 4
    # A read after the optimizer in the same graph sees the updated weights.
    assert read[-1] == pytest.approx(sum(float(w.sum()) for w in weights), rel=1e-6)


def test_the_flat_path_is_skipped_where_it_does_not_apply(library):
    weights = [Parameter(ms.Tensor(np.ones(3, np.float32)), name="x.weight")]
    scaled = DecayInKernelSGD(
        weights, library=library, learning_rate=0.1, momentum=0.9, loss_scale=2.0
    )
    plain = DecayInKernelSGD(weights, library=library, learning_rate=0.1, momentum=0.9)
    assert scaled.flat is None  # loss-scale division: MindSpore's path
    assert plain.flat is not None


def test_pynative_mode_updates_in_place_too(library):
    with execution_mode(ms.PYNATIVE_MODE):
        _, _, got, read = _run(library, True)
        _, _, expected, _ = _run(None, True)
    for name, value in expected.items():
        np.testing.assert_array_equal(got[name], value, err_msg=name)
    assert read[-1] == pytest.approx(
        sum(float(got[f"w{i}.weight"].sum()) for i in range(4)), rel=1e-6
    )
