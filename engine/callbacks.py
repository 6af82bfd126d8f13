"""Training callbacks: each one small and single-purpose, sharing a :class:`TrainState`.

At the end of an epoch some callbacks read what others write there (the evaluation's
metrics, the epoch's row of figures). Each callback therefore declares its ``phase``:
:data:`MEASURE` (per-step statistics), :data:`EVALUATE` (writes ``metrics``, ``evaluated``,
``is_best``, ``best_map``), :data:`SUMMARISE` (reads those and the sums, appends the epoch's
row to ``history``), :data:`RECORD` (reads the row and the best mAP: checkpoints,
results.csv, TensorBoard) and :data:`DECIDE` (reads them to stop the run). :func:`ordered`
sorts a callback list by phase, so the list can be built in any order; within a phase
callbacks do not depend on each other.

MindSpore calls ``on_train_epoch_end`` once per *sink* in data-sink mode; with
``runtime.sink_size`` smaller than an epoch, several sinks make one epoch. The
:class:`EpochCallback` base turns sinks back into epochs, so every callback here speaks
of real epochs (1-based, as MindSpore counts them). It also calls the step-end callbacks
once per sink, with the last step's outputs only: per-step figures (loss sums, steps run and
skipped) come from the training step's in-graph statistics (:class:`StepStats`), never from
counting callback calls.
"""

from __future__ import annotations

import csv
import logging
import math
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from mindspore import Tensor
from mindspore.train import Callback

from data.pipeline import first_no_aug_epoch
from data.progress import Progress
from engine.checkpoint import META_BAD_EVALS, META_BEST, META_EPOCH, META_STEPS_PER_EPOCH
from engine.graphs import compile_graph, input_shapes, target_rows, with_target_rows
from engine.run_record import write_results
from engine.step_stats import LOSS_TERMS, read_and_reset
from models.checkpoint import CheckpointError

log = logging.getLogger("train")

# Phases (see the module docstring): lower runs first at every callback point.
MEASURE, EVALUATE, SUMMARISE, RECORD, DECIDE = range(5)
LONG_OVERFLOW_RUN = 10  # overflowed steps in a row that make the overflow line a warning
# Positions in the training step's outputs (see engine.train_step.TrainStep).
OUT_LR, OUT_SCALE = 6, 7


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


def _scalar(t: Any) -> float:
    return float(t.asnumpy()) if isinstance(t, Tensor) else float(t)


class CompileTrainingGraph(Callback):
    """Compiles each training graph before the first step that runs it (graph mode, one
    input size; ``engine.multiscale`` does the same per size) and logs how long it took
    (``engine.graphs``). One graph per input shape: one in all, or one per target bucket
    (``data.target_buckets``), compiled when a batch first needs it. ``buckets`` with
    ``compile_all_first``: every bucket's graph before the first step, in bucket order
    (MindSpore's persistent compile cache finds graphs by compile order; with several
    ranks, none waits in a collective while another compiles)."""

    phase = MEASURE

    def __init__(self, buckets: Sequence[int] = (), compile_all_first: bool = False) -> None:
        self.buckets = tuple(buckets)
        self.pending = list(self.buckets) if compile_all_first and len(self.buckets) > 1 else []
        self.compiled: dict[tuple, float] = {}
        self.steps_per_rows: dict[int, int] = {}

    def on_train_step_begin(self, run_context):
        cb = run_context.original_args()
        inputs = tuple(cb.train_dataset_element or ())
        while self.pending:
            self._compile(cb.train_network, with_target_rows(inputs, self.pending.pop(0)))
        self._compile(cb.train_network, inputs)
        if len(self.buckets) > 1:
            rows = target_rows(inputs)
            self.steps_per_rows[rows] = self.steps_per_rows.get(rows, 0) + 1

    def on_train_end(self, run_context):
        if len(self.buckets) > 1:
            log.info(
                "target buckets: %d graphs compiled in %.1f s; steps per bucket: %s",
                len(self.compiled),
                sum(self.compiled.values()),
                ", ".join(
                    f"{rows} rows: {self.steps_per_rows.get(rows, 0)}" for rows in self.buckets
                ),
            )

    def _compile(self, network, inputs) -> None:
        key = input_shapes(inputs)
        if key in self.compiled:
            return
        self.compiled[key] = seconds = compile_graph(network, inputs)
        if len(self.buckets) > 1:
            log.info(
                "training graph for %d target rows compiled in %.1f s (%d of %d buckets)",
                target_rows(inputs),
                seconds,
                len(self.compiled),
                len(self.buckets),
            )
        else:
            log.info("training graph compiled in %.1f s", seconds)


class StepStats(EpochCallback):
    """Reads the training step's in-graph statistics (``engine.step_stats``) at each
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
        st.lr, st.loss_scale = _scalar(out[OUT_LR]), _scalar(out[OUT_SCALE])
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


class NoAugSwitch(EpochCallback):
    """Turns the L1 loss on for the no-augmentation epochs (the data turns mosaic off),
    from :func:`data.pipeline.first_no_aug_epoch` on, as YOLOX."""

    phase = MEASURE

    def __init__(self, state: TrainState, loss_cell, no_aug_epochs: int):
        super().__init__(state)
        self.loss_cell = loss_cell
        self.first_no_aug = first_no_aug_epoch(state.epochs, no_aug_epochs) + 1  # 1-based

    def begin_epoch(self, epoch, run_context):
        on = epoch >= self.first_no_aug
        if on and float(self.loss_cell.use_l1.asnumpy()) == 0.0:
            log.info("epoch %d: no-augmentation epochs begin: mosaic/mixup off, L1 loss on", epoch)
        self.loss_cell.use_l1.set_data(Tensor(1.0 if on else 0.0, self.loss_cell.use_l1.dtype))


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


class EpochSummary(EpochCallback):
    """One line per epoch: losses, lr, images/s, ETA, latest mAP. Reads the sums and what
    :class:`EvalCallback` wrote; appends the epoch's row to ``history``."""

    phase = SUMMARISE

    def end_epoch(self, epoch, run_context):
        st = self.state
        seconds = time.time() - st.epoch_start
        st.epoch_seconds.append(seconds)
        means = st.means()
        recent = st.epoch_seconds[-3:]
        eta = (st.epochs - epoch) * sum(recent) / len(recent)
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
        latest = ""
        if st.metrics:
            latest = f"mAP {st.metrics['mAP']:.3f} mAP50 {st.metrics['mAP50']:.3f}"
            if not st.evaluated:
                latest = f"(last eval: {latest})"
        log.info(
            "epoch %d/%d  loss %.3f (iou %.3f obj %.3f cls %.3f l1 %.3f)  fg %.1f  lr %.2e  "
            "%.1f img/s  %s  ETA %s  %s",
            epoch,
            st.epochs,
            row["loss_total"],
            row["loss_iou"],
            row["loss_obj"],
            row["loss_cls"],
            row["loss_l1"],
            row["num_fg"],
            st.lr,
            row["images_per_s"],
            _duration(seconds),
            _duration(eta),
            latest,
        )
        if st.overflow_steps:
            log.info(
                "epoch %d: %d overflowed steps skipped (loss scale now %g)",
                epoch,
                st.overflow_steps,
                st.loss_scale,
            )


def _duration(seconds: float) -> str:
    seconds = int(round(seconds))
    return f"{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"


class CheckpointCallback(EpochCallback):
    """``best.ckpt`` on a new best mAP, keep-last-k epoch files, ``last.ckpt`` every epoch,
    with the run's state (``engine.checkpoint``). Reads ``is_best``, ``best_map`` and
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
        except CheckpointError as err:
            st.failure = str(err)
            log.error("%s", err)
            run_context.request_stop()


class ResultsCallback(EpochCallback):
    """``results.csv`` (one row per epoch) and ``results.png`` (``engine.run_record``).
    Reads ``history`` (all rows, the one :class:`EpochSummary` appended included)."""

    phase = RECORD

    def __init__(self, state: TrainState, run_dir: str):
        super().__init__(state)
        self.run_dir = run_dir

    def end_epoch(self, epoch, run_context):
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
        if row is None:
            return
        for key, value in row.items():
            if key != "epoch" and not (isinstance(value, float) and math.isnan(value)):
                group = (
                    "loss" if key.startswith("loss_") else "metrics" if "mAP" in key else "train"
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


class StepProgress(EpochCallback):
    """A bar with ETA over the steps of each epoch, beside LossMonitor (whose lines it keeps
    above the bar); a line every 10% when the output is not a terminal (``data.progress``).

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


class ProfilerCallback(Callback):
    """Profiles ``steps`` training steps with ``mindspore.profiler.profile`` and prints the
    operator types that took the most time (:func:`top_operators`).

    Profiling starts at step ``start`` (>= 2: step 1 compiles the graph) with one warm-up
    step that is not recorded, so steps ``start + 1 .. start + steps`` are measured. The
    trace lands in ``output_dir/<host>_<pid>_<time>_ascend_ms/`` (MindSpore's layout on
    every device; MindStudio Insight reads it).
    """

    phase = MEASURE

    def __init__(
        self, output_dir: str, steps: int, device: str = "CPU", start: int = 2, top: int = 15
    ):
        super().__init__()
        self.output_dir, self.steps, self.device = output_dir, int(steps), device
        self.start, self.top = max(int(start), 2), top
        self.profiler = None
        self.done = False

    def on_train_step_begin(self, run_context):
        step = run_context.original_args().cur_step_num
        if self.profiler is None and not self.done and step >= self.start:
            self.profiler = _start_profiler(self.output_dir, self.steps, self.device)
            self.seen = 0

    def on_train_step_end(self, run_context):
        if self.profiler is None:
            return
        self.profiler.step()  # the schedule writes and analyses the trace after the last one
        self.seen += 1
        if self.seen > self.steps:  # the warm-up step, then `steps` recorded ones
            self._finish()

    def on_train_end(self, run_context):
        if self.profiler is not None:
            self._finish()
        elif not self.done:
            log.warning(
                "runtime.profile_steps: the run ended before step %d; nothing was profiled",
                self.start,
            )

    def _finish(self):
        self.profiler.stop()
        self.profiler = None
        self.done = True
        print(top_operators(self.output_dir, self.top))


def _start_profiler(output_dir: str, steps: int, device: str):
    """``mindspore.profiler.profile`` (the replacement of the deprecated ``mindspore.Profiler``)
    recording host operators, plus device kernels on Ascend/GPU."""
    from mindspore.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler

    activities = [ProfilerActivity.CPU]
    if device == "Ascend":
        activities.append(ProfilerActivity.NPU)
    elif device == "GPU":
        activities.append(ProfilerActivity.GPU)
    # Constructing it starts collection (start_profile=True); the schedule counts steps.
    return profile(
        activities=activities,
        schedule=schedule(wait=0, warmup=1, active=steps, repeat=1, skip_first=0),
        on_trace_ready=tensorboard_trace_handler(output_dir),
    )


# Per-operator-type statistics the profiler writes: (file pattern, type column, total time
# column, milliseconds per unit). CPU: measured with MindSpore 2.10. Ascend: CANN's
# op_statistic file as documented (not measured here).
OP_STATISTICS = (
    ("cpu_op_type_info_*.csv", "op_type", "total_compute_time", 1.0),
    ("op_statistic*.csv", "OP Type", "Total Time(us)", 1e-3),
)


def top_operators(profile_dir: str, top: int = 15) -> str:
    """A table of the operator types that took the most time in a profile folder (the
    newest statistics file found under it)."""
    import glob

    found = [
        (glob.glob(os.path.join(profile_dir, "**", fmt[0]), recursive=True), fmt)
        for fmt in OP_STATISTICS
    ]
    found = [(files, fmt) for files, fmt in found if files]
    if not found:
        return f"no operator statistics found under {profile_dir}"
    files, (_, type_col, time_col, to_ms) = found[0]
    path = max(files, key=os.path.getmtime)
    totals: dict[str, float] = {}
    with open(path, encoding="utf-8") as f:
        for row in csv.DictReader(f):
            name = row[type_col]
            totals[name] = totals.get(name, 0.0) + float(row[time_col]) * to_ms
    grand = sum(totals.values()) or 1.0
    lines = [f"Top operators by time ({path}):", f"{'operator':<30} {'ms':>10} {'share':>7}"]
    for name, ms in sorted(totals.items(), key=lambda kv: -kv[1])[:top]:
        lines.append(f"{name:<30} {ms:>10.1f} {100 * ms / grand:>6.1f}%")
    return "\n".join(lines)
