"""What a run keeps after each epoch: checkpoints, results.csv/png and TensorBoard."""

from __future__ import annotations

import logging
import math

from msdet.engine.training.callbacks.base import RECORD, EpochCallback, TrainState
from msdet.engine.training.checkpoints import (
    META_BAD_EVALS,
    META_BEST,
    META_EPOCH,
    META_STEPS_PER_EPOCH,
)
from msdet.engine.training.run_record import write_results
from msdet.models.weights import CheckpointError

log = logging.getLogger("train")


class CheckpointCallback(EpochCallback):
    """``best.ckpt`` on a new best mAP, keep-last-k epoch files, ``last.ckpt`` every epoch,
    with the run's state (``engine.training.checkpoints``). Reads ``is_best``, ``best_map`` and
    ``bad_evals`` (written by :class:`EvalCallback`). A write that fails (a full disk) stops
    the run with the error; the checkpoints written before it are intact."""

    phase = RECORD

    def __init__(self, state: TrainState, manager, train_cell, meta: dict):
        super().__init__(state)
        self.manager = manager
        self.train_cell = train_cell
        self.meta = meta

    def end_epoch(self, epoch, run_context):
        st = self.state
        if st.failure:
            return  # keep the last good checkpoint
        meta = dict(
            self.meta,
            **{
                META_EPOCH: epoch,
                META_BEST: float(st.best_map),
                META_BAD_EVALS: st.bad_evals,
                META_STEPS_PER_EPOCH: st.steps_per_epoch,
            },
        )
        try:
            self.manager.save_epoch(self.train_cell, meta, epoch, st.is_best)
            st.saved_epoch = epoch
        except CheckpointError as err:
            st.failure = str(err)
            log.error("%s", err)
            run_context.request_stop()


class ResultsCallback(EpochCallback):
    """``results.csv`` (one row per epoch) and ``results.png`` (``engine.training.run_record``).
    Reads ``history`` (all rows, the one :class:`EpochSummary` appended included). Writes
    nothing once the run failed (a checkpoint that could not be written, a non-finite
    loss): the record then ends with the last epoch it has a checkpoint of."""

    phase = RECORD

    def __init__(self, state: TrainState, run_dir: str):
        super().__init__(state)
        self.run_dir = run_dir

    def end_epoch(self, epoch, run_context):
        if not self.state.failure:
            write_results(self.state.history, self.run_dir)


class TensorBoardCallback(EpochCallback):
    """Per-epoch scalars (loss terms, lr, throughput, mAP) and a few annotated val images.
    Reads the row :class:`EpochSummary` appended and the evaluation's ``metrics``."""

    phase = RECORD

    def __init__(self, state: TrainState, log_dir: str, images_fn=None):
        super().__init__(state)
        from tensorboardX import SummaryWriter

        self.writer = SummaryWriter(log_dir)
        self.images_fn = images_fn  # epoch -> list of (tag, HxWx3 RGB uint8)

    def end_epoch(self, epoch, run_context):
        row = self.state.history[-1] if self.state.history else None
        if row is None or self.state.failure:  # as ResultsCallback
            return
        for key, value in row.items():
            if key != "epoch" and not (isinstance(value, float) and math.isnan(value)):
                group = (
                    "loss"
                    if key.startswith(("loss_", "val_loss_"))
                    else "metrics"
                    if "mAP" in key
                    else "train"
                )
                self.writer.add_scalar(f"{group}/{key}", value, epoch)
        if self.state.evaluated:
            self._per_class_scalars(epoch)
        if self.state.evaluated and self.images_fn is not None:
            for tag, image in self.images_fn(epoch):
                self.writer.add_image(tag, image, epoch, dataformats="HWC")
        self.writer.flush()

    def _per_class_scalars(self, epoch: int) -> None:
        # One curve per class, so a user sees which of their classes lags; -1 = no ground truth.
        for key, group in (("per_class", "AP_per_class"), ("per_class_AP50", "AP50_per_class")):
            for name, ap in (self.state.metrics or {}).get(key, {}).items():
                if ap >= 0:
                    self.writer.add_scalar(f"{group}/{name}", ap, epoch)

    def on_train_end(self, run_context):
        self.writer.close()
