"""The callbacks of a training run, built in one place from the run plan: each entry of
:func:`build_callbacks` says why it is there. Their order at every callback point is their
phase's (``engine.training.callbacks.base``: measure, evaluate, summarise, record, report,
decide); within a phase, the order here.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from mindspore import nn
from omegaconf import OmegaConf

from msdet.engine.runtime.process import Runtime
from msdet.engine.training.callbacks.augmentation import NoAugSwitch
from msdet.engine.training.callbacks.base import TrainState, ordered
from msdet.engine.training.callbacks.compile import CompileTrainingGraph
from msdet.engine.training.callbacks.console import EpochLine, EpochSummary, StepProgress
from msdet.engine.training.callbacks.evaluation import EvalCallback
from msdet.engine.training.callbacks.monitoring import StepStats, UnreadableImagesReport
from msdet.engine.training.callbacks.monitors import EpochTimeMonitor, StepLossMonitor
from msdet.engine.training.callbacks.profiler import ProfilerCallback
from msdet.engine.training.callbacks.records import (
    CheckpointCallback,
    ResultsCallback,
    TensorBoardCallback,
)
from msdet.engine.training.callbacks.stopping import EarlyStopping, StopAtEpoch, TimeLimit
from msdet.engine.training.callbacks.tracking import TRACKERS, TrackerCallback
from msdet.engine.training.checkpoints import CheckpointManager
from msdet.engine.training.multiscale import MultiScaleResize, MultiScaleSchedule
from msdet.engine.training.plan import RunPlan
from msdet.engine.training.step import TrainStep
from msdet.engine.training.validation import TrainingEvaluation
from msdet.models.loss import YOLOXLoss


@dataclass
class RunParts:
    """What the callbacks act on: the step and its network, the loss (the no-augmentation
    epochs switch its L1 term on), the train split (its unreadable images), the evaluation,
    and what every checkpoint records besides its state."""

    train_step: TrainStep
    net: nn.Cell
    loss: YOLOXLoss
    train_source: Any
    evaluation: TrainingEvaluation
    checkpoint_meta: dict


def build_callbacks(
    cfg: Any, plan: RunPlan, rt: Runtime, state: TrainState, parts: RunParts
) -> list:
    """The run's callbacks, in phase order. MindSpore's callbacks count calls of the training
    step: ``train.accumulate`` of them per optimizer step."""
    tcfg, k = cfg.train, plan.schedule.accumulate
    step = parts.train_step
    cbs: list = []
    if isinstance(step.net_with_loss, MultiScaleResize):
        # A new input size every multiscale_interval steps, drawn as the original draws it;
        # each size its own graph (a size window of `interval` steps is interval x k calls).
        cbs.append(MultiScaleSchedule(
            step.net_with_loss, plan.multiscale_range, int(cfg.runtime.seed),
            plan.calls_per_sink, plan.multiscale_interval * k,
            steps_per_call=plan.calls_per_sink if plan.sink else 1,
            compile_graphs=plan.mode == "graph", compile_all_first=plan.compile_all_first,
            buckets=plan.buckets,
        ))  # fmt: skip
    elif plan.mode == "graph" and not plan.sink:
        # Each training graph compiled before the step that needs it, its time logged (a
        # sunk graph compiles with its queue)
        cbs.append(CompileTrainingGraph(plan.buckets, plan.compile_all_first))
    cbs += [
        # Mosaic off and the L1 term on for the last train.no_aug_epochs, as YOLOX
        NoAugSwitch(state, parts.loss, int(tcfg.no_aug_epochs)),
        # The epoch's loss sums from the step's in-graph statistics; the stop on a NaN loss
        StepStats(
            state, step.stats, parts.net, bool(cfg.runtime.check_finite), rt.uses_dynamic_loss_scale
        ),  # fmt: skip
        # Images the pipeline could not read, named once per epoch
        UnreadableImagesReport(state, parts.train_source.unreadable),
        # On every rank: evaluation is a collective (each rank scores its shard)
        EvalCallback(state, parts.evaluation.evaluate, plan.eval_epochs),
    ]
    if rt.is_main:  # what rank 0 alone writes and prints
        bar = StepProgress(state)
        cbs += [
            EpochSummary(state),  # the epoch's row of figures
            CheckpointCallback(
                state,
                CheckpointManager(os.path.join(rt.run_dir, "checkpoints"), int(tcfg.keep_last)),
                step,
                parts.checkpoint_meta,
            ),
            ResultsCallback(state, rt.run_dir),  # results.csv and results.png
            EpochLine(state),  # the console's line, once the epoch's checkpoint is on disk
            # The log file's loss line every log_interval steps...
            StepLossMonitor(k * plan.log_every, state.steps_per_epoch, k, show=bar.show_loss),
            bar,  # ...and the console's progress bar, after it (it shows that loss)
            EpochTimeMonitor(data_size=plan.calls_per_sink),
        ]
        if tcfg.tensorboard:
            cbs.append(TensorBoardCallback(state, os.path.join(rt.run_dir, "tensorboard"),
                                           parts.evaluation.tensorboard_images))  # fmt: skip
        # MLflow and SwanLab beside TensorBoard (train.track): the config, the same rows
        # and the run's pictures, in the trackers its users compare runs in
        if plan.trackers:
            config = OmegaConf.to_container(cfg, resolve=True)
            cbs += [TRACKERS[name](state, config, rt.run_dir) for name in plan.trackers]
        if plan.patience:  # one rank only: the plan refuses it with several
            cbs.append(EarlyStopping(state, plan.patience))
        if plan.profile_steps:
            cbs.append(ProfilerCallback(os.path.join(rt.run_dir, "profiler"),
                                        plan.profile_steps, rt.device))  # fmt: skip
    if plan.stop_at_epoch:  # on every rank, after the epoch's checkpoint
        cbs.append(StopAtEpoch(state, plan.stop_at_epoch))
    if plan.time_limit_min:  # one rank only: the plan refuses it with several
        cbs.append(TimeLimit(state, plan.time_limit_min))
    return ordered(cbs)


def run_finished(callbacks: list, metrics: dict[str, Any]) -> dict[str, Any]:
    """Hand the final evaluation's ``metrics`` to the callbacks that report the whole run
    (the trackers: its pictures are written by then); returns the metrics."""
    for cb in callbacks:
        if isinstance(cb, TrackerCallback):
            cb.finished(metrics)
    return metrics
