"""A training run: its plan decided first (``engine.training.plan``), then its parts built
from the plan, then its loop run (``engine.training.loops``).

Reading order: :func:`run_training` is the recipe; the helpers below it are its steps. The
callbacks are chosen in ``engine.training.hooks``, the training step Cell is in
``engine.training.step``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from omegaconf import OmegaConf

from msdet.data.build import build_sources
from msdet.data.labels_plot import write_labels_plot
from msdet.data.pipeline import build_train_dataset
from msdet.data.record import data_record
from msdet.data.summary import summarise_annotations
from msdet.engine.runtime.amp import apply_amp
from msdet.engine.runtime.compiler import (
    collect_compile_failure,
    enable_compile_cache,
    training_graph_key,
)
from msdet.engine.runtime.process import Runtime
from msdet.engine.training.callbacks.base import TrainState
from msdet.engine.training.checkpoints import restore_training_state
from msdet.engine.training.fine_tuning import META_FREEZE, freeze_level_code, prepare_fine_tuning
from msdet.engine.training.graphs import compile_budget, describe_budget
from msdet.engine.training.hooks import RunParts, build_callbacks, run_finished
from msdet.engine.training.interruption import reported_interruption
from msdet.engine.training.jit_loop import JitLoop
from msdet.engine.training.loops import ModelLoop, TrainLoop
from msdet.engine.training.plan import DataSummary, Loop, RunPlan, StartKind, plan_run
from msdet.engine.training.resume import load_resume_source
from msdet.engine.training.run_record import carry_history, read_results
from msdet.engine.training.step import build_train_step
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
    train_src, val_src, data = load_data(cfg, rt)
    resume = load_resume_source(str(tcfg.resume), rt.run_dir) if tcfg.resume else None
    plan = plan_run(cfg, rt, DataSummary.of(cfg.data.name, train_src, val_src), resume)
    loop = build_loop(plan, rt)  # before the network: it sets the mode the network is built in

    num_classes = train_src.num_classes
    net = build_model(cfg.model, num_classes, rt.kernels)
    if rt.sync_bn:
        synced = convert_sync_batchnorm(net)
        log.info("runtime.sync_bn: %d BatchNorm layers synced over %d ranks", synced, rt.world_size)
    fine_tuning = prepare_fine_tuning(
        net, tcfg, train_src.class_names, cfg.model, plan.start.resume, plan.start.optional
    )
    net = apply_amp(net, rt)  # at O1 a rewritten network: train that one
    loss = YOLOXLoss(
        num_classes,
        iou_weight=float(tcfg.loss.iou_weight),
        assigner_rule=str(tcfg.assigner.rule),
        center_radius=tcfg.assigner.center_radius,
        kernels=rt.kernels,
    )
    # The non-finite check stops on a NaN/Inf loss; skipping that step's update keeps
    # the weights that produced it, so the stop names the parameter at fault.
    train_step = build_train_step(
        net,
        loss,
        plan.schedule.lrs,
        tcfg,
        rt,
        skip_nonfinite=bool(cfg.runtime.check_finite),
        img_size=plan.input_size,
        multiscale=plan.multiscale_range > 0,
        grad_reducer=loop.gradient_reducer,
    )
    resumed = _resume(train_step, resume, plan, rt) if resume else None
    start_epoch = resumed.epoch if resumed else 0
    dataset = _train_dataset(cfg, plan, rt, train_src, start_epoch)
    state = TrainState(
        epochs=plan.epochs,
        steps_per_epoch=plan.schedule.steps_per_epoch,
        total_batch=plan.schedule.total_batch,
        sinks_per_epoch=plan.sinks_per_epoch,
        accumulate=plan.schedule.accumulate,
        start_epoch=start_epoch,
        best_map=resumed.best_map if resumed else -1.0,
        bad_evals=resumed.bad_evals if resumed else 0,
        amp=rt.uses_dynamic_loss_scale,
    )
    state.history = [r for r in read_results(rt.run_dir) if r["epoch"] <= start_epoch]
    # Every rank evaluates its shard of the val set; rank 0 scores the gathered detections.
    evaluation = TrainingEvaluation(
        cfg, rt, num_classes, val_src, net, train_step.ema, compile_cell=loop.compile_eval
    )
    meta = checkpoint_meta(cfg, train_src, fine_tuning.freeze, data)
    parts = RunParts(train_step, net, loss, train_src, evaluation, meta)
    callbacks = build_callbacks(cfg, plan, rt, state, parts)
    log_header(cfg, plan, rt, fine_tuning.start, start_epoch)
    if plan.start.kind is StartKind.FINISHED:
        return evaluation.finished_run(plan.epochs, accepted)
    if accepted is not None:
        accepted()

    started = time.time()
    try:  # SIGTERM or Ctrl+C: where it stopped and how to resume, said (interruption)
        with reported_interruption(state, rt.run_dir, rt.is_main):
            loop.run(
                train_step, dataset, callbacks, initial_epoch=start_epoch * plan.sinks_per_epoch
            )
    except Exception:
        # A failed graph compile leaves MindSpore's analysis in ./rank_<id>/om/.
        analysis = collect_compile_failure(rt.run_dir, started)
        if analysis:
            log.error("graph compilation failed; MindSpore's analysis: %s", analysis)
        raise
    if state.failure:
        raise TrainingFailedError(state.failure)
    return run_finished(callbacks, evaluation.final(last_was_best=state.is_best))


def build_loop(plan: RunPlan, rt: Runtime) -> TrainLoop:
    """The plan's loop: ``Model.train`` or msdet's jit loop."""
    return JitLoop(plan, rt) if plan.loop is Loop.JIT else ModelLoop(plan, rt)


def load_data(cfg: Any, rt: Runtime) -> tuple[Any, Any, dict]:
    """The train and val sources, reported in the log, and what checkpoints record of them
    (``data.record``); the compile cache keyed by their class count (it sets the head's
    shapes)."""
    found: dict[str, str] = {}
    train_src, val_src = build_sources(cfg.data, found)
    num_classes = train_src.num_classes
    log.info(
        "data %s: %d train / %d val images, %d classes: %s",
        cfg.data.name,
        len(train_src),
        len(val_src),
        num_classes,
        ", ".join(train_src.class_names),
    )
    # The annotation summary's first lines (python -m msdet.data.check prints all of it).
    input_size = tuple(int(v) for v in cfg.train.input_size)
    for line in summarise_annotations(train_src, input_size):
        log.info("%s", line)
    if rt.is_main:  # the train split's boxes at the training input, as Ultralytics draws them
        write_labels_plot(train_src, input_size, rt.run_dir)
    if cfg.runtime.compile_cache:
        import mindspore as ms

        key = training_graph_key(cfg, num_classes)
        enable_compile_cache(key, rt.device, rt.kernels.key, ms.__version__)
    return train_src, val_src, data_record(cfg.data, train_src, val_src, found)


def _train_dataset(cfg: Any, plan: RunPlan, rt: Runtime, train_src: Any, start_epoch: int) -> Any:
    """The training pipeline from ``start_epoch``; an epoch ends with whole windows
    (``train.max_steps_per_epoch``, ``train.accumulate``): the batches after the last one
    are not drawn."""
    s = plan.schedule
    dataset = build_train_dataset(
        cfg.data, train_src, s.batch, s.epochs, int(cfg.train.no_aug_epochs),
        int(cfg.runtime.seed), rt.rank, rt.world_size, start_epoch,
        plan.buckets, plan.input_size,
    )  # fmt: skip
    return dataset.take(s.calls_per_epoch) if s.calls_per_epoch < s.batches_per_epoch else dataset


def _resume(train_step: Any, source: Any, plan: RunPlan, rt: Runtime) -> Any:
    """Restore the run's state from ``source``. The LR schedule is this config's (a changed
    train.epochs recomputes its cosine, as YOLOX does); the checkpoint gives the position."""
    s = plan.schedule
    resume = restore_training_state(train_step, source.path, s.steps_per_epoch, source.params)
    log.info(
        "resumed from %s after epoch %d of %d (best mAP %.4f), at step %d with lr %.4g",
        resume.path,
        resume.epoch,
        s.epochs,
        resume.best_map,
        resume.global_step,
        float(s.lrs[min(resume.global_step, len(s.lrs) - 1)]),
    )
    if rt.is_main:
        carry_history(resume.path, rt.run_dir)
    return resume


def checkpoint_meta(cfg: Any, train_src: Any, freeze_level: str, data: dict | None = None) -> dict:
    """What every checkpoint of the run carries besides its state: the description
    (``models.description``, with ``data``: the dataset, ``data.record``) and the freeze
    level (a resumed run keeps it)."""
    description = describe(
        cfg.model,
        train_src.num_classes,
        train_src.class_names,
        train_src.category_ids,
        list(cfg.eval.img_size),  # what predict and eval run it at (its mAP was measured there)
        "train",
        OmegaConf.to_container(cfg, resolve=True),
        data,
    )
    return {DESCRIPTION_KEY: description.to_json(), META_FREEZE: freeze_level_code(freeze_level)}


def log_header(cfg: Any, plan: RunPlan, rt: Runtime, start: Any, start_epoch: int) -> None:
    """The run's header: the plan, where the weights start, the device, the graphs to
    compile, and the evaluations that come before BatchNorm settles."""
    lines = plan.describe()
    log.info("%s", lines[0])
    log.info("recipe: %s, start: %s", cfg.train.get("recipe", cfg.train.name), start.what)
    chosen_scratch = cfg.train.pretrained in (None, "")
    if chosen_scratch and cfg.data.name != "shapes" and release_for(cfg.model):
        # A small dataset trained from random weights ends near mAP 0 where the same run
        # from pretrained weights learns it: say so where the user looks.
        log.info(
            "start: train.pretrained=auto starts %s from the original's COCO weights "
            "(the default on a dataset of your own); from scratch needs far more data and "
            "epochs",
            cfg.model.name,
        )
    log.info("%s%s: amp %s", rt.device, f" {rt.chip}" if rt.chip else "", rt.amp_level)
    for line in lines[1:]:
        log.info("%s", line)
    budget = compile_budget(len(plan.sizes), len(plan.buckets), plan.device_nms,
                            plan.backends["train"].runs)  # fmt: skip
    log.info("%s", describe_budget(budget))
    if start.scratch:
        _note_early_evaluations(plan, start_epoch)


def _note_early_evaluations(plan: RunPlan, start_epoch: int) -> None:
    """From scratch, name the evaluations that come before BatchNorm's running statistics
    are the network's own (:func:`batchnorm_settling_steps`): measured, such an evaluation
    gives infinite box sizes and val losses in the hundreds while the training loss falls
    as usual (docs/training.md)."""
    settled = batchnorm_settling_steps()
    early = plan.evaluations_before(settled, start_epoch)
    if not early:
        return
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
        "not yet itself in inference mode (mAP near 0, val losses in the hundreds), whatever "
        "the data",
        settled - 1,
        which,
    )
