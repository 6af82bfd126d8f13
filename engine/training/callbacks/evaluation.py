"""Evaluation on its schedule: every ``train.eval_interval`` epochs, every epoch without
mosaic, and the last.
"""

from __future__ import annotations

import logging

from msdet.data.pipeline import first_no_aug_epoch
from msdet.engine.training.callbacks.base import EVALUATE, EpochCallback, TrainState

log = logging.getLogger("train")


class EvalCallback(EpochCallback):
    """Evaluates (EMA weights when kept) every ``interval`` epochs, every epoch of the
    no-augmentation epochs (as YOLOX) and after the last one.

    ``evaluate(epoch) -> metrics`` does the work (``engine.evaluation``; None on ranks
    other than 0, which evaluate their shard only); this decides when and tracks the best.
    Writes ``metrics``, ``evaluated``, ``is_best``, ``best_map`` and ``bad_evals`` (the
    evaluations in a row without a new best; checkpoints keep it, so resuming continues it).
    """

    phase = EVALUATE

    def __init__(self, state: TrainState, evaluate, interval: int, no_aug_epochs: int = 0):
        super().__init__(state)
        self.evaluate = evaluate
        self.interval = max(int(interval), 1)
        self.first_no_aug = first_no_aug_epoch(state.epochs, no_aug_epochs) + 1  # 1-based

    def due(self, epoch: int) -> bool:
        """Whether epoch ``epoch`` (1-based) ends with an evaluation."""
        return (
            epoch % self.interval == 0 or epoch >= self.first_no_aug or epoch == self.state.epochs
        )

    def end_epoch(self, epoch, run_context):
        if self.state.failure or not self.due(epoch):
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
