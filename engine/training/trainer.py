"""Build everything a training run needs from the config, then run ``Model.train`` (or,
with ``runtime.loop=jit``, msdet's own loop: :mod:`~msdet.engine.training.jit_loop`).

Reading order: :func:`run_training` is the recipe; the helpers below it are its steps.
The step counts and LR schedule are in :mod:`~msdet.engine.training.schedule`, the training
step Cell in :mod:`~msdet.engine.training.step`, what happens between steps (logging,
evaluation, checkpoints, ...) in :mod:`~msdet.engine.training.callbacks`.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
from collections.abc import Callable
from typing import Any

from mindspore import nn
from mindspore.train import Model
from omegaconf import OmegaConf

from msdet.data.buckets import check_graph_count, target_buckets
from msdet.data.build import build_sources
from msdet.data.pipeline import build_train_dataset
from msdet.data.summary import summarise_annotations
from msdet.engine.evaluation.coco import METRICS_FILE
from msdet.engine.runtime.amp import apply_amp
from msdet.engine.runtime.compiler import (
    collect_compile_failure,
    enable_compile_cache,
    training_graph_key,
)
from msdet.engine.runtime.distributed import world_group
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
from msdet.engine.training.checkpoints import CheckpointManager, restore_training_state
from msdet.engine.training.fine_tuning import (
    META_FREEZE,
    Start,
    freeze_level_code,
    prepare_fine_tuning,
)
from msdet.engine.training.graphs import compile_budget, describe_budget
from msdet.engine.training.jit_loop import (
    BucketAgreement,
    JitTrainLoop,
    world_sum,
)
from msdet.engine.training.multiscale import (
    MultiScaleResize,
    MultiScaleSchedule,
    all_sizes,
    compile_cache_enabled,
)
from msdet.engine.training.resume import (
    ResumeSource,
    check_epochs_left,
    check_resume_fits,
    load_resume_source,
)
from msdet.engine.training.run_record import RESULTS_CSV, read_results
from msdet.engine.training.schedule import Schedule, multiscale_settings, sink_plan
from msdet.engine.training.step import TrainStep, build_train_step
from msdet.engine.training.validation import TrainingEvaluation
from msdet.models.description import DESCRIPTION_KEY, describe
from msdet.models.layers import batchnorm_settling_steps
from msdet.models.loss import YOLOXLoss
from msdet.models.release_weights import release_for
from msdet.models.sync_batchnorm import convert_sync_batchnorm
from msdet.models.yolox import build_model

log = logging.getLogger("train")


class TrainingFailedError(RuntimeError):
    """The run stopped on an error it detected (non-finite loss, diverged loss scale)."""


def run_training(
    cfg: Any, rt: Runtime, accepted: Callable[[], None] | None = None
) -> dict[str, Any]:
    """Train ``cfg.model`` on ``cfg.data`` with ``cfg.train``; returns the final metrics.

    Every artefact lands in ``rt.run_dir``: checkpoints/, tensorboard/, results.csv,
    results.png, eval/ (latest evaluation), the evaluation plots and metrics.json (final
    evaluation, from the best checkpoint). Only rank 0 writes them. ``accepted()`` is
    called once every check passed, just before the run does anything (train.py writes the
    run's config record then: a refused resume leaves the folder's record as it was).
    """
    tcfg = cfg.train
    # The training input as load_config resolved it (data.img_size x train.img_scale);
    # evaluation runs at eval.img_size.
    img_size = (int(tcfg.input_size[0]), int(tcfg.input_size[1]))
    train_src, val_src = _load_data(cfg, rt, img_size)
    num_classes = train_src.num_classes

    net = build_model(cfg.model, num_classes, rt.kernels)
    if rt.sync_bn:
        synced = convert_sync_batchnorm(net)
        log.info("runtime.sync_bn: %d BatchNorm layers synced over %d ranks", synced, rt.world_size)
    source = None
    if tcfg.resume:
        source = load_resume_source(str(tcfg.resume), rt.run_dir)
        check_resume_fits(source, cfg, train_src.class_names)
        check_epochs_left(source, int(tcfg.epochs))
    fine_tuning = prepare_fine_tuning(
        net, tcfg, train_src.class_names, cfg.model, source.path if source else None
    )
    net = apply_amp(net, rt)  # at O1 a rewritten network: train that one
    loss = YOLOXLoss(
        num_classes,
        iou_weight=float(tcfg.loss.iou_weight),
        assigner_rule=str(tcfg.assigner.rule),
        center_radius=tcfg.assigner.center_radius,
        kernels=rt.kernels,
    )
    plan = Schedule.from_config(tcfg, rt.world_size, len(train_src))
    # The non-finite check stops on a NaN/Inf loss; skipping that step's update keeps
    # the weights that produced it, so the stop names the parameter at fault.
    train_step = build_train_step(
        net,
        loss,
        plan.lrs,
        tcfg,
        rt,
        skip_nonfinite=bool(cfg.runtime.check_finite),
        img_size=img_size,
    )
    resume = _resume(train_step, source, plan, rt) if source else None
    start_epoch = resume.epoch if resume else 0
    buckets = _target_buckets(cfg, rt, img_size)

    dataset = build_train_dataset(
        cfg.data,
        train_src,
        plan.batch,
        plan.epochs,
        int(tcfg.no_aug_epochs),
        int(cfg.runtime.seed),
        rt.rank,
        rt.world_size,
        start_epoch,
        buckets,
        img_size,
    )
    if plan.calls_per_epoch < plan.batches_per_epoch:
        # An epoch ends with whole windows (train.max_steps_per_epoch, train.accumulate):
        # the batches after the last one are not drawn.
        dataset = dataset.take(plan.calls_per_epoch)
    steps_per_sink, sinks_per_epoch = sink_plan(
        rt,
        plan.steps_per_epoch,
        profiling=int(cfg.runtime.profile_steps) > 0,
        multiscale=multiscale_settings(tcfg),
    )
    state = TrainState(
        epochs=plan.epochs,
        steps_per_epoch=plan.steps_per_epoch,
        total_batch=plan.total_batch,
        sinks_per_epoch=sinks_per_epoch,
        accumulate=plan.accumulate,
        start_epoch=start_epoch,
        best_map=resume.best_map if resume else -1.0,
        bad_evals=resume.bad_evals if resume else 0,
        amp=rt.uses_dynamic_loss_scale,
    )
    state.history = [r for r in read_results(rt.run_dir) if r["epoch"] <= start_epoch]
    # Every rank evaluates its shard of the val set; rank 0 scores the gathered detections.
    evaluation = TrainingEvaluation(cfg, rt, num_classes, val_src, net, train_step.ema)
    callbacks = _build_callbacks(
        cfg,
        rt,
        state,
        train_step=train_step,
        net=net,
        loss=loss,
        train_src=train_src,
        evaluation=evaluation,
        steps_per_sink=steps_per_sink,
        meta=_checkpoint_meta(cfg, train_src, fine_tuning.freeze),
        buckets=buckets,
    )
    _log_plan(cfg, rt, plan, fine_tuning.start)
    _note_early_evaluations(callbacks, plan, fine_tuning.start, start_epoch)
    ms_range = multiscale_settings(tcfg)[0]
    sizes = 1 if ms_range == 0 else len(all_sizes(img_size, ms_range))
    device_nms = rt.device == "Ascend" and not rt.host_nms
    log.info("%s", describe_budget(compile_budget(sizes, len(buckets), device_nms, rt.backend)))
    if start_epoch >= plan.epochs:
        return _finished_run(rt, evaluation, plan.epochs, accepted)
    if accepted is not None:
        accepted()

    started = time.time()
    try:
        if rt.loop == "jit":
            JitTrainLoop(
                train_step,
                rt.world_size,
                rt.jit_level,
                _bucket_agreement(rt, buckets),
                sink_size=steps_per_sink * plan.accumulate if rt.sink_effective else 0,
            ).train(
                plan.epochs * sinks_per_epoch,
                dataset,
                callbacks,
                initial_epoch=start_epoch * sinks_per_epoch,
            )
        else:
            Model(train_step).train(
                plan.epochs * sinks_per_epoch,
                dataset,
                callbacks=callbacks,
                dataset_sink_mode=rt.sink,
                sink_size=steps_per_sink * plan.accumulate,  # MindSpore counts calls
                initial_epoch=start_epoch * sinks_per_epoch,
            )
    except Exception:
        # A failed graph compile leaves MindSpore's analysis in ./rank_<id>/om/.
        analysis = collect_compile_failure(rt.run_dir, started)
        if analysis:
            log.error("graph compilation failed; MindSpore's analysis: %s", analysis)
        raise
    if state.failure:
        raise TrainingFailedError(state.failure)
    return evaluation.final(last_was_best=state.is_best)


def _load_data(cfg: Any, rt: Runtime, img_size: tuple[int, int]) -> tuple[Any, Any]:
    """The train and val sources, reported in the log; the compile cache keyed by their
    class count (it sets the head's shapes)."""
    train_src, val_src = build_sources(cfg.data)
    num_classes = check_class_count(cfg.model, train_src)
    log.info(
        "data %s: %d train / %d val images, %d classes: %s",
        cfg.data.name,
        len(train_src),
        len(val_src),
        num_classes,
        ", ".join(train_src.class_names),
    )
    # The annotation summary's first lines (python -m msdet.data.check prints all of it).
    for line in summarise_annotations(train_src, img_size):
        log.info("%s", line)
    if cfg.runtime.compile_cache:
        import mindspore as ms

        key = training_graph_key(cfg, num_classes)
        enable_compile_cache(key, rt.device, rt.kernels.key, ms.__version__)
    return train_src, val_src


def _resume(train_step: TrainStep, source: ResumeSource, plan: Schedule, rt: Runtime) -> Any:
    """Restore the run's state from ``source``. The LR schedule is this config's (a changed
    train.epochs recomputes its cosine, as YOLOX does); the checkpoint gives the position."""
    resume = restore_training_state(train_step, source.path, plan.steps_per_epoch, source.params)
    log.info(
        "resumed from %s after epoch %d of %d (best mAP %.4f), at step %d with lr %.4g",
        resume.path,
        resume.epoch,
        plan.epochs,
        resume.best_map,
        resume.global_step,
        float(plan.lrs[min(resume.global_step, len(plan.lrs) - 1)]),
    )
    if rt.is_main:
        _carry_history(resume.path, rt.run_dir)
    return resume


def _finished_run(
    rt: Runtime,
    evaluation: TrainingEvaluation,
    epochs: int,
    accepted: Callable[[], None] | None = None,
) -> dict[str, Any]:
    """A resumed run that had trained all its epochs: its final metrics (the folder left
    as it is), or, when a kill stopped it before they were written, its final evaluation
    now (``accepted()`` first)."""
    path = os.path.join(rt.run_dir, METRICS_FILE)
    if os.path.isfile(path):
        with open(path, encoding="utf-8") as f:
            metrics = json.load(f)
        log.info(
            "this run is finished: all %d epochs trained, final metrics in %s; to train "
            "longer, resume with a larger train.epochs",
            epochs,
            path,
        )
        return metrics
    log.info("all %d epochs trained; the final evaluation is missing: evaluating now", epochs)
    if accepted is not None:
        accepted()
    return evaluation.final(last_was_best=False)


def _checkpoint_meta(cfg: Any, train_src: Any, freeze_level: str) -> dict:
    """What every checkpoint of the run carries besides its state: the description
    (``models.description``) and the freeze level (a resumed run keeps it)."""
    description = describe(
        cfg.model,
        train_src.num_classes,
        train_src.class_names,
        train_src.category_ids,
        list(cfg.eval.img_size),  # what predict and eval run it at (its mAP was measured there)
        "train",
        OmegaConf.to_container(cfg, resolve=True),
    )
    return {DESCRIPTION_KEY: description.to_json(), META_FREEZE: freeze_level_code(freeze_level)}


def _note_early_evaluations(
    callbacks: list, plan: Schedule, start: Start, start_epoch: int
) -> None:
    """From scratch, name the evaluations that come before BatchNorm's running statistics
    are the network's own (:func:`batchnorm_settling_steps`): measured, such an evaluation
    gives infinite box sizes and val losses in the hundreds while the training loss falls
    as usual (docs/training.md)."""
    if not start.scratch:
        return
    evaluation = next(c for c in callbacks if isinstance(c, EvalCallback))  # always built
    settled = batchnorm_settling_steps()
    early = [e for e in range(start_epoch + 1, plan.epochs + 1)
             if e * plan.calls_per_epoch < settled and evaluation.due(e)]  # fmt: skip
    if early:
        which = (
            f"evaluation of epoch {early[0]} scores"
            if len(early) == 1
            else f"evaluations of epochs {', '.join(map(str, early))} score"
            if len(early) <= 3
            else f"evaluations of epochs {early[0]} to {early[-1]} score"
        )
        log.info(
            "evaluation: from scratch, BatchNorm's running statistics keep over 5%% of their "
            "initial values for %d training batches (YOLOX's momentum 0.03): the %s a network "
            "not yet itself in inference mode (mAP near 0, val losses in the hundreds), "
            "whatever the data",
            settled - 1,
            which,
        )


def _log_plan(cfg: Any, rt: Runtime, plan: Schedule, start: Start) -> None:
    """The run's header: model, training and evaluation sizes, schedule, where the weights
    start from, device."""
    trained = [int(v) for v in cfg.train.input_size]
    evaluated = [int(v) for v in cfg.eval.img_size]
    log.info(
        "training %s at %dx%d%s: %d epochs x %d steps, batch %d x %d ranks%s, lr %.4g",
        cfg.model.name,
        *trained,
        "" if evaluated == trained else f" (evaluated at {evaluated[0]}x{evaluated[1]})",
        plan.epochs,
        plan.steps_per_epoch,
        plan.batch,
        plan.ranks,
        f" x {plan.accumulate} accumulated" if plan.accumulate > 1 else "",
        plan.base_lr,
    )
    log.info("start: %s", start.what)
    if start.scratch and cfg.data.name != "shapes" and release_for(cfg.model):
        # A small dataset trained from random weights ends near mAP 0 where the same run
        # from pretrained weights learns it: say so where the user looks.
        log.info(
            "start: train.pretrained=auto starts %s from the original's COCO weights "
            "(the `yolox` recipe, train=yolox, does by default); from scratch needs far "
            "more data and epochs",
            cfg.model.name,
        )
    log.info(
        "%s%s: amp %s, %s mode%s, jit level %s (%s)%s",
        rt.device,
        f" {rt.chip}" if rt.chip else "",
        rt.amp_level,
        rt.mode,
        ", msdet's loop, the step compiled by mindspore.jit" if rt.loop == "jit" else "",
        rt.jit_level,
        rt.backend,
        ", data sink" if rt.sink_effective else "",
    )
    if rt.sink and not rt.sink_effective:
        log.info(
            "runtime.sink: MindSpore cannot sink data on %s and feeds each step from "
            "the host instead (same results; LossMonitor/TimeMonitor count real steps)",
            rt.device,
        )


def check_class_count(model_cfg: Any, source: Any) -> int:
    """The dataset's class count, or an error naming both when ``model.num_classes`` is set
    to another one."""
    wanted = model_cfg.get("num_classes")
    if wanted is not None and int(wanted) != source.num_classes:
        raise ValueError(
            f"model.num_classes={wanted} but the dataset ({source.ann_file}) has "
            f"{source.num_classes} classes: set model.num_classes=null to take the dataset's"
        )
    return source.num_classes


def _target_buckets(cfg: Any, rt: Runtime, img_size: tuple[int, int]) -> tuple[int, ...]:
    """``data.target_buckets`` checked against the run (``data.buckets``), logged; ``()``
    when off. A data sink feeds one shape, so sinking and buckets exclude each other."""
    buckets = target_buckets(cfg.data)
    if len(buckets) == 1:
        return ()
    if rt.sink_effective:
        raise ValueError(
            f"data.target_buckets={list(buckets[:-1])} needs runtime.sink=false: a data sink "
            "feeds the graph one input shape, and each bucket is a shape of its own"
        )
    ms_range = multiscale_settings(cfg.train)[0]
    sizes = 1 if ms_range == 0 else len(all_sizes(img_size, ms_range))
    graphs = check_graph_count(sizes, buckets)
    log.info(
        "data.target_buckets: each batch padded to %s target rows, whichever first holds "
        "its fullest image (up to %d training graphs, %s)",
        "/".join(str(b) for b in buckets),
        graphs,
        "all compiled first" if _compile_all_first(rt, buckets) else "each compiled on first use",
    )
    return buckets


def _bucket_agreement(rt: Runtime, buckets: tuple[int, ...]) -> BucketAgreement | None:
    """The jit loop's agreement on each step's target bucket, where several ranks use
    target buckets (``engine.training.jit_loop``)."""
    if rt.world_size <= 1 or len(buckets) <= 1:
        return None
    log.info(
        "target buckets on %d ranks: each step padded to the largest bucket any rank needs "
        "(every rank compiles a bucket's graph at the same step)",
        rt.world_size,
    )
    return BucketAgreement(buckets, world_sum(world_group()))


def _compile_all_first(rt: Runtime, buckets: tuple[int, ...]) -> bool:
    """Compile every graph before the first step: the persistent compile cache finds graphs
    by compile order, and with target buckets on several ranks none may wait in a
    collective while another compiles the graph its own batch needs (ranks draw the same
    multi-scale size, but each its own bucket)."""
    return compile_cache_enabled() or (rt.distributed and len(buckets) > 1)


def _build_callbacks(
    cfg: Any,
    rt: Runtime,
    state: TrainState,
    *,
    train_step: TrainStep,
    net: nn.Cell,
    loss: YOLOXLoss,
    train_src: Any,
    evaluation: TrainingEvaluation,
    steps_per_sink: int,
    meta: dict,
    buckets: tuple[int, ...] = (),
) -> list:
    """The run's callbacks, in phase order (``engine.training.callbacks.base.ordered``).

    ``steps_per_sink`` counts optimizer steps; MindSpore's callbacks count calls of the
    training step, ``train.accumulate`` of them per optimizer step.
    """
    tcfg = cfg.train
    k = state.accumulate
    calls_per_sink = steps_per_sink * k
    cbs = []
    if isinstance(train_step.net_with_loss, MultiScaleResize):
        ms_range, interval = multiscale_settings(tcfg)
        cbs.append(
            MultiScaleSchedule(  # in calls: a size window of `interval` steps is interval x k calls
                train_step.net_with_loss,
                ms_range,
                int(cfg.runtime.seed),
                calls_per_sink,
                interval * k,
                steps_per_call=calls_per_sink if rt.sink_effective else 1,
                compile_graphs=rt.mode == "graph",
                compile_all_first=_compile_all_first(rt, buckets),
                buckets=buckets,
            )
        )
    elif rt.mode == "graph" and not rt.sink_effective:  # a sunk graph compiles with its queue
        cbs.append(CompileTrainingGraph(buckets, _compile_all_first(rt, buckets)))
    cbs += [
        NoAugSwitch(state, loss, int(tcfg.no_aug_epochs)),
        StepStats(
            state,
            train_step.stats,
            net,
            bool(cfg.runtime.check_finite),
            rt.uses_dynamic_loss_scale,
        ),
        UnreadableImagesReport(state, train_src.unreadable),
    ]
    # On every rank: evaluation is a collective (each rank runs its shard).
    cbs.append(
        EvalCallback(state, evaluation.evaluate, int(tcfg.eval_interval), int(tcfg.no_aug_epochs))
    )
    if rt.is_main:
        cbs += [
            EpochSummary(state),
            CheckpointCallback(
                state,
                CheckpointManager(os.path.join(rt.run_dir, "checkpoints"), int(tcfg.keep_last)),
                train_step,
                meta,
            ),
            ResultsCallback(state, rt.run_dir),
            EpochLine(state),
        ]
        if tcfg.tensorboard:
            cbs.append(
                TensorBoardCallback(
                    state, os.path.join(rt.run_dir, "tensorboard"), evaluation.tensorboard_images
                )
            )
        if int(tcfg.patience) > 0:
            if rt.distributed:
                log.warning("train.patience: early stopping is not supported with several ranks")
            else:
                cbs.append(EarlyStopping(state, int(tcfg.patience)))
        bar = StepProgress(state)
        cbs += [
            StepLossMonitor(
                k * max(1, min(int(tcfg.log_interval), steps_per_sink)),
                state.steps_per_epoch,
                k,
                show=bar.show_loss,
            ),
            bar,  # after the loss monitor (both MEASURE): its line shows this step's loss
            EpochTimeMonitor(data_size=calls_per_sink),
        ]
    if tcfg.stop_at_epoch:
        cbs.append(StopAtEpoch(state, int(tcfg.stop_at_epoch)))  # after the checkpoint
    if tcfg.time_limit_min:
        if rt.distributed:  # ranks could disagree on the last epoch and deadlock
            log.warning("train.time_limit_min is not supported with several ranks")
        else:
            cbs.append(TimeLimit(state, float(tcfg.time_limit_min)))
    if int(cfg.runtime.profile_steps) > 0 and rt.is_main:
        cbs.append(
            ProfilerCallback(
                os.path.join(rt.run_dir, "profiler"), int(cfg.runtime.profile_steps), rt.device
            )
        )
    return ordered(cbs)


def _carry_history(ckpt_path: str, run_dir: str) -> None:
    """Resuming another run's checkpoint: bring its results.csv into this run folder."""
    old_dir = os.path.dirname(os.path.dirname(os.path.abspath(ckpt_path)))
    src, dst = os.path.join(old_dir, RESULTS_CSV), os.path.join(run_dir, RESULTS_CSV)
    if os.path.abspath(old_dir) != os.path.abspath(run_dir) and os.path.isfile(src):
        shutil.copy(src, dst)
