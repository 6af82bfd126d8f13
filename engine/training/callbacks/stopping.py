"""Ending a run early: on no improvement, after a given epoch, or at a time limit."""

from __future__ import annotations

import logging
import time

from msdet.engine.training.callbacks.base import DECIDE, EpochCallback, TrainState

log = logging.getLogger("train")


class EarlyStopping(EpochCallback):
    """Stops when val mAP has not improved for ``patience`` evaluated epochs (0 = off).
    Reads ``evaluated`` and ``bad_evals`` (counted by :class:`EvalCallback`)."""

    phase = DECIDE

    def __init__(self, state: TrainState, patience: int):
        super().__init__(state)
        self.patience = int(patience)

    def end_epoch(self, epoch, run_context):
        if self.patience <= 0 or not self.state.evaluated:
            return
        if self.state.bad_evals >= self.patience:
            log.info(
                "early stopping at epoch %d: no mAP improvement in %d evaluations",
                epoch,
                self.state.bad_evals,
            )
            run_context.request_stop()


class StopAtEpoch(EpochCallback):
    """Ends the run after epoch ``stop_at`` (schedule unchanged; continue with train.resume)."""

    phase = DECIDE

    def __init__(self, state: TrainState, stop_at: int):
        super().__init__(state)
        self.stop_at = int(stop_at)

    def end_epoch(self, epoch, run_context):
        if epoch >= self.stop_at and epoch < self.state.epochs:
            log.info("train.stop_at_epoch=%d reached: stopping; continue with train.resume", epoch)
            run_context.request_stop()


class TimeLimit(EpochCallback):
    """Ends the run at the end of the last epoch that fits in ``minutes`` of training.

    Stops after an epoch when another epoch (at the mean epoch time so far) would cross
    the limit; the schedule of ``train.epochs`` is unchanged.
    """

    phase = DECIDE

    def __init__(self, state: TrainState, minutes: float):
        super().__init__(state)
        self.limit = float(minutes) * 60.0
        self.start = time.time()
        self.epochs_run = 0

    def end_epoch(self, epoch, run_context):
        self.epochs_run += 1
        spent = time.time() - self.start
        per_epoch = spent / self.epochs_run
        if epoch < self.state.epochs and spent + per_epoch > self.limit:
            log.info(
                "train.time_limit_min=%g: stopping after epoch %d (%.1f min spent)",
                self.limit / 60,
                epoch,
                spent / 60,
            )
            run_context.request_stop()
