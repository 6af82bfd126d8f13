"""Evaluation on its schedule: the epochs the run plan names (``RunPlan.eval_epochs``: every
``train.eval_interval`` epochs, every epoch without mosaic, and the last).
"""

from __future__ import annotations

import logging
from collections.abc import Collection

from msdet.engine.training.callbacks.base import EVALUATE, EpochCallback, TrainState

log = logging.getLogger("train")


class EvalCallback(EpochCallback):
    """Evaluates (EMA weights when kept) after each of ``epochs`` (1-based).

    ``evaluate(epoch) -> metrics`` does the work (``engine.evaluation``; None on ranks
    other than 0, which evaluate their shard only); this decides when and tracks the best.
    Writes ``metrics``, ``evaluated``, ``is_best``, ``best_map`` and ``bad_evals`` (the
    evaluations in a row without a new best; checkpoints keep it, so resuming continues it).
    """

    phase = EVALUATE

    def __init__(self, state: TrainState, evaluate, epochs: Collection[int]):
        super().__init__(state)
        self.evaluate = evaluate
        self.epochs = frozenset(int(e) for e in epochs)

    def end_epoch(self, epoch, run_context):
        if self.state.failure or epoch not in self.epochs:
            return
        metrics = self.evaluate(epoch)
        if metrics is None:  # a rank other than 0: it evaluated its shard, rank 0 scores
            return
        st = self.state
        st.metrics, st.evaluated = metrics, True
        st.is_best = metrics["mAP"] > st.best_map
        st.bad_evals = 0 if st.is_best else st.bad_evals + 1
        if st.is_best:
            st.best_map = metrics["mAP"]
