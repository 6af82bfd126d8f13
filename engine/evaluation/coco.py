"""COCO bbox evaluation of msdet detections with pycocotools.

Detections arrive as :class:`ops.nms.BatchedNMS` produces them, in letterboxed input pixels
(``dets [B, max_det, 6]``: x1, y1, x2, y2, score, class index; ``counts [B]``). Boxes are
mapped back to the original image (the letterbox puts the image at the top-left, scaled by
``scale``, as YOLOX), clipped to it, converted to COCO ``[x, y, w, h]`` and labelled with
the dataset's category ids, which may be non-contiguous (COCO's 1..90 with gaps).
"""

from __future__ import annotations

import contextlib
import copy
import io
import json
import logging
import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from pycocotools.coco import COCO
from pycocotools.cocoeval import COCOeval

from msdet.engine.evaluation.detections import prediction_records
from msdet.engine.evaluation.speed import SpeedMeter, format_speed

log = logging.getLogger(__name__)

DETECTIONS_FILE = "detections.json"
METRICS_FILE = "metrics.json"
SUMMARY_FILE = "coco_summary.txt"  # pycocotools' summary, the per-class table, the speed line
# COCOeval.stats positions of the AP values msdet reports.
AP_KEYS = ("mAP", "mAP50", "mAP75", "mAP_small", "mAP_medium", "mAP_large")


class CocoEvaluator:
    """Collects detections batch by batch and evaluates them against COCO ground truth.

    Args:
        coco_gt: the split's ground truth (pycocotools ``COCO``).
        category_ids: ``category_ids[label]`` is the dataset category id of training class
            ``label`` (e.g. ``data.coco.CocoSource.category_ids``).
        class_names: names per training class for the per-class table; default: the
            category names in ``coco_gt``.
        out_dir: where ``detections.json`` and ``metrics.json`` are written.
    """

    def __init__(
        self,
        coco_gt: COCO,
        category_ids: Sequence[int],
        class_names: Sequence[str] | None = None,
        out_dir: str = ".",
    ):
        unknown = [c for c in category_ids if c not in coco_gt.cats]
        if unknown:
            raise ValueError(
                f"category ids {unknown} are not in the ground truth (it has "
                f"{sorted(coco_gt.cats)}); the model's classes do not match this dataset"
            )
        if len(set(category_ids)) != len(category_ids):
            raise ValueError(f"category ids must be unique, got {list(category_ids)}")
        if class_names is None:
            class_names = [coco_gt.cats[c]["name"] for c in category_ids]
        if len(class_names) != len(category_ids):
            raise ValueError(f"{len(class_names)} class names for {len(category_ids)} category ids")
        self.coco_gt = coco_gt
        self.category_ids = [int(c) for c in category_ids]
        self.class_names = [str(n) for n in class_names]
        self.out_dir = out_dir
        self.reset()

    def reset(self) -> None:
        """Drop the collected detections (e.g. before the next epoch's evaluation)."""
        self.results: list[dict[str, Any]] = []
        self.image_ids: list[int] = []

    def update(
        self,
        dets: np.ndarray,
        counts: np.ndarray,
        image_ids: Sequence[int],
        scales: np.ndarray,
        orig_sizes: np.ndarray,
    ) -> None:
        """Add one batch: ``dets [B, max_det, 6]``, ``counts [B]``, COCO image ids ``[B]``,
        letterbox scales ``[B]`` and original sizes ``[B, 2]`` (h, w).

        Images without detections count too: they are evaluated (missed objects lower AP).
        """
        dets = np.asarray(dets)
        counts = np.asarray(counts).reshape(-1)
        scales = np.asarray(scales, dtype=np.float64).reshape(-1)
        orig_sizes = np.asarray(orig_sizes).reshape(-1, 2)
        if not len(dets) == len(counts) == len(image_ids) == len(scales) == len(orig_sizes):
            raise ValueError(
                f"batch sizes differ: dets {len(dets)}, counts {len(counts)}, image_ids "
                f"{len(image_ids)}, scales {len(scales)}, orig_sizes {len(orig_sizes)}"
            )
        for i, img_id in enumerate(image_ids):
            self.image_ids.append(int(img_id))
            records = prediction_records(
                dets[i], counts[i], scales[i], orig_sizes[i], self.category_ids, self.class_names
            )
            for rec in records:  # COCO results format: no name, but the image id
                del rec["category_name"]
                rec["image_id"] = int(img_id)
            self.results.extend(records)

    def evaluate(
        self,
        speed: Mapping[str, float] | SpeedMeter | None = None,
        verbose: bool = True,
        plots: bool = False,
    ) -> dict[str, Any]:
        """Write ``detections.json``, run COCOeval (bbox), write ``metrics.json`` and the
        summary (``coco_summary.txt``: pycocotools' twelve lines, the per-class table, the
        speed). With ``verbose`` the console gets the short form (:func:`short_summary`)
        and the log file the whole summary. With
        ``plots``, also the confusion matrix and the PR, P, R and F1 curves
        (``engine.evaluation.plots``) beside them, and their figures (best-F1 confidence, the
        matrix's IoU and confidence) in ``metrics["analysis"]``.

        ``speed``: ms per image per stage (or a :class:`SpeedMeter`) for the speed line.
        Returns the metrics: ``mAP`` (IoU 0.50:0.95), ``mAP50``, ``mAP75``, ``mAP_small``,
        ``mAP_medium``, ``mAP_large``, ``per_class`` ({name: AP}), ``per_class_AP50``
        ({name: AP at IoU 0.5}), ``images``,
        ``detections`` (and ``speed_ms`` when measured: ms per image waiting for data,
        in inference and in NMS). APs are fractions in [0, 1]; -1 means
        the evaluated images hold no ground truth of that kind (COCO's convention).
        """
        if not self.image_ids:
            raise RuntimeError("CocoEvaluator.evaluate: no images were added with update()")
        os.makedirs(self.out_dir, exist_ok=True)
        det_path = os.path.join(self.out_dir, DETECTIONS_FILE)
        with open(det_path, "w", encoding="utf-8") as f:
            json.dump(self.results, f)

        coco_eval = self._run_cocoeval(det_path)
        summary = io.StringIO()
        with contextlib.redirect_stdout(summary):
            coco_eval.summarize()
        per_class = dict(zip(self.class_names, per_class_ap(coco_eval, self.category_ids)))
        per_class50 = dict(
            zip(self.class_names, per_class_ap(coco_eval, self.category_ids, iou_threshold=0.5))
        )

        metrics: dict[str, Any] = {k: float(v) for k, v in zip(AP_KEYS, coco_eval.stats[:6])}
        metrics["per_class"] = per_class
        metrics["per_class_AP50"] = per_class50
        metrics["images"] = len(set(self.image_ids))
        metrics["detections"] = len(self.results)
        table = ["Per-class AP (IoU 0.50:0.95) and AP50:", format_ap_table(per_class, per_class50)]
        if speed is not None:
            ms = speed.ms_per_image() if isinstance(speed, SpeedMeter) else dict(speed)
            if ms is not None:
                metrics["speed_ms"] = ms
            table.append(format_speed(ms))
        if not self.results:
            table.insert(0, "No detections: AP is 0 wherever there is ground truth.")
        text = "\n".join([summary.getvalue().rstrip(), *table])
        with open(os.path.join(self.out_dir, SUMMARY_FILE), "w", encoding="utf-8") as f:
            f.write(text + "\n")
        if verbose:
            log.debug("COCO evaluation (%s):\n%s", SUMMARY_FILE, text)
            log.info("%s", short_summary(metrics, table))

        if plots:
            from msdet.engine.evaluation.plots import write_evaluation_plots

            drawn = write_evaluation_plots(
                self.coco_gt.dataset,
                self.results,
                self.category_ids,
                self.class_names,
                self.out_dir,
                sorted(set(self.image_ids)),
            )
            metrics["analysis"] = {k: v for k, v in drawn.summary.items() if k != "files"}
        with open(os.path.join(self.out_dir, METRICS_FILE), "w", encoding="utf-8") as f:
            json.dump(metrics, f, indent=2)
        return metrics

    def _run_cocoeval(self, det_path: str) -> COCOeval:
        # loadRes cannot take an empty list; an empty result set evaluates to AP 0.
        with contextlib.redirect_stdout(io.StringIO()):  # pycocotools prints progress
            if self.results:
                coco_dt = self.coco_gt.loadRes(det_path)
            else:
                coco_dt = COCO()
                coco_dt.dataset = {
                    "images": copy.deepcopy(self.coco_gt.dataset.get("images", [])),
                    "categories": copy.deepcopy(self.coco_gt.dataset.get("categories", [])),
                    "annotations": [],
                }
                coco_dt.createIndex()
            coco_eval = COCOeval(self.coco_gt, coco_dt, "bbox")
            # Only what was evaluated: a partial pass (e.g. a quick eval during training)
            # must not count the skipped images' objects as misses.
            coco_eval.params.imgIds = sorted(set(self.image_ids))
            coco_eval.params.catIds = self.category_ids
            coco_eval.evaluate()
            coco_eval.accumulate()
        return coco_eval


def per_class_ap(
    coco_eval: COCOeval, category_ids: Sequence[int], iou_threshold: float | None = None
) -> list[float]:
    """AP (all areas, 100 detections) per category, in ``category_ids`` order.

    Averaged over IoU 0.50:0.95, or at the one ``iou_threshold`` given (0.5: AP50).
    -1 for a category without ground truth in the evaluated images.
    """
    precision = coco_eval.eval["precision"]  # [IoU, recall, category, area, max dets]
    if iou_threshold is not None:
        matches = np.flatnonzero(np.isclose(coco_eval.params.iouThrs, iou_threshold))
        if matches.size != 1:
            raise ValueError(f"COCOeval did not evaluate IoU {iou_threshold}")
        precision = precision[matches]
    position = {c: k for k, c in enumerate(coco_eval.params.catIds)}
    aps = []
    for cat_id in category_ids:
        p = precision[:, :, position[cat_id], 0, -1]
        p = p[p > -1]
        aps.append(float(p.mean()) if p.size else -1.0)
    return aps


def short_summary(metrics: Mapping[str, Any], extra: Sequence[str] = ()) -> str:
    """The console's form of an evaluation: the headline APs on one line (COCO's -1, no
    ground truth of that size, as ``-``), then ``extra`` lines (the per-class table, the
    speed)."""

    def ap(key: str) -> str:
        value = float(metrics[key])
        return "-" if value < 0 else f"{value:.3f}"

    head = (
        f"mAP {ap('mAP')}  mAP50 {ap('mAP50')}  mAP75 {ap('mAP75')}  (small {ap('mAP_small')}, "
        f"medium {ap('mAP_medium')}, large {ap('mAP_large')})  {metrics['images']} images, "
        f"{metrics['detections']} detections"
    )
    return "\n".join([head, *extra])


def format_ap_table(
    per_class: Mapping[str, float],
    per_class50: Mapping[str, float] | None = None,
    columns: int = 3,
) -> str:
    """A plain text table of ``name AP [AP50]`` cells, ``columns`` cells per row."""
    if not per_class:
        return "(no classes)"
    width = max(len(name) for name in per_class)
    if per_class50 is None:
        cells = [f"{name:<{width}}  {ap:6.3f}" for name, ap in per_class.items()]
    else:
        columns = max(1, columns - 1)  # wider cells
        cells = [
            f"{name:<{width}}  AP {ap:6.3f}  AP50 {per_class50[name]:6.3f}"
            for name, ap in per_class.items()
        ]
    rows = [" | ".join(cells[i : i + columns]) for i in range(0, len(cells), columns)]
    return "\n".join(rows)
