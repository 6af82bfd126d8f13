"""ops.sgd's flat update skipped by its inputs (rate and momentum 0), as the training step
skips a non-finite step without a graph branch: nothing moves, a NaN gradient included, and
with ``keep`` True the update is the one without it, bit for bit."""

from __future__ import annotations

import mindspore as ms
import numpy as np
from mindspore import nn, ops

from tests.support.sgd import SHAPES, sgd_optimizer


class Gated(nn.Cell):
    """The optimizer with its ``keep`` input, then a read of the weights."""

    def __init__(self, opt):
        super().__init__()
        self.opt = opt

    def construct(self, keep, *grads):
        done = self.opt(grads, keep)
        return ops.depend(ops.zeros((), ms.float32), done)


def _state(opt):
    """Weights, momentum buffers, first-step flags and the step count, by name."""
    named = {p.name.removeprefix("opt."): p.asnumpy().copy() for p in opt.get_parameters()}
    return {k: v for k, v in named.items() if k.startswith(("w", "accum.", "stat.", "global"))}


def test_a_skipped_flat_update_moves_nothing_and_a_kept_one_is_the_plain_update(library):
    rng = np.random.default_rng(2)
    grads = [tuple(ms.Tensor(rng.standard_normal(s).astype(np.float32)) for s in SHAPES)
             for _ in range(2)]  # fmt: skip
    _, gated_opt = sgd_optimizer(library, True)
    _, plain_opt = sgd_optimizer(library, True)
    gated, yes, no = Gated(gated_opt), ms.Tensor(True), ms.Tensor(False)
    assert gated_opt.flat is not None
    for g in grads:
        gated(yes, *g)
        plain_opt(g)
    kept, plain = _state(gated_opt), _state(plain_opt)
    for name, value in plain.items():
        assert kept[name].tobytes() == value.tobytes(), name
    assert np.abs(kept["accum.w0.weight"]).min() > 0  # momentum buffers built
    gated(no, *(ms.Tensor(np.full(s, np.nan, np.float32)) for s in SHAPES))
    skipped = _state(gated_opt)
    for name, value in kept.items():
        if name != "global_step":
            assert skipped[name].tobytes() == value.tobytes(), name
    assert int(skipped["global_step"].reshape(-1)[0]) == 3  # the schedule counts it
