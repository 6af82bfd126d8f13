"""Per-step training statistics accumulated inside the training graph, read once per sink.

With data sinking MindSpore runs ``sink_size`` steps on the device and calls the step-end
callbacks once, with the last step's outputs only (``mindspore/train/model.py``). Anything
a callback needs about *every* step (loss sums, steps run, steps skipped, the longest run
of skipped steps) is therefore summed here, in one Parameter vector the training step
updates each step; the host reads it with :func:`read_and_reset` at each callback call.
Without sinking that is every step, so both modes take the same path.

The host never writes the statistics themselves: under ``Model.train`` a ``set_data`` on a
Parameter that the graph also assigns was measured to detach the two (later reads saw only
zeros). The host instead bumps ``generation``, a Parameter only it writes (as the trainer
does with the loss's ``use_l1``), and the graph starts from zero at its first step of a new
generation. It writes with ``mindspore.ops.assign`` (``engine.runtime.mindspore_compat.
write_parameter``), which a graph compiled by ``mindspore.jit`` sees too.
"""

from __future__ import annotations

import mindspore as ms
import numpy as np
from mindspore import Parameter, nn, ops

from msdet.engine.runtime.mindspore_compat import write_parameter
from msdet.engine.training.run_record import LOSS_TERMS

# Layout of the statistics vector.
SUMS = LOSS_TERMS + ("num_fg",)  # sums over the steps that updated the weights
STEPS, SKIPPED, MAX_SKIP_RUN, FIRST_SKIP = 6, 7, 8, 9
FIRST_SKIP_LOSSES = slice(10, 15)  # the loss terms of the first skipped step since the read
SIZE = 15

STATS_NAME = "step_stats"
SKIP_RUN_NAME = "step_stats_skip_run"
GENERATION_NAME = "step_stats_generation"  # written by the host only
SEEN_NAME = "step_stats_seen"  # the generation the statistics belong to (graph only)
# Not training state: never saved in checkpoints nor expected when resuming.
NOT_SAVED = (STATS_NAME, SKIP_RUN_NAME, GENERATION_NAME, SEEN_NAME)


class StepStatistics(nn.Cell):
    """Adds one step to the statistics vector; see the module docstring.

    ``construct(losses, skipped, counted=None)``: ``losses`` the (total, iou, obj, cls, l1,
    num_fg) tuple of the loss, ``skipped`` a bool scalar: this step updated no weight
    (overflow or non-finite gradient). ``counted`` (a bool scalar, with gradient
    accumulation): whether this call ends an optimizer step; a call that does not adds
    nothing, so the statistics count optimizer steps. A skipped step's losses are left out
    of the sums (they may be inf/NaN) but kept, for the first skipped step, to name the
    term at fault.
    ``skip_run`` (skipped steps in a row) survives the reads, so a run of skips that
    spans several sinks is counted whole.
    """

    def __init__(self):
        super().__init__()
        self.stats = Parameter(
            ms.Tensor(np.zeros(SIZE, np.float32)), name=STATS_NAME, requires_grad=False
        )
        self.skip_run = Parameter(
            ms.Tensor(0.0, ms.float32), name=SKIP_RUN_NAME, requires_grad=False
        )
        self.generation = Parameter(
            ms.Tensor(0.0, ms.float32), name=GENERATION_NAME, requires_grad=False
        )
        self.seen = Parameter(ms.Tensor(0.0, ms.float32), name=SEEN_NAME, requires_grad=False)
        # A tensor, not 0.5: `x < 0.5` is MindSpore 2.10's LessScalar, which has no GE adapter.
        self.half = ms.Tensor(0.5, ms.float32)

    def construct(self, losses, skipped, counted=None):
        # The first step after a read starts from zero.
        fresh = ops.broadcast_to(self.generation != self.seen, self.stats.shape)
        s = ops.select(fresh, ops.zeros_like(self.stats), self.stats)
        ops.assign(self.seen, self.generation)
        values = ops.stack([v.astype(ms.float32).reshape(()) for v in losses[:6]])
        skip = skipped.astype(ms.float32)
        # select, not multiply: 0 * inf would put NaN into the sums.
        kept = ops.select(ops.broadcast_to(skipped, values.shape), ops.zeros_like(values), values)
        steps = s[STEPS] + 1.0
        run = (self.skip_run + 1.0) * skip
        first = ops.logical_and(skipped, s[SKIPPED] < self.half)
        head = s[:6] + kept
        counters = ops.stack(
            [
                steps,
                s[SKIPPED] + skip,
                ops.maximum(s[MAX_SKIP_RUN], run),
                ops.select(first, steps, s[FIRST_SKIP]),
            ]
        )
        first_losses = ops.select(ops.broadcast_to(first, (5,)), values[:5], s[FIRST_SKIP_LOSSES])
        new = ops.concat((head, counters, first_losses))
        if counted is not None:
            new = ops.select(ops.broadcast_to(counted, new.shape), new, s)
            run = ops.select(counted, run, self.skip_run)
        ops.assign(self.skip_run, run)
        return ops.assign(self.stats, new)


def read_and_reset(stats: StepStatistics) -> dict:
    """The statistics since the last read, as plain numbers; the next step starts anew.

    Keys: ``sums`` {term: sum over the steps that updated}, ``steps`` run, ``skipped``,
    ``max_skip_run`` (longest run of skipped steps ending in this window, earlier windows
    included), ``first_skip`` (1-based index of the first skipped step in the window, 0
    when none) and ``first_skip_losses`` {term: value}.
    """
    generation = float(stats.generation.asnumpy())
    if float(stats.seen.asnumpy()) != generation:
        v = np.zeros(SIZE)  # no step since the last read
    else:
        v = stats.stats.asnumpy().astype(np.float64)
    write_parameter(stats.generation, generation + 1.0)
    return {
        "sums": dict(zip(SUMS, v[:6].tolist())),
        "steps": int(round(v[STEPS])),
        "skipped": int(round(v[SKIPPED])),
        "max_skip_run": int(round(v[MAX_SKIP_RUN])),
        "first_skip": int(round(v[FIRST_SKIP])),
        "first_skip_losses": dict(zip(LOSS_TERMS, v[FIRST_SKIP_LOSSES].tolist())),
    }
