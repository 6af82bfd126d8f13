"""Build everything a training run needs from the config, then run ``Model.train``.

Reading order: :func:`run_training` is the recipe; the ``_build_*`` helpers below it are
its steps. The training step itself is ``engine.train_step.TrainStep``; what happens
between steps (logging, evaluation, checkpoints, ...) is in ``engine.callbacks``.
"""

from __future__ import annotations

import csv
import logging
import os
import shutil
import time
from typing import Any

import cv2
import mindspore as ms
import numpy as np
from mindspore import nn
from mindspore.train import LossMonitor, Model, TimeMonitor

from data.build import build_sources
from data.pipeline import (
    build_eval_dataset,
    build_train_dataset,
    check_data_config,
    eval_positions,
)
from data.visualize import draw_boxes
from engine.callbacks import (
    CheckpointCallback,
    CompileTrainingGraph,
    EarlyStopping,
    EpochSummary,
    EvalCallback,
    NoAugSwitch,
    ProfilerCallback,
    ResultsCallback,
    StepStats,
    StopAtEpoch,
    TensorBoardCallback,
    TimeLimit,
    TrainState,
    UnreadableImagesReport,
)
from engine.checkpoint import (
    BEST,
    META_CLASSES,
    META_MODEL,
    CheckpointManager,
    find_resume_checkpoint,
    restore_training_state,
)
from engine.evaluator import SUMMARY_FILE, RankGather, evaluate_on_dataset
from engine.multiscale import DEFAULT_INTERVAL, MultiScaleResize, MultiScaleSchedule, sink_steps
from engine.optim import build_optimizer, scaled_lr, yolox_lr_schedule
from engine.runtime import (
    Runtime,
    collect_compile_failure,
    convert_sync_batchnorm,
    float_status_ops,
)
from engine.train_step import ModelEMA, TrainStep
from engine.transfer import META_FREEZE, freeze_level_code, prepare_fine_tuning
from models.checkpoint import network_weights, read_checkpoint
from models.inference import InferenceNet, build_nms
from models.loss import DetectorWithLoss, YOLOXLoss
from models.yolox import build_model

log = logging.getLogger("train")


class TrainingFailedError(RuntimeError):
    """The run stopped on an error it detected (non-finite loss, diverged loss scale)."""


def run_training(cfg: Any, rt: Runtime) -> dict[str, Any]:
    """Train ``cfg.model`` on ``cfg.data`` with ``cfg.train``; returns the final metrics.

    Every artefact lands in ``rt.run_dir``: checkpoints/, tensorboard/, results.csv,
    results.png, eval/ (latest evaluation) and metrics.json (final evaluation, from the
    best checkpoint). Only rank 0 writes them.
    """
    tcfg = cfg.train
    train_src, val_src = build_sources(cfg.data)
    num_classes = train_src.num_classes
    log.info(
        "data %s: %d train / %d val images, %d classes: %s",
        cfg.data.name,
        len(train_src),
        len(val_src),
        num_classes,
        ", ".join(train_src.class_names),
    )

    net = build_model(cfg.model, num_classes)
    if rt.sync_bn:
        synced = convert_sync_batchnorm(net)
        log.info("runtime.sync_bn: %d BatchNorm layers synced over %d ranks", synced, rt.world_size)
    resume_path = find_resume_checkpoint(str(tcfg.resume), rt.run_dir) if tcfg.resume else None
    freeze_level = prepare_fine_tuning(net, tcfg, resume_path)
    apply_amp(net, rt)
    loss = YOLOXLoss(
        num_classes,
        iou_weight=float(tcfg.loss.iou_weight),
        assigner_rule=str(tcfg.assigner.rule),
        center_radius=tcfg.assigner.center_radius,
    )

    batch, world = int(tcfg.batch_size), rt.world_size
    steps_per_epoch = len(train_src) // world // batch
    if tcfg.max_steps_per_epoch:
        steps_per_epoch = min(steps_per_epoch, int(tcfg.max_steps_per_epoch))
    if steps_per_epoch < 1:
        raise ValueError(f"{len(train_src)} images are fewer than one batch of {batch} per rank")
    epochs = int(tcfg.epochs)
    base_lr = scaled_lr(float(tcfg.lr_per_img), batch * world)
    lrs = yolox_lr_schedule(
        base_lr,
        steps_per_epoch,
        epochs,
        float(tcfg.warmup_epochs),
        int(tcfg.no_aug_epochs),
        float(tcfg.min_lr_ratio),
        float(tcfg.warmup_lr),
    )
    # The non-finite check stops on a NaN/Inf loss; skipping that step's update keeps
    # the weights that produced it, so the stop names the parameter at fault.
    train_step = build_train_step(
        net,
        loss,
        lrs,
        tcfg,
        rt,
        skip_nonfinite=bool(cfg.runtime.check_finite),
        img_size=check_data_config(cfg.data),
    )

    start_epoch, best_map = 0, -1.0
    if tcfg.resume:
        resume = restore_training_state(train_step, resume_path)
        start_epoch, best_map = resume.epoch, resume.best_map
        log.info(
            "resumed from %s after epoch %d (best mAP %.4f)", resume.path, start_epoch, best_map
        )
        if rt.is_main:
            _carry_history(resume.path, rt.run_dir)
    if start_epoch >= epochs:
        log.info("nothing to train: the checkpoint finished all %d epochs", epochs)

    dataset = build_train_dataset(
        cfg.data,
        train_src,
        batch,
        epochs,
        int(tcfg.no_aug_epochs),
        int(cfg.runtime.seed),
        rt.rank,
        world,
        start_epoch,
    )
    if tcfg.max_steps_per_epoch:
        dataset = dataset.take(steps_per_epoch)
    steps_per_sink, sinks_per_epoch = _sink_plan(
        rt,
        steps_per_epoch,
        profiling=int(cfg.runtime.profile_steps) > 0,
        multiscale=_multiscale(tcfg),
    )

    state = TrainState(
        epochs=epochs,
        steps_per_epoch=steps_per_epoch,
        total_batch=batch * world,
        sinks_per_epoch=sinks_per_epoch,
        start_epoch=start_epoch,
        best_map=best_map,
    )
    state.history = [r for r in _read_history(rt.run_dir) if r["epoch"] <= start_epoch]
    # Every rank evaluates its shard of the val set; rank 0 scores the gathered detections.
    evaluator = _Evaluation(cfg, rt, num_classes, val_src, net, train_step.ema)
    callbacks = _build_callbacks(
        cfg,
        rt,
        state,
        train_step,
        loss,
        net,
        train_src,
        evaluator,
        steps_per_sink,
        num_classes,
        freeze_level,
    )
    log.info(
        "training %s: %d epochs x %d steps, batch %d x %d ranks, lr %.4g, amp %s, %s mode%s",
        cfg.model.name,
        epochs,
        steps_per_epoch,
        batch,
        world,
        base_lr,
        rt.amp_level,
        rt.mode,
        ", data sink" if rt.sink_effective else "",
    )
    if rt.sink and not rt.sink_effective:
        log.info(
            "runtime.sink: MindSpore cannot sink data on %s and feeds each step from "
            "the host instead (same results; LossMonitor/TimeMonitor count real steps)",
            rt.device,
        )

    model = Model(train_step)
    started = time.time()
    try:
        model.train(
            epochs * sinks_per_epoch,
            dataset,
            callbacks=callbacks,
            dataset_sink_mode=rt.sink,
            sink_size=steps_per_sink,
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
    return evaluator.final(state)


def apply_amp(net: nn.Cell, rt: Runtime) -> None:
    """Mixed precision on the network only (the loss computes in float32)."""
    if rt.amp_level == "O0":
        return
    # auto_mixed_precision writes ./rewritten_network/ (its rewrite log): keep it in the run.
    # (os.chdir by hand: contextlib.chdir is Python 3.11+.)
    previous = os.getcwd()
    os.chdir(rt.run_dir)
    try:
        mixed_precision(net, rt.amp_level)
    finally:
        os.chdir(previous)


def mixed_precision(net: nn.Cell, level: str) -> None:
    """MindSpore's AMP at ``level``; at O2 SyncBatchNorm stays in float32 like BatchNorm.

    MindSpore's O2 black list (``ms.amp.get_black_list()``) names BatchNorm1d/2d/3d and
    LayerNorm only, so the SyncBatchNorm layers of ``runtime.sync_bn`` would compute their
    statistics in float16. O2 is a black-list conversion; this is the same one with
    SyncBatchNorm added.
    """
    if level == "O2":
        black_list = ms.amp.get_black_list() + [nn.SyncBatchNorm]
        ms.amp.custom_mixed_precision(net, black_list=black_list)
    else:
        ms.amp.auto_mixed_precision(net, level)


def build_train_step(
    net: nn.Cell,
    loss: YOLOXLoss,
    lrs: np.ndarray,
    tcfg: Any,
    rt: Runtime,
    skip_nonfinite: bool = False,
    img_size: tuple[int, int] | None = None,
) -> TrainStep:
    """The training step Cell: SGD, EMA and loss scaling as configured (bench/ uses it too).

    ``skip_nonfinite``: a NaN/Inf loss updates no weight (see ``TrainStep``). With
    ``img_size`` (the base input size) and ``train.multiscale_range`` > 0, the batch is
    resized inside the step (``engine.multiscale``).
    """
    optimizer = build_optimizer(net, lrs, tcfg)
    ema = ModelEMA(net, float(tcfg.ema_decay)) if tcfg.ema else None
    reducer = None
    if rt.distributed:
        reducer = nn.DistributedGradReducer(optimizer.parameters, mean=True, degree=rt.world_size)
    scale = float(rt.loss_scale) if rt.amp_level != "O0" else 1.0
    net_with_loss = DetectorWithLoss(net, loss)
    if img_size is not None and _multiscale(tcfg)[0] > 0:
        net_with_loss = MultiScaleResize(net_with_loss, img_size)
    step = TrainStep(
        net_with_loss,
        optimizer,
        ema,
        loss_scale=scale,
        dynamic_scale=rt.uses_dynamic_loss_scale,
        clip_norm=tcfg.clip_grad_norm or 0.0,
        grad_reducer=reducer,
        skip_nonfinite=skip_nonfinite,
        float_status=float_status_ops() if rt.float_status else None,
    )
    step.set_train(True)
    return step


def _multiscale(tcfg: Any) -> tuple[int, int]:
    """(train.multiscale_range, train.multiscale_interval); range 0 is off."""
    ms_range = int(tcfg.get("multiscale_range") or 0)
    interval = int(tcfg.get("multiscale_interval", DEFAULT_INTERVAL))
    if ms_range < 0:
        raise ValueError(f"train.multiscale_range must be >= 0 (0 = off), got {ms_range}")
    if interval < 1:
        raise ValueError(f"train.multiscale_interval must be >= 1, got {interval}")
    return ms_range, interval


def _sink_plan(
    rt: Runtime,
    steps_per_epoch: int,
    multiscale: tuple[int, int] = (0, DEFAULT_INTERVAL),
    *,
    profiling: bool = False,
) -> tuple[int, int]:
    """(steps per sink, sinks per epoch). Without real sinking one 'sink' is one epoch.

    ``profiling``: one step per sink, so that the profiler's step boundaries are steps,
    not whole sinks (a profiling run is a diagnostic run; its speed is not the point).
    With multi-scale training a sink runs one size: it must fit in one size window.
    """
    size = int(rt.sink_size)
    if rt.sink_effective and profiling:
        log.info("runtime.profile_steps: one step per sink while profiling")
        return 1, steps_per_epoch
    if rt.sink_effective and multiscale[0] > 0:
        size = sink_steps(multiscale[1], steps_per_epoch, size)
        return size, steps_per_epoch // size
    if not rt.sink_effective or size in (-1, 0, steps_per_epoch):
        return steps_per_epoch, 1
    if size < 0 or steps_per_epoch % size:
        raise ValueError(
            f"runtime.sink_size={size} must be -1 or divide the {steps_per_epoch} steps of an epoch"
        )
    return size, steps_per_epoch // size


def _build_callbacks(
    cfg,
    rt,
    state,
    train_step,
    loss,
    net,
    train_src,
    evaluator,
    steps_per_sink,
    num_classes,
    freeze_level="none",
) -> list:
    tcfg = cfg.train
    cbs = []
    if isinstance(train_step.net_with_loss, MultiScaleResize):
        ms_range, interval = _multiscale(tcfg)
        cbs.append(
            MultiScaleSchedule(
                train_step.net_with_loss,
                ms_range,
                int(cfg.runtime.seed),
                steps_per_sink,
                interval,
                steps_per_call=steps_per_sink if rt.sink_effective else 1,
                compile_graphs=rt.mode == "graph",
            )
        )
    elif rt.mode == "graph" and not rt.sink_effective:  # a sunk graph compiles with its queue
        cbs.append(CompileTrainingGraph())
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
        EvalCallback(state, evaluator.evaluate, int(tcfg.eval_interval), int(tcfg.no_aug_epochs))
    )
    if rt.is_main:
        meta = {
            META_MODEL: str(cfg.model.name),
            META_CLASSES: int(num_classes),
            META_FREEZE: freeze_level_code(freeze_level),  # a resumed run keeps it
        }
        cbs += [
            EpochSummary(state),
            CheckpointCallback(
                state,
                CheckpointManager(os.path.join(rt.run_dir, "checkpoints"), int(tcfg.keep_last)),
                train_step,
                meta,
            ),
            ResultsCallback(state, rt.run_dir),
        ]
        if tcfg.tensorboard:
            cbs.append(
                TensorBoardCallback(
                    state, os.path.join(rt.run_dir, "tensorboard"), evaluator.annotated_images
                )
            )
        if int(tcfg.patience) > 0:
            if rt.distributed:
                log.warning("train.patience: early stopping is not supported with several ranks")
            else:
                cbs.append(EarlyStopping(state, int(tcfg.patience)))
        cbs += [
            LossMonitor(max(1, min(int(tcfg.log_interval), steps_per_sink))),
            TimeMonitor(data_size=steps_per_sink),
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
    return cbs


class _Evaluation:
    """COCO evaluation on the val split with a separate inference copy of the network.

    The training network stays in training mode; before each evaluation its EMA weights
    (or raw weights without EMA) are copied into the inference copy. With several ranks
    every rank evaluates its shard and rank 0 scores the gathered detections, so no rank
    waits in the next step's AllReduce while rank 0 evaluates alone (HCCL_EXEC_TIMEOUT).
    """

    def __init__(
        self, cfg, rt: Runtime, num_classes: int, source, net: nn.Cell, ema: ModelEMA | None
    ):
        self.source = source
        self.run_dir = rt.run_dir
        self.is_main = rt.is_main
        self.distributed = rt.distributed
        self.num_vis = int(cfg.train.vis_images)
        self.eval_net = build_model(cfg.model, num_classes)
        self.detector = InferenceNet(self.eval_net)
        self.nms = build_nms(cfg.eval, num_classes)
        self.dataset = build_eval_dataset(
            cfg.data, source, cfg.eval.img_size, int(cfg.eval.batch_size), rt.rank, rt.world_size
        )
        self.gather = RankGather() if rt.distributed else None
        if rt.distributed:
            own = eval_positions(len(source), int(cfg.eval.batch_size), rt.rank, rt.world_size)
            log.info(
                "evaluation: rank %d evaluates %d of %d val images; rank 0 scores them all",
                rt.rank,
                int((own >= 0).sum()),
                len(source),
            )
        self.sources = {p.name: p for p in net.get_parameters()}
        if ema is not None:
            self.sources = {p.name[len("ema.") :]: p for p in ema.averages}
        self.kept: list = []
        self.last_epoch_metrics: tuple[int, dict] | None = None

    def _load(self, weights: dict) -> None:
        for param in self.eval_net.get_parameters():
            param.set_data(weights[param.name].value().astype(param.dtype))

    def _run(self, out_dir: str, verbose: bool) -> dict[str, Any] | None:
        """Metrics on rank 0; None on the other ranks (they only contribute detections).

        ``verbose``: print pycocotools' summary and the per-class table (the final
        evaluation); during training the epoch line carries mAP and mAP50 and the full
        summary is only written to ``<out_dir>/coco_summary.txt``.
        """
        metrics, self.kept = evaluate_on_dataset(
            self.detector,
            self.nms,
            self.dataset,
            self.source,
            out_dir if self.is_main else None,
            keep_images=self.num_vis,
            gather=self.gather,
            verbose=verbose,
        )
        return metrics

    def evaluate(self, epoch: int) -> dict[str, Any] | None:
        """Evaluate the current (EMA) weights; outputs in <run dir>/eval/ (rank 0)."""
        self._load(self.sources)
        metrics = self._run(os.path.join(self.run_dir, "eval"), verbose=False)
        self.last_epoch_metrics = (epoch, metrics)
        return metrics

    def final(self, state: TrainState) -> dict[str, Any]:
        """Evaluate best.ckpt (EMA weights) into <run dir>/metrics.json, reusing the last
        evaluation when it was the best one. Returns {} on ranks other than 0."""
        best = os.path.join(self.run_dir, "checkpoints", BEST)
        if self.distributed:
            # Rank 0 wrote best.ckpt; every rank reads it once rank 0 is here too. Whether
            # the last evaluation was the best is known on rank 0 only: evaluate again.
            self.gather(np.zeros(1, np.float32))
        if not os.path.isfile(best):
            log.warning(
                "no best.ckpt (no evaluation improved mAP): final metrics of the last weights"
            )
            self._load(self.sources)
            return self._run(self.run_dir, verbose=True) or {}
        if self.last_epoch_metrics and state.is_best and not self.distributed:
            src = os.path.join(self.run_dir, "eval")
            for name in ("metrics.json", "detections.json", SUMMARY_FILE):
                shutil.copy(os.path.join(src, name), os.path.join(self.run_dir, name))
            with open(os.path.join(self.run_dir, SUMMARY_FILE), encoding="utf-8") as f:
                print(f.read().rstrip())
            metrics = self.last_epoch_metrics[1]
        else:
            self._load({k: v for k, v in network_weights(read_checkpoint(best)).items()})
            metrics = self._run(self.run_dir, verbose=True)
        if metrics is None:
            return {}
        log.info(
            "final (best.ckpt): mAP %.4f  mAP50 %.4f  -> %s",
            metrics["mAP"],
            metrics["mAP50"],
            os.path.join(self.run_dir, "metrics.json"),
        )
        return metrics

    def annotated_images(self, epoch: int) -> list[tuple[str, np.ndarray]]:
        """The first validation images with their predicted boxes (RGB), for TensorBoard."""
        from engine.evaluator import detections_to_original

        out = []
        for index, dets, count, scale in self.kept:
            info = self.source.image_info(index)
            try:
                img, _, _ = self.source.load(index)
            except OSError:
                continue
            hw = (info["height"], info["width"])
            xywh, scores, labels = detections_to_original(dets, count, scale, hw)
            xyxy = np.concatenate((xywh[:, :2], xywh[:, :2] + xywh[:, 2:]), 1)
            drawn = draw_boxes(img, xyxy, labels, self.source.class_names, scores)
            out.append((f"val/{info['file_name']}", cv2.cvtColor(drawn, cv2.COLOR_BGR2RGB)))
        return out


def _read_history(run_dir: str) -> list[dict[str, Any]]:
    path = os.path.join(run_dir, "results.csv")
    if not os.path.isfile(path):
        return []
    with open(path, encoding="utf-8") as f:
        return [
            {k: (int(v) if k == "epoch" else float(v)) for k, v in row.items()}
            for row in csv.DictReader(f)
        ]


def _carry_history(ckpt_path: str, run_dir: str) -> None:
    """Resuming another run's checkpoint: bring its results.csv into this run folder."""
    old_dir = os.path.dirname(os.path.dirname(os.path.abspath(ckpt_path)))
    src, dst = os.path.join(old_dir, "results.csv"), os.path.join(run_dir, "results.csv")
    if os.path.abspath(old_dir) != os.path.abspath(run_dir) and os.path.isfile(src):
        shutil.copy(src, dst)
