"""What a run prints: a progress bar over each epoch's steps and one summary line per epoch."""

from __future__ import annotations

import logging
import math
import time

from msdet.common.progress import Progress
from msdet.engine.training.callbacks.base import (
    MEASURE,
    REPORT,
    SUMMARISE,
    EpochCallback,
    TrainState,
)
from msdet.engine.training.run_record import VAL_LOSS_TERMS
from msdet.engine.training.step_stats import LOSS_TERMS

log = logging.getLogger("train")


class EpochSummary(EpochCallback):
    """The epoch's row of figures: losses, lr, images/s, time, latest mAP and val loss. Reads
    the sums and what :class:`EvalCallback` wrote; appends the row to ``history`` (results.csv and
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
        val_loss = (st.metrics or {}).get("val_loss") if st.evaluated else None
        for k in VAL_LOSS_TERMS:
            row[f"val_loss_{k}"] = val_loss[k] if val_loss else float("nan")
        if st.amp:  # where fp16 overflows are skipped: how many, and the scale reached
            row["loss_scale"] = st.loss_scale
            row["skipped_steps"] = float(st.overflow_steps)
        st.history.append(row)


class EpochLine(EpochCallback):
    """One line per epoch: losses, lr, images/s, ETA, latest mAP (with its epoch when
    this epoch was not evaluated); printed after the epoch's checkpoint is written (phase
    :data:`REPORT`), so that the line means the epoch is saved. An epoch whose checkpoint
    could not be written says ``not saved``."""

    phase = REPORT

    def end_epoch(self, epoch, run_context):
        st = self.state
        if not st.history or st.history[-1]["epoch"] != epoch:
            return
        row = st.history[-1]
        recent = st.epoch_seconds[-3:]
        eta = (st.epochs - epoch) * sum(recent) / max(len(recent), 1)
        parts = [
            f"epoch {epoch}/{st.epochs}",
            f"loss {row['loss_total']:.3f} (iou {row['loss_iou']:.3f} obj {row['loss_obj']:.3f} "
            f"cls {row['loss_cls']:.3f} l1 {row['loss_l1']:.3f})",
            f"fg {row['num_fg']:.1f}",
            f"lr {row['lr']:.2e}",
            f"{row['images_per_s']:.1f} img/s",
            f"ETA {duration_text(eta)}",  # the epoch's own time: its bar's last line
        ]
        if st.metrics:
            latest = f"mAP {st.metrics['mAP']:.3f} mAP50 {st.metrics['mAP50']:.3f}"
            parts.append(latest if st.evaluated else f"{latest} (epoch {last_evaluated(st)})")
        if st.failure:
            parts.append("not saved")
        log.info("%s", "  ".join(parts))
        if st.overflow_steps:
            log.info(
                "epoch %d: %d overflowed steps skipped (loss scale now %g)",
                epoch,
                st.overflow_steps,
                st.loss_scale,
            )


def last_evaluated(st: TrainState) -> int | str:
    """The epoch of the latest evaluation in ``st.history`` (``?`` when it holds none: the
    figures came with a resumed run's checkpoint)."""
    for row in reversed(st.history):
        if not math.isnan(row.get("mAP", math.nan)):
            return row["epoch"]
    return "?"


def duration_text(seconds: float) -> str:
    seconds = int(round(seconds))
    return f"{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"


class StepProgress(EpochCallback):
    """A bar with ETA over the steps of each epoch, ending with the loss LossMonitor read
    last (:meth:`show_loss`, every ``train.log_interval`` steps); a line every 10% when the
    output is not a terminal (``MSDET_PROGRESS``).

    With data sinking MindSpore reports step ends once per sink: the bar moves a sink at a
    time, to the step MindSpore has counted, and ends at 100% with the epoch.
    """

    phase = MEASURE

    def __init__(self, state: TrainState, every: float = 10.0):
        super().__init__(state)
        self.every = every
        self.bar: Progress | None = None

    def show_loss(self, loss: float) -> None:
        """The latest step's loss, shown at the bar's end until the next one."""
        if self.bar is not None:
            self.bar.set_postfix(f"loss {loss:.3f}")

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
