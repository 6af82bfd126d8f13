"""Evaluation during training: a separate inference copy of the network, scored on the val
split every evaluation epoch, and the final evaluation of ``best.ckpt``.

The training network stays in training mode; before each evaluation its EMA weights (or
raw weights without EMA) are copied into the inference copy. With several ranks every rank
evaluates its shard of the val set and rank 0 scores the gathered detections, so no rank
waits in the next step's AllReduce while rank 0 evaluates alone (HCCL_EXEC_TIMEOUT); the
scores are the same as one rank's (``tests/e2e/test_distributed.py``).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from collections.abc import Callable
from typing import Any

import cv2
import numpy as np
from mindspore import nn

from msdet.data.pipeline import build_eval_dataset, eval_positions
from msdet.engine.evaluation.coco import DETECTIONS_FILE, METRICS_FILE, SUMMARY_FILE, short_summary
from msdet.engine.evaluation.detections import detections_in_image
from msdet.engine.evaluation.loop import RankGather, evaluate_on_dataset
from msdet.engine.evaluation.plots import FILES as PLOT_FILES
from msdet.engine.evaluation.plots import plot_val_predictions
from msdet.engine.evaluation.val_loss import ValidationLoss
from msdet.engine.runtime.ascend import nms_on_host
from msdet.engine.runtime.mindspore_compat import write_parameter
from msdet.engine.training.checkpoints import BEST
from msdet.engine.training.ema import ModelEMA
from msdet.models.inference import InferenceNet, build_nms
from msdet.models.weights import network_weights, read_checkpoint
from msdet.models.yolox import build_model

log = logging.getLogger("train")

VAL_GRID = "val_predictions.jpg"  # the latest evaluation's val images, truth beside predictions


class TrainingEvaluation:
    """COCO evaluation of the weights being trained, in the run folder.

    ``evaluate(epoch)`` scores the current (EMA) weights into ``<run dir>/eval/`` (with the
    loss on the val split in a single-process run: ``engine.evaluation.val_loss``) with the
    evaluation plots (confusion matrix, PR/P/R/F1 curves) and writes
    ``<run dir>/val_predictions.jpg``: the first ``train.vis_images`` val images, ground
    truth beside the predictions at the confusion matrix's confidence. ``final(is_best)``
    scores ``best.ckpt`` into the run folder itself, plots included. ``tensorboard_images``
    hands the latest pictures to TensorBoard. Returns metrics on rank 0 and None on the
    other ranks, which only contribute detections.
    """

    def __init__(
        self,
        cfg,
        rt,
        num_classes: int,
        source,
        net: nn.Cell,
        ema: ModelEMA | None,
        compile_cell: Callable[[nn.Cell], nn.Cell] | None = None,
    ):
        self.source = source
        self.run_dir = rt.run_dir
        self.is_main = rt.is_main
        self.distributed = rt.distributed
        self.num_vis = int(cfg.train.vis_images)
        self.eval_net = build_model(cfg.model, num_classes, rt.kernels)
        self.detector = InferenceNet(self.eval_net)
        self.nms = build_nms(
            cfg.eval,
            num_classes,
            on_host=nms_on_host(rt, cfg.eval, num_classes, cfg.eval.img_size),
            kernels=rt.kernels,
            max_boxes=rt.nms_max_boxes,
        )
        if compile_cell is not None:  # the training loop's compile (TrainLoop.compile_eval)
            self.detector = compile_cell(self.detector)
            if isinstance(self.nms, nn.Cell):
                self.nms = compile_cell(self.nms)
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
        self.net, self.ema = net, ema
        self.kept: list = []
        self.last_metrics: dict[str, Any] | None = None
        # The loss on the val split (results.csv, results.png); one process only: each rank
        # sees its shard's batches, and only detections are gathered. Not with the compile
        # cache: MindSpore names cached graphs by compile order, and this graph, compiled at
        # the first evaluation, shifts the order between a run and its resumption.
        self.val_loss = None
        if bool(cfg.runtime.compile_cache):
            log.info(
                "runtime.compile_cache: the val loss is not computed (results.csv leaves it empty)"
            )
        elif not rt.distributed:
            self.val_loss = ValidationLoss(
                source,
                num_classes,
                tuple(cfg.eval.img_size),
                self.eval_net.head.strides,
                int(cfg.data.max_objects),
                cfg.train,
                rt.kernels,
            )

    def finished_run(self, epochs: int, accepted: Callable[[], None] | None = None) -> dict:
        """A resumed run that had trained all its epochs: its final metrics (the folder left
        as it is), or, when a kill stopped it before they were written, its final evaluation
        now (``accepted()`` first)."""
        path = os.path.join(self.run_dir, METRICS_FILE)
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
        return self.final(last_was_best=False)

    def _current_weights(self) -> dict:
        """The weights training has reached: the EMA's averages, else the network's own."""
        if self.ema is not None:
            return self.ema.named_averages()
        return {p.name: p.asnumpy() for p in self.net.get_parameters()}

    def _load(self, weights: dict) -> None:
        """Copy ``weights`` (name -> array, Tensor or Parameter) into the evaluation network."""
        for param in self.eval_net.get_parameters():
            value = weights[param.name]
            value = value.asnumpy() if hasattr(value, "asnumpy") else np.asarray(value)
            write_parameter(param, value)

    def _run(
        self, out_dir: str, verbose: bool, val_loss: ValidationLoss | None = None
    ) -> dict[str, Any] | None:
        """Metrics on rank 0; None on the other ranks.

        ``verbose``: print pycocotools' summary and the per-class table (the final
        evaluation); during training the epoch line carries mAP and mAP50 and the full
        summary is only written to ``<out_dir>/coco_summary.txt``. ``val_loss``: also the
        loss on the val split (``metrics["val_loss"]``).
        """
        if val_loss is not None:
            val_loss.reset()
        metrics, self.kept = evaluate_on_dataset(
            self.detector,
            self.nms,
            self.dataset,
            self.source,
            out_dir if self.is_main else None,
            keep_images=self.num_vis,
            gather=self.gather,
            verbose=verbose,
            plots=True,
            val_loss=val_loss,
        )
        return metrics

    def evaluate(self, epoch: int) -> dict[str, Any] | None:
        """Evaluate the current (EMA) weights; outputs in <run dir>/eval/ (rank 0)."""
        self._load(self._current_weights())
        self.last_metrics = self._run(
            os.path.join(self.run_dir, "eval"), verbose=False, val_loss=self.val_loss
        )
        if self.last_metrics is not None and self.kept:
            conf = float(self.last_metrics["analysis"]["confusion_matrix_conf"])
            plot_val_predictions(
                self._samples(), self.source.class_names, os.path.join(self.run_dir, VAL_GRID), conf
            )
        return self.last_metrics

    def _samples(self) -> list[tuple]:
        """The kept val images with their ground truth and predictions, in their pixels."""
        samples = []
        for index, dets, count, scale in self.kept:
            try:
                img, gt_boxes, gt_labels = self.source.load(index)
            except OSError:
                continue
            xyxy, scores, labels = detections_in_image(dets, count, scale, img.shape[:2])
            samples.append((img, gt_boxes, gt_labels, xyxy, scores, labels))
        return samples

    def final(self, last_was_best: bool) -> dict[str, Any]:
        """Evaluate best.ckpt (EMA weights) into <run dir>/metrics.json, reusing the last
        evaluation when it was the best one (``last_was_best``). Returns {} on ranks other
        than 0."""
        best = os.path.join(self.run_dir, "checkpoints", BEST)
        if self.distributed:
            # Rank 0 wrote best.ckpt; every rank reads it once rank 0 is here too. Whether
            # the last evaluation was the best is known on rank 0 only: evaluate again.
            self.gather(np.zeros(1, np.float32))
        if not os.path.isfile(best):
            log.warning(
                "no best.ckpt (no evaluation improved mAP): final metrics of the last weights"
            )
            self._load(self._current_weights())
            return self._run(self.run_dir, verbose=True) or {}
        if self.last_metrics and last_was_best and not self.distributed:
            src = os.path.join(self.run_dir, "eval")
            for name in (METRICS_FILE, DETECTIONS_FILE, SUMMARY_FILE, *PLOT_FILES.values()):
                shutil.copy(os.path.join(src, name), os.path.join(self.run_dir, name))
            with open(os.path.join(self.run_dir, SUMMARY_FILE), encoding="utf-8") as f:
                text = f.read().rstrip()
            log.debug("COCO evaluation (%s):\n%s", SUMMARY_FILE, text)
            # The console's short form: the headline, then the summary's lines after
            # pycocotools' twelve (the per-class table, the speed).
            log.info("%s", short_summary(self.last_metrics, text.splitlines()[12:]))
            metrics = self.last_metrics
        else:
            self._load(network_weights(read_checkpoint(best)))
            metrics = self._run(self.run_dir, verbose=True)
        if metrics is None:
            return {}
        log.info(
            "final (best.ckpt): mAP %.4f  mAP50 %.4f  -> %s",
            metrics["mAP"],
            metrics["mAP50"],
            os.path.join(self.run_dir, METRICS_FILE),
        )
        return metrics

    def tensorboard_images(self, epoch: int) -> list[tuple[str, np.ndarray]]:
        """The latest evaluation's pictures (RGB): the val grid and the six plots."""
        out = []
        for tag, path in [("val/predictions", os.path.join(self.run_dir, VAL_GRID))] + [
            (f"plots/{name}", os.path.join(self.run_dir, "eval", file))
            for name, file in PLOT_FILES.items()
        ]:
            image = cv2.imread(path) if os.path.isfile(path) else None
            if image is not None:
                out.append((tag, cv2.cvtColor(image, cv2.COLOR_BGR2RGB)))
        return out
