"""What every training callback builds on: the :class:`TrainState` they share, the epoch
hooks, and the phases that order them.

At the end of an epoch some callbacks read what others write there (the evaluation's
metrics, the epoch's row of figures). Each callback therefore declares its ``phase``:
:data:`MEASURE` (per-step statistics), :data:`EVALUATE` (writes ``metrics``, ``evaluated``,
``is_best``, ``best_map``), :data:`SUMMARISE` (reads those and the sums, appends the epoch's
row to ``history``), :data:`RECORD` (reads the row and the best mAP: checkpoints,
results.csv, TensorBoard), :data:`REPORT` (the epoch's console line, once its checkpoint
is on disk: a user who stops the run on seeing it keeps the epoch) and :data:`DECIDE`
(reads them to stop the run). :func:`ordered`
sorts a callback list by phase, so the list can be built in any order; within a phase
callbacks do not depend on each other.

MindSpore calls ``on_train_epoch_end`` once per *sink* in data-sink mode; with
``runtime.sink_size`` smaller than an epoch, several sinks make one epoch. The
:class:`EpochCallback` base turns sinks back into epochs, so every callback speaks of real
epochs (1-based, as MindSpore counts them). It also calls the step-end callbacks once per
sink, with the last step's outputs only: per-step figures (loss sums, steps run and
skipped) come from the training step's in-graph statistics
(:class:`~msdet.engine.training.callbacks.monitoring.StepStats`), never from counting
callback calls.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from mindspore import Tensor
from mindspore.train import Callback

from msdet.engine.training.step_stats import LOSS_TERMS

log = logging.getLogger("train")

# Phases (see the module docstring): lower runs first at every callback point.
MEASURE, EVALUATE, SUMMARISE, RECORD, REPORT, DECIDE = range(6)


@dataclass
class TrainState:
    """What callbacks share: schedule, running sums of the epoch, history, best mAP."""

    epochs: int
    steps_per_epoch: int  # optimizer steps
    total_batch: int  # images per optimizer step: batch x ranks x accumulate
    sinks_per_epoch: int = 1
    accumulate: int = 1  # training-step calls (micro-batches) per optimizer step
    start_epoch: int = 0
    best_map: float = -1.0
    bad_evals: int = 0  # evaluations in a row without a new best mAP (early stopping)
    amp: bool = False  # dynamic loss scaling: the epoch's row gains loss_scale, skipped_steps
    epoch: int = 0
    sums: dict[str, float] = field(default_factory=dict)
    steps: int = 0  # steps run this epoch (images/s counts them all)
    overflow_steps: int = 0  # of which skipped (overflow or non-finite): not in the sums
    lr: float = 0.0
    loss_scale: float = 1.0
    epoch_start: float = 0.0
    train_start: float = field(default_factory=time.time)
    epoch_seconds: list[float] = field(default_factory=list)
    metrics: dict[str, Any] | None = None  # latest evaluation
    evaluated: bool = False  # this epoch
    is_best: bool = False  # this epoch's evaluation set a new best mAP
    history: list[dict[str, Any]] = field(default_factory=list)
    failure: str | None = None
    saved_epoch: int = 0  # the epoch of the last checkpoint written (an interruption names it)

    def reset_epoch(self, epoch: int) -> None:
        self.epoch = epoch
        self.sums = dict.fromkeys(LOSS_TERMS + ("num_fg",), 0.0)
        self.steps = 0
        self.overflow_steps = 0
        self.evaluated = False
        self.is_best = False
        self.epoch_start = time.time()

    def means(self) -> dict[str, float]:
        """Mean of each summed term over the steps that updated the weights."""
        n = max(self.steps - self.overflow_steps, 1)
        return {k: v / n for k, v in self.sums.items()}


def ordered(callbacks: Sequence[Any]) -> list[Any]:
    """``callbacks`` sorted by their ``phase`` (stable; MindSpore's own callbacks, which
    have none, go with :data:`RECORD`: they only print)."""
    return sorted(callbacks, key=lambda cb: getattr(cb, "phase", RECORD))


class EpochCallback(Callback):
    """Calls :meth:`begin_epoch` / :meth:`end_epoch` with the real (1-based) epoch."""

    phase = RECORD

    def __init__(self, state: TrainState):
        super().__init__()
        self.state = state

    def _epoch(self, cb_params) -> int:
        return math.ceil(cb_params.cur_epoch_num / self.state.sinks_per_epoch)

    def on_train_epoch_begin(self, run_context):
        cb = run_context.original_args()
        if (cb.cur_epoch_num - 1) % self.state.sinks_per_epoch == 0:
            self.begin_epoch(self._epoch(cb), run_context)

    def on_train_epoch_end(self, run_context):
        cb = run_context.original_args()
        if cb.cur_epoch_num % self.state.sinks_per_epoch == 0:
            self.end_epoch(self._epoch(cb), run_context)

    def begin_epoch(self, epoch: int, run_context) -> None:  # noqa: B027 (optional hook)
        pass

    def end_epoch(self, epoch: int, run_context) -> None:  # noqa: B027 (optional hook)
        pass


def to_float(t: Any) -> float:
    return float(t.asnumpy()) if isinstance(t, Tensor) else float(t)
