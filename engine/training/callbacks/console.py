"""What a run prints: a progress bar over each epoch's steps and one summary line per epoch."""

from __future__ import annotations

import logging
import time

from msdet.common.progress import Progress
from msdet.engine.training.callbacks.base import (
    MEASURE,
    REPORT,
    SUMMARISE,
    EpochCallback,
    TrainState,
)
from msdet.engine.training.step_stats import LOSS_TERMS

log = logging.getLogger("train")


class EpochSummary(EpochCallback):
    """The epoch's row of figures: losses, lr, images/s, time, latest mAP. Reads the sums
    and what :class:`EvalCallback` wrote; appends the row to ``history`` (results.csv and
    TensorBoard record it, :class:`EpochLine` prints it)."""

    phase = SUMMARISE

    def end_epoch(self, epoch, run_context):
        st = self.state
        seconds = time.time() - st.epoch_start
        st.epoch_seconds.append(seconds)
        means = st.means()
        row = {
            "epoch": epoch,
            **{f"loss_{k}": means[k] for k in LOSS_TERMS},
            "num_fg": means["num_fg"],
            "lr": st.lr,
            "images_per_s": st.steps * st.total_batch / max(seconds, 1e-9),
            "epoch_s": seconds,
            "mAP": st.metrics["mAP"] if st.evaluated else float("nan"),
            "mAP50": st.metrics["mAP50"] if st.evaluated else float("nan"),
        }
        if st.amp:  # where fp16 overflows are skipped: how many, and the scale reached
            row["loss_scale"] = st.loss_scale
            row["skipped_steps"] = float(st.overflow_steps)
        st.history.append(row)


class EpochLine(EpochCallback):
    """One line per epoch: losses, lr, images/s, time, ETA, latest mAP; printed after the
    epoch's checkpoint is written (phase :data:`REPORT`), so that the line means the epoch
    is saved. An epoch whose checkpoint could not be written says so."""

    phase = REPORT

    def end_epoch(self, epoch, run_context):
        st = self.state
        if not st.history or st.history[-1]["epoch"] != epoch:
            return
        row = st.history[-1]
        recent = st.epoch_seconds[-3:]
        eta = (st.epochs - epoch) * sum(recent) / max(len(recent), 1)
        latest = ""
        if st.metrics:
            latest = f"mAP {st.metrics['mAP']:.3f} mAP50 {st.metrics['mAP50']:.3f}"
            if not st.evaluated:
                latest = f"(last eval: {latest})"
        log.info(
            "epoch %d/%d  loss %.3f (iou %.3f obj %.3f cls %.3f l1 %.3f)  fg %.1f  lr %.2e  "
            "%.1f img/s  %s  ETA %s  %s%s",
            epoch,
            st.epochs,
            row["loss_total"],
            row["loss_iou"],
            row["loss_obj"],
            row["loss_cls"],
            row["loss_l1"],
            row["num_fg"],
            row["lr"],
            row["images_per_s"],
            duration_text(row["epoch_s"]),
            duration_text(eta),
            latest,
            "  (not saved)" if st.failure else "",
        )
        if st.overflow_steps:
            log.info(
                "epoch %d: %d overflowed steps skipped (loss scale now %g)",
                epoch,
                st.overflow_steps,
                st.loss_scale,
            )


def duration_text(seconds: float) -> str:
    seconds = int(round(seconds))
    return f"{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"


class StepProgress(EpochCallback):
    """A bar with ETA over the steps of each epoch, beside LossMonitor (whose lines it keeps
    above the bar); a line every 10% when the output is not a terminal (``common.progress``).

    With data sinking MindSpore reports step ends once per sink: the bar moves a sink at a
    time, to the step MindSpore has counted, and ends at 100% with the epoch.
    """

    phase = MEASURE

    def __init__(self, state: TrainState, every: float = 10.0):
        super().__init__(state)
        self.every = every
        self.bar: Progress | None = None

    def begin_epoch(self, epoch, run_context):
        self._close()
        desc = f"epoch {epoch}/{self.state.epochs}"
        self.bar = Progress(self.state.steps_per_epoch, desc, "step", self.every, logger=log)

    def on_train_step_end(self, run_context):
        if self.bar is not None:
            cb = run_context.original_args()
            st = self.state  # MindSpore counts calls: train.accumulate of them per step
            calls = st.steps_per_epoch * st.accumulate
            self.bar.update_to(((cb.cur_step_num - 1) % calls + 1) // st.accumulate)

    def end_epoch(self, epoch, run_context):
        self._close()

    def on_train_end(self, run_context):
        self._close()

    def _close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None
