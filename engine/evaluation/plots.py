"""Evaluation plots as Ultralytics users know them, written as PNG and returned as RGB.

:func:`write_evaluation_plots` is the one call: from COCO ground truth and detections it
writes ``confusion_matrix.png``, ``confusion_matrix_normalized.png``, ``PR_curve.png``,
``P_curve.png``, ``R_curve.png`` and ``F1_curve.png`` and returns the numbers for
``metrics.json`` with the pictures as HWC uint8 RGB arrays (what tensorboardX's
``add_image(..., dataformats="HWC")`` takes). :func:`plot_val_predictions` draws ground
truth beside predictions for a few validation images.

Figures are drawn on matplotlib's Agg canvas directly (no pyplot): no global backend
switch, no figure left open, and the PNG written is exactly the array returned. No
MindSpore import.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import cv2
import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from msdet.data.visualize import draw_boxes
from msdet.engine.evaluation.analysis import (
    PR_IOU,
    RECALL_THRESHOLDS,
    ConfidenceCurves,
    EvaluationAnalysis,
    analyse_detections,
    normalize_confusion,
)

FILES = {
    "confusion_matrix": "confusion_matrix.png",
    "confusion_matrix_normalized": "confusion_matrix_normalized.png",
    "PR_curve": "PR_curve.png",
    "P_curve": "P_curve.png",
    "R_curve": "R_curve.png",
    "F1_curve": "F1_curve.png",
}
VAL_PREDICTIONS_FILE = "val_predictions.jpg"
# The val grid: image pairs per row, each image scaled into a square cell (16 pairs make a
# 1,950 x 1,100 px picture), a title band, a caption strip above each image, and gaps.
VAL_GRID_CELL = 240
VAL_GRID_PAIRS_PER_ROW = 4
VAL_GRID_TITLE = 30  # per line of the title (wrapped to the picture's width)
VAL_GRID_CAPTION = 20
VAL_GRID_GAP = 4
VAL_GRID_PAIR_GAP = 12
# The lowest score the val grid draws predictions at: predict.py's default threshold.
VAL_GRID_CONF_FLOOR = 0.25
DPI = 100
CURVE_SIZE = (9.0, 6.0)  # inches: 900 x 600 px
# Up to this many classes a matrix shows every cell's number; beyond, colour alone.
ANNOTATE_MAX_CLASSES = 30
MATRIX_SIZE_SMALL = (10.0, 8.5)
MATRIX_SIZE_LARGE = (16.0, 14.0)  # 80 COCO classes: ~13 px per cell, names at 6 pt
# Up to this many classes each curve is named in the legend; beyond, thin grey lines.
LEGEND_MAX_CLASSES = 10
MEAN_STYLE = {"color": "tab:blue", "linewidth": 3.0}
RULE_TEXT = {"best_f1": "best F1", "fixed": "fixed", "fallback": "fallback: no best F1"}


@dataclass
class EvaluationPlots:
    """What :func:`write_evaluation_plots` made.

    ``summary``: JSON-ready numbers (the best-F1 figures, the thresholds used and
    ``files``: name -> path); ``images``: name -> HWC uint8 RGB, the same pictures;
    ``analysis``: the arrays behind them.
    """

    summary: dict[str, Any]
    images: dict[str, np.ndarray] = field(repr=False)
    analysis: EvaluationAnalysis = field(repr=False)


def figure_to_rgb(fig: Figure) -> np.ndarray:
    """Render ``fig`` (Agg) to an HWC uint8 RGB array."""
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    return np.ascontiguousarray(np.asarray(canvas.buffer_rgba())[..., :3])


def save_rgb(rgb: np.ndarray, path: str) -> None:
    """Write an RGB array as an image file (format from the extension)."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    if not cv2.imwrite(path, cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR)):
        raise OSError(f"could not write {path}")


def _finish(fig: Figure, path: str | None) -> np.ndarray:
    rgb = figure_to_rgb(fig)
    if path is not None:
        save_rgb(rgb, path)
    return rgb


def plot_confusion_matrix(
    matrix: np.ndarray,
    class_names: Sequence[str],
    path: str | None,
    iou_threshold: float,
    conf: float,
    conf_rule: str = "fixed",
    normalize: bool = False,
) -> np.ndarray:
    """Draw a ``[K + 1, K + 1]`` matrix (rows predicted, columns true, last = background)
    with :func:`confusion_matrix_figure`; writes ``path`` (unless None) and returns the
    picture as RGB."""
    fig = confusion_matrix_figure(matrix, class_names, iou_threshold, conf, conf_rule, normalize)
    return _finish(fig, path)


def confusion_matrix_figure(
    matrix: np.ndarray,
    class_names: Sequence[str],
    iou_threshold: float,
    conf: float,
    conf_rule: str = "fixed",
    normalize: bool = False,
) -> Figure:
    """The confusion matrix figure, its IoU and score threshold in the title.

    ``normalize``: each column divided by its sum (where each true class's boxes went).
    Cell numbers are written up to :data:`ANNOTATE_MAX_CLASSES` classes.
    """
    matrix = np.asarray(matrix)
    k = len(class_names)
    if matrix.shape != (k + 1, k + 1):
        raise ValueError(f"matrix shape {matrix.shape} does not fit {k} classes + background")
    values = normalize_confusion(matrix, axis=0) if normalize else matrix.astype(np.float64)
    shown = np.where(values > 0, values, np.nan)  # empty cells stay white
    large = k > ANNOTATE_MAX_CLASSES
    fig = Figure(figsize=MATRIX_SIZE_LARGE if large else MATRIX_SIZE_SMALL, dpi=DPI)
    ax = fig.add_subplot()
    image = ax.imshow(
        shown, cmap="Blues", vmin=0.0, vmax=1.0 if normalize else max(1.0, np.nanmax(values))
    )
    fig.colorbar(image, ax=ax, fraction=0.046, pad=0.03)
    names = [*map(str, class_names), "background"]
    fontsize = 6 if large else 9
    ax.set_xticks(range(k + 1), names, rotation=90, fontsize=fontsize)
    ax.set_yticks(range(k + 1), names, fontsize=fontsize)
    ax.set_xlabel("True")
    ax.set_ylabel("Predicted")
    if not large:
        for (r, c), v in np.ndenumerate(values):
            if v > 0:
                text = f"{v:.2f}" if normalize else f"{int(v)}"
                colour = "white" if v > 0.5 * (1.0 if normalize else values.max()) else "black"
                ax.text(c, r, text, ha="center", va="center", fontsize=8, color=colour)
    kind = "normalised by true class (columns sum to 1)" if normalize else "counts"
    ax.set_title(
        f"Confusion matrix, {kind}: rows predicted, columns true\n"
        f"IoU >= {iou_threshold:.2f}, conf >= {conf:.3f} ({RULE_TEXT.get(conf_rule, conf_rule)})",
        fontsize=11,
    )
    fig.tight_layout()
    return fig


def _class_lines(ax: Any, x: np.ndarray, rows: np.ndarray, labels: Sequence[str]) -> None:
    """Per-class curves: coloured and named when few, thin grey when many."""
    named = len(rows) <= LEGEND_MAX_CLASSES
    for row, label in zip(rows, labels):
        if named:
            ax.plot(x, row, linewidth=1.0, label=label)
        else:
            ax.plot(x, row, linewidth=0.7, color="grey", alpha=0.4)


def plot_pr_curve(
    precision: np.ndarray,
    class_names: Sequence[str],
    path: str | None,
    iou_threshold: float = PR_IOU,
) -> np.ndarray:
    """:func:`pr_curve_figure` written to ``path`` (unless None) and returned as RGB."""
    return _finish(pr_curve_figure(precision, class_names, iou_threshold), path)


def pr_curve_figure(
    precision: np.ndarray, class_names: Sequence[str], iou_threshold: float = PR_IOU
) -> Figure:
    """Precision against COCO's 101 recall points per class (``-1`` rows: no ground truth,
    left out) and their mean in bold, labelled with AP50 and mAP50."""
    precision = np.asarray(precision, dtype=np.float64)
    valid = precision[:, 0] > -1
    fig = Figure(figsize=CURVE_SIZE, dpi=DPI)
    ax = fig.add_subplot()
    labels = [f"{n} {ap:.3f}" for n, ap in zip(class_names, precision.mean(1))]
    _class_lines(ax, RECALL_THRESHOLDS, precision[valid], [x for x, v in zip(labels, valid) if v])
    if valid.any():
        mean = precision[valid].mean(0)
        ax.plot(
            RECALL_THRESHOLDS,
            mean,
            label=f"all classes {mean.mean():.3f} mAP@{iou_threshold:.2f}",
            **MEAN_STYLE,
        )
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1.02)
    ax.set_xlabel("Recall")
    ax.set_ylabel("Precision")
    ax.set_title(f"Precision-recall at IoU {iou_threshold:.2f} (COCO 101-point, as mAP50)")
    ax.grid(alpha=0.3)
    ax.legend(loc="lower left", fontsize=8)
    fig.tight_layout()
    return fig


def plot_confidence_curve(
    curves: ConfidenceCurves,
    metric: str,
    class_names: Sequence[str],
    path: str | None,
    best_conf: float | None = None,
    iou_threshold: float = PR_IOU,
) -> np.ndarray:
    """:func:`confidence_curve_figure` written to ``path`` (unless None), returned as RGB."""
    fig = confidence_curve_figure(curves, metric, class_names, best_conf, iou_threshold)
    return _finish(fig, path)


def confidence_curve_figure(
    curves: ConfidenceCurves,
    metric: str,
    class_names: Sequence[str],
    best_conf: float | None = None,
    iou_threshold: float = PR_IOU,
) -> Figure:
    """``metric`` (``precision``, ``recall`` or ``f1``) against the score threshold, per
    class and the mean in bold, with the best-F1 threshold marked and its value in the
    mean's label."""
    title = {"precision": "Precision", "recall": "Recall", "f1": "F1"}[metric]
    values = getattr(curves, metric)
    fig = Figure(figsize=CURVE_SIZE, dpi=DPI)
    ax = fig.add_subplot()
    names = [n for n, v in zip(class_names, curves.valid) if v]
    _class_lines(ax, curves.conf, values[curves.valid], names)
    if curves.valid.any():
        mean = curves.mean(metric)
        label = "all classes"
        if best_conf is not None:
            i = int(np.argmin(np.abs(curves.conf - best_conf)))
            label += f" {mean[i]:.2f} at {best_conf:.3f}"
            ax.axvline(
                best_conf, color="tab:red", linestyle="--", linewidth=1.0, label="best F1 conf"
            )
        ax.plot(curves.conf, mean, label=label, **MEAN_STYLE)
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1.02)
    ax.set_xlabel("Confidence (score threshold)")
    ax.set_ylabel(title)
    ax.set_title(f"{title}-confidence at IoU {iou_threshold:.2f}")
    ax.grid(alpha=0.3)
    ax.legend(loc="lower left" if metric == "recall" else "best", fontsize=8)
    fig.tight_layout()
    return fig


def write_evaluation_plots(
    gt_dataset: Mapping[str, Any],
    detections: Sequence[Mapping[str, Any]],
    category_ids: Sequence[int],
    class_names: Sequence[str],
    out_dir: str,
    image_ids: Sequence[int] | None = None,
    matrix_conf: float | None = None,
) -> EvaluationPlots:
    """Analyse detections (:func:`engine.evaluation.analysis.analyse_detections`) and write the six
    plots of :data:`FILES` into ``out_dir``.

    ``gt_dataset``: COCO dataset dict (``CocoEvaluator.coco_gt.dataset``); ``detections``:
    COCO result records (``CocoEvaluator.results`` or ``detections.json``); ``image_ids``:
    the images evaluated (``CocoEvaluator.image_ids``; default all). ``matrix_conf``: the
    confusion matrix's score threshold, default the best-F1 one. Returns
    :class:`EvaluationPlots`; its ``summary`` is JSON-ready for ``metrics.json``.
    """
    analysis = analyse_detections(
        gt_dataset, detections, category_ids, class_names, image_ids, matrix_conf
    )
    os.makedirs(out_dir, exist_ok=True)
    paths = {name: os.path.join(out_dir, file) for name, file in FILES.items()}
    matrix_args = (analysis.matrix_iou, analysis.matrix_conf, analysis.matrix_conf_rule)
    best_conf = analysis.best["best_f1_conf"]
    images = {
        "confusion_matrix": plot_confusion_matrix(
            analysis.matrix, class_names, paths["confusion_matrix"], *matrix_args
        ),
        "confusion_matrix_normalized": plot_confusion_matrix(
            analysis.matrix,
            class_names,
            paths["confusion_matrix_normalized"],
            *matrix_args,
            normalize=True,
        ),
        "PR_curve": plot_pr_curve(analysis.pr, class_names, paths["PR_curve"]),
    }
    for name, metric in (("P_curve", "precision"), ("R_curve", "recall"), ("F1_curve", "f1")):
        images[name] = plot_confidence_curve(
            analysis.curves, metric, class_names, paths[name], best_conf
        )
    summary = {**analysis.summary(), "files": paths}
    return EvaluationPlots(summary=summary, images=images, analysis=analysis)


def _fit_cell(img: np.ndarray, boxes: np.ndarray, cell: int) -> tuple[np.ndarray, np.ndarray]:
    """``img`` scaled to fit a ``cell`` square (top-left, grey padding) and its boxes."""
    h, w = img.shape[:2]
    scale = cell / max(h, w)
    new_w, new_h = max(1, round(w * scale)), max(1, round(h * scale))
    out = np.full((cell, cell, 3), 114, dtype=np.uint8)
    out[:new_h, :new_w] = cv2.resize(img, (new_w, new_h), interpolation=cv2.INTER_AREA)
    return out, np.asarray(boxes, dtype=np.float32).reshape(-1, 4) * scale


def _write_text(img: np.ndarray, text: str, x: int, height: int, scale: float) -> None:
    """Black ``text`` vertically centred in the band ``img[:height]``, from ``x``."""
    (_, th), _ = cv2.getTextSize(text, cv2.FONT_HERSHEY_SIMPLEX, scale, 1)
    y = (height + th) // 2
    cv2.putText(img, text, (x, y), cv2.FONT_HERSHEY_SIMPLEX, scale, (0, 0, 0), 1, cv2.LINE_AA)


def _wrap(text: str, width: int, scale: float) -> list[str]:
    """``text`` in lines of whole words that fit ``width`` px (a longer word stays whole)."""
    lines: list[str] = []
    for word in text.split(" "):
        wider = f"{lines[-1]} {word}" if lines else word
        if lines and cv2.getTextSize(wider, cv2.FONT_HERSHEY_SIMPLEX, scale, 1)[0][0] <= width:
            lines[-1] = wider
        else:
            lines.append(word)
    return lines


def val_grid_conf(conf: float, floor: float = VAL_GRID_CONF_FLOOR) -> tuple[float, str]:
    """The score threshold the val grid draws predictions at, and how its title says it:
    ``conf`` (the evaluation's confusion-matrix threshold), raised to ``floor`` when lower
    (a weak model's best-F1 threshold can be 0, which would draw every candidate)."""
    if conf >= floor:
        return conf, f"score >= {conf:.3f}, the confusion matrix's threshold"
    return floor, (
        f"score >= {floor:.3f} (the confusion matrix's threshold {conf:.3f}, "
        f"raised to the grid's floor {floor:.2f})"
    )


def plot_val_predictions(
    samples: Sequence[Sequence[Any]],
    class_names: Sequence[str],
    path: str | None,
    conf: float,
    cell: int = VAL_GRID_CELL,
    pairs_per_row: int = VAL_GRID_PAIRS_PER_ROW,
    conf_floor: float = VAL_GRID_CONF_FLOOR,
) -> np.ndarray:
    """One grid picture: for each validation image its ground truth (left) and its
    predictions (right), ``pairs_per_row`` images per row, under a title that says the
    score threshold; each image's caption (with its box count) sits in a strip above it,
    never over the picture.

    Predictions are drawn when they score at least ``conf`` raised to ``conf_floor``
    (:func:`val_grid_conf`). Each sample is ``(image, gt_boxes, gt_labels, pred_boxes,
    pred_scores, pred_labels)``: a BGR uint8 image, xyxy boxes in its pixels and training
    class indices. Each image is scaled into a ``cell`` px square. Writes ``path`` (e.g.
    ``val_predictions.jpg``) unless None and returns the grid as RGB.
    """
    if not samples:
        raise ValueError("plot_val_predictions needs at least one sample")
    shown_conf, conf_text = val_grid_conf(float(conf), conf_floor)
    pair_w, row_h = 2 * cell + VAL_GRID_GAP, VAL_GRID_CAPTION + cell
    rows = -(-len(samples) // pairs_per_row)
    cols = min(len(samples), pairs_per_row)
    width = cols * pair_w + (cols - 1) * VAL_GRID_PAIR_GAP
    title = _wrap(
        f"Validation images: ground truth | predictions with {conf_text}", width - 12, 0.55
    )
    top = VAL_GRID_TITLE * len(title)
    grid = np.full((top + rows * row_h + (rows - 1) * VAL_GRID_PAIR_GAP, width, 3), 255, np.uint8)
    for k, line in enumerate(title):
        _write_text(grid[k * VAL_GRID_TITLE :], line, 6, VAL_GRID_TITLE, 0.55)
    for n, (img, gt_boxes, gt_labels, boxes, scores, labels) in enumerate(samples):
        scores = np.asarray(scores, dtype=np.float32).reshape(-1)
        keep = scores >= shown_conf
        gt_labels = np.asarray(gt_labels).reshape(-1)
        left, gt_xyxy = _fit_cell(img, gt_boxes, cell)
        right, pred_xyxy = _fit_cell(img, boxes, cell)
        left = draw_boxes(left, gt_xyxy, gt_labels, class_names)
        right = draw_boxes(
            right, pred_xyxy[keep], np.asarray(labels).reshape(-1)[keep], class_names, scores[keep]
        )
        y = top + (n // pairs_per_row) * (row_h + VAL_GRID_PAIR_GAP)
        x = (n % pairs_per_row) * (pair_w + VAL_GRID_PAIR_GAP)
        for dx, picture, caption in (
            (0, left, f"ground truth ({len(gt_labels)})"),
            (cell + VAL_GRID_GAP, right, f"predicted ({int(keep.sum())})"),
        ):
            band = grid[y : y + VAL_GRID_CAPTION, x + dx : x + dx + cell]
            band[:] = 235
            _write_text(band, caption, 4, VAL_GRID_CAPTION, 0.45)
            grid[y + VAL_GRID_CAPTION : y + row_h, x + dx : x + dx + cell] = picture
    rgb = cv2.cvtColor(grid, cv2.COLOR_BGR2RGB)
    if path is not None:
        save_rgb(rgb, path)
    return rgb
