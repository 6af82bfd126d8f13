"""Watching the steps: per-step statistics read from the training graph, the stop on a
non-finite loss or a diverged loss scale, and the count of unreadable images.
"""

from __future__ import annotations

import logging
import math

import numpy as np

from msdet.engine.training.callbacks.base import (
    MEASURE,
    RECORD,
    EpochCallback,
    TrainState,
    to_float,
)
from msdet.engine.training.step_stats import read_and_reset

log = logging.getLogger("train")

LONG_OVERFLOW_RUN = 10  # overflowed steps in a row that make the overflow line a warning
# Positions in the training step's outputs (see engine.training.step.TrainStep).
OUT_LR, OUT_SCALE = 6, 7


class StepStats(EpochCallback):
    """Reads the training step's in-graph statistics (``engine.training.step_stats``) at each
    step-end call, which is once per sink with data sinking, and every step without.

    fp32: a skipped step (non-finite loss or gradient on any rank) stops the run, naming
    the epoch, the step, the loss terms that were not finite and the first parameter that
    is no longer finite (the training step skips that update, so it is the parameter that
    caused it, not every weight the NaN gradient would have reached). With dynamic loss
    scaling overflowed steps are skipped by the training step; ``max_overflows`` skipped
    steps in a row (counted in-graph, across sinks) stop the run.
    """

    phase = MEASURE

    def __init__(
        self,
        state: TrainState,
        statistics,
        network,
        check_finite: bool,
        dynamic_scale: bool,
        max_overflows: int = 50,
    ):
        super().__init__(state)
        self.statistics = statistics
        self.network = network
        self.check_finite = check_finite
        self.dynamic_scale = dynamic_scale
        self.max_overflows = max_overflows

    def begin_epoch(self, epoch, run_context):
        self.state.reset_epoch(epoch)

    def on_train_step_end(self, run_context):
        cb = run_context.original_args()
        out = cb.net_outputs
        st = self.state
        st.lr, st.loss_scale = to_float(out[OUT_LR]), to_float(out[OUT_SCALE])
        read = read_and_reset(self.statistics)
        for k, v in read["sums"].items():
            st.sums[k] += v
        st.steps += read["steps"]
        st.overflow_steps += read["skipped"]
        if not read["skipped"]:
            return
        # MindSpore counts calls; a read with steps in it ends a window (an optimizer step).
        last_step = (cb.cur_step_num // st.accumulate - 1) % st.steps_per_epoch + 1
        first_step = last_step - read["steps"] + read["first_skip"]
        if self.dynamic_scale:
            # A few overflows while the dynamic scale finds its level are normal (the scale
            # halves on each): information, not a warning, unless they come in long runs.
            level = logging.WARNING if read["max_skip_run"] >= LONG_OVERFLOW_RUN else logging.INFO
            where = (
                f"step {first_step}"
                if first_step == last_step
                else f"steps {first_step}-{last_step}"
            )
            log.log(
                level,
                "epoch %d %s: %d step(s) skipped for fp16 overflow (the loss scale halves on each; "
                "%g at the last step)",
                st.epoch,
                where,
                read["skipped"],
                st.loss_scale,
            )
            if read["max_skip_run"] >= self.max_overflows:
                self._fail(
                    run_context,
                    f"{read['max_skip_run']} overflowed steps in a row "
                    f"(epoch {st.epoch}, up to step {last_step}): training diverged",
                )
        elif self.check_finite:
            self._fail(run_context, self._nonfinite_message(first_step, read["first_skip_losses"]))

    def _nonfinite_message(self, step: int, losses: dict[str, float]) -> str:
        st = self.state
        bad = [k for k, v in losses.items() if not math.isfinite(v)]
        terms = ", ".join(f"{k}={losses[k]}" for k in bad)
        if not bad:
            terms = "gradient (every loss term finite on this rank: another rank's batch)"
        param = first_nonfinite_parameter(self.network)
        if param is None:
            # Finite weights gave a non-finite loss: overflow in the forward pass.
            name, value = largest_parameter(self.network)
            param = f"none (the forward pass produced it; largest |weight| {value:.3g} in {name})"
        return (
            f"non-finite loss at epoch {st.epoch}, step {step}: {terms}; first non-finite "
            f"parameter: {param}. The last good checkpoint is kept; lower the learning rate or "
            "check the data."
        )

    def _fail(self, run_context, message: str) -> None:
        self.state.failure = message
        log.error(message)
        run_context.request_stop()


def largest_parameter(network) -> tuple[str, float]:
    """(name, max |value|) of the parameter with the largest magnitude."""
    sizes = {name: float(np.abs(p.asnumpy()).max()) for name, p in network.parameters_and_names()}
    name = max(sizes, key=sizes.get)
    return name, sizes[name]


def first_nonfinite_parameter(network) -> str | None:
    """Name of the first parameter holding NaN or Inf, in definition order."""
    for p in network.get_parameters():
        if not np.isfinite(p.asnumpy()).all():
            return p.name
    return None


class UnreadableImagesReport(EpochCallback):
    """Prints how many training images could not be read (and were replaced) this epoch."""

    phase = RECORD

    def __init__(self, state: TrainState, stats):
        super().__init__(state)
        self.stats = stats

    def end_epoch(self, epoch, run_context):
        n = self.stats.take_epoch_count(epoch - 1)
        if n:
            log.warning("epoch %d: %d unreadable training images were skipped", epoch, n)
