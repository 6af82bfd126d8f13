"""MindSpore's ``LossMonitor`` and ``TimeMonitor``, speaking through msdet's log.

Both are MindSpore's own callbacks (their interval logic, their non-finite loss check); only
what they print is caught and logged in msdet's format, in the log file: the loss every
``train.log_interval`` steps (the console shows it at the end of the epoch's progress bar
instead of a line per reading), the epoch's time per step (the console's epoch line already
gives the epoch's time and images per second).
"""

from __future__ import annotations

import contextlib
import io
import logging
import re
from collections.abc import Callable

from mindspore.train import LossMonitor, TimeMonitor

from msdet.engine.training.callbacks.base import MEASURE

log = logging.getLogger("train")

LOSS_LINE = re.compile(r"epoch: (\d+) step: (\d+), loss is (.+)")
TIME_LINE = re.compile(r"epoch time: ([\d.]+) ms, per step time: ([\d.]+) ms")


class StepLossMonitor(LossMonitor):
    """``LossMonitor(per_print_times)``; each of its lines becomes
    ``  step <n>/<steps>  loss <value>`` in the log file (steps counted as optimizer steps:
    ``accumulate`` training-step calls make one), and ``show(loss)`` gets the loss
    (:meth:`StepProgress.show_loss`: the progress bar's loss).

    Phase :data:`MEASURE`, listed before the progress bar: the bar's line at a step carries
    that step's loss."""

    phase = MEASURE

    def __init__(
        self,
        per_print_times: int,
        steps_per_epoch: int,
        accumulate: int = 1,
        show: Callable[[float], None] | None = None,
    ):
        super().__init__(per_print_times)
        self.steps_per_epoch = steps_per_epoch
        self.accumulate = accumulate
        self.show = show

    def on_train_step_end(self, run_context):
        # MindSpore's hook; LossMonitor's own step_end prints (a subclass overriding the
        # old-style step_end would be warned about by Model.train).
        for line in _printed(super().on_train_step_end, run_context):
            m = LOSS_LINE.match(line)
            if m is None:
                log.info("%s", line)
                continue
            step = -(-int(m.group(2)) // self.accumulate)
            loss = m.group(3).strip()
            log.debug("  step %d/%d  loss %s", step, self.steps_per_epoch, loss)
            if self.show is not None:
                with contextlib.suppress(ValueError):  # a loss printed as a tuple: not shown
                    self.show(float(loss))


class EpochTimeMonitor(TimeMonitor):
    """``TimeMonitor(data_size)``; its line goes to the log file as
    ``epoch time <s> s, <ms> ms per step``."""

    def on_train_epoch_end(self, run_context):
        for line in _printed(super().on_train_epoch_end, run_context):
            m = TIME_LINE.search(line)
            if m is None:
                log.debug("%s", line)
                continue
            log.debug(
                "epoch time %.1f s, %.1f ms per step (TimeMonitor)",
                float(m.group(1)) / 1000,
                float(m.group(2)),
            )


def _printed(method, run_context) -> list[str]:
    """The lines ``method(run_context)`` prints."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        method(run_context)
    return [line for line in out.getvalue().splitlines() if line.strip()]
