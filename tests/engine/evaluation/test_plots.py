"""Evaluation plots: the files Ultralytics users expect, legible from 1 to 80 classes."""

from __future__ import annotations

import json

import cv2
import numpy as np
import pytest

from msdet.data.visualize import class_colour
from msdet.engine.evaluation.analysis import analyse_detections
from msdet.engine.evaluation.plots import (
    FILES,
    VAL_GRID_CAPTION,
    VAL_GRID_CONF_FLOOR,
    VAL_GRID_GAP,
    VAL_GRID_PAIR_GAP,
    confidence_curve_figure,
    confusion_matrix_figure,
    plot_confusion_matrix,
    plot_val_predictions,
    pr_curve_figure,
    val_grid_conf,
    write_evaluation_plots,
)
from tests.support.evaluation import HAND_DETS, HAND_GT, det

HAND_IDS = [1, 2, 5, 9, 11]
HAND_NAMES = ["cat", "dog", "bird", "fish", "tie"]


@pytest.mark.slow
def test_write_evaluation_plots_writes_the_six_pngs_it_returns(tmp_path):
    result = write_evaluation_plots(HAND_GT, HAND_DETS, HAND_IDS, HAND_NAMES, str(tmp_path))
    assert set(result.images) == set(FILES)
    assert result.summary["files"] == {k: str(tmp_path / v) for k, v in FILES.items()}
    for name, rgb in result.images.items():
        expected = (850, 1000, 3) if name.startswith("confusion") else (600, 900, 3)
        assert rgb.shape == expected and rgb.dtype == np.uint8, name
        assert rgb.std() > 10, name  # a drawn picture, not a blank canvas
        written = cv2.imread(result.summary["files"][name])
        np.testing.assert_array_equal(written, cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR))
    assert json.loads(json.dumps(result.summary)) == result.summary
    best = result.analysis.best
    assert result.summary["best_f1"] == best["best_f1"] > 0
    assert result.summary["confusion_matrix_conf"] == best["best_f1_conf"]


def test_small_matrix_writes_every_nonzero_cell_and_states_its_thresholds():
    analysis = analyse_detections(HAND_GT, HAND_DETS, HAND_IDS, HAND_NAMES)
    fig = confusion_matrix_figure(analysis.matrix, HAND_NAMES, 0.5, 0.301, "best_f1")
    ax = fig.axes[0]
    assert len(ax.texts) == int((analysis.matrix > 0).sum())
    assert sorted(int(t.get_text()) for t in ax.texts) == sorted(
        analysis.matrix[analysis.matrix > 0].tolist()
    )
    assert "rows predicted, columns true" in ax.get_title()
    assert "IoU >= 0.50, conf >= 0.301 (best F1)" in ax.get_title()
    assert [t.get_text() for t in ax.get_xticklabels()] == [*HAND_NAMES, "background"]
    assert ax.get_xlabel() == "True" and ax.get_ylabel() == "Predicted"
    normalized = confusion_matrix_figure(analysis.matrix, HAND_NAMES, 0.5, 0.301, normalize=True)
    assert "columns sum to 1" in normalized.axes[0].get_title()


def eighty_classes():
    """80 classes, 2 objects each, half of them found."""
    cats = list(range(1, 81))
    anns, dets = [], []
    for c in cats:
        for k in range(2):
            box = [10.0 * k, 5.0 * c, 8.0, 4.0]
            anns.append({"image_id": 1, "category_id": c, "bbox": box})
            if k == 0:
                dets.append(det(1, c, box, 0.5 + c / 200))
    gt = {
        "images": [{"id": 1, "file_name": "a.jpg", "width": 640, "height": 480}],
        "annotations": [
            {"id": i, "area": 32.0, "iscrowd": 0, **a} for i, a in enumerate(anns, start=1)
        ],
        "categories": [{"id": c, "name": f"class{c}"} for c in cats],
    }
    return gt, dets, cats, [f"class{c}" for c in cats]


@pytest.mark.slow
def test_eighty_classes_no_cell_numbers_no_per_class_legend():
    gt, dets, cats, names = eighty_classes()
    analysis = analyse_detections(gt, dets, cats, names)
    assert plot_confusion_matrix(analysis.matrix, names, None, 0.5, 0.0).shape == (1400, 1600, 3)
    assert analysis.matrix.trace() == 80 and analysis.matrix[80].sum() == 80  # half missed
    fig = confusion_matrix_figure(analysis.matrix, names, 0.5, 0.5)
    assert len(fig.axes[0].texts) == 0
    assert len(fig.axes[0].get_xticklabels()) == 81  # every class still named on the axis
    pr = pr_curve_figure(analysis.pr, names)
    assert [t.get_text() for t in pr.axes[0].get_legend().get_texts()] == [
        "all classes 0.505 mAP@0.50"  # recall 0 .. 0.5 at precision 1: 51 of 101 points
    ]
    assert len(pr.axes[0].get_lines()) == 81  # 80 thin lines and the mean
    f1 = confidence_curve_figure(analysis.curves, "f1", names, analysis.best["best_f1_conf"])
    labels = [t.get_text() for t in f1.axes[0].get_legend().get_texts()]
    assert labels == ["best F1 conf", f"all classes 0.67 at {analysis.best['best_f1_conf']:.3f}"]


def test_few_classes_are_named_in_the_legend_with_their_ap50():
    analysis = analyse_detections(HAND_GT, HAND_DETS, HAND_IDS, HAND_NAMES)
    ap = analysis.ap50()
    fig = pr_curve_figure(analysis.pr, HAND_NAMES)
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    # fish has no ground truth: no curve
    assert labels == [
        f"cat {ap[0]:.3f}",
        f"dog {ap[1]:.3f}",
        "bird 0.000",
        f"tie {ap[4]:.3f}",
        f"all classes {analysis.mean_pr().mean():.3f} mAP@0.50",
    ]
    lines = fig.axes[0].get_lines()
    assert lines[-1].get_linewidth() == 3.0 and lines[0].get_linewidth() == 1.0


def _grid_samples(n, scores=(0.9, 0.1)):
    """n copies of a flat grey 64 px image with one true box and two predictions."""
    img = np.full((64, 64, 3), 60, dtype=np.uint8)
    gt = (np.array([[10, 30, 30, 50]], np.float32), np.array([0]))
    boxes = np.array([[35, 30, 60, 50], [5, 40, 20, 60]], np.float32)[: len(scores)]
    return [(img, *gt, boxes, np.array(scores), np.ones(len(scores), np.int64))] * n


def _cell(bgr, n, side, rows, cell=64):
    """Grid image ``n`` (left: ground truth, right: predictions) of a grid of ``rows``."""
    top = bgr.shape[0] - (rows * (VAL_GRID_CAPTION + cell) + (rows - 1) * VAL_GRID_PAIR_GAP)
    y = top + (n // 4) * (VAL_GRID_CAPTION + cell + VAL_GRID_PAIR_GAP) + VAL_GRID_CAPTION
    x = (n % 4) * (2 * cell + VAL_GRID_GAP + VAL_GRID_PAIR_GAP)
    x += 0 if side == "left" else cell + VAL_GRID_GAP
    return bgr[y : y + cell, x : x + cell]


def test_val_grid_shows_sixteen_images_truth_left_and_confident_predictions_right(tmp_path):
    path = tmp_path / "val_predictions.jpg"
    rgb = plot_val_predictions(_grid_samples(16), ["a", "b"], str(path), conf=0.5, cell=64)
    # 4 pairs per row, 4 rows, under the title
    assert rgb.shape[1] == 4 * (2 * 64 + VAL_GRID_GAP) + 3 * VAL_GRID_PAIR_GAP
    assert rgb.shape[0] > 4 * (VAL_GRID_CAPTION + 64) + 3 * VAL_GRID_PAIR_GAP
    assert cv2.imread(str(path)).shape == rgb.shape
    bgr = cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR)
    for n in range(16):
        left, right = _cell(bgr, n, "left", 4), _cell(bgr, n, "right", 4)
        assert tuple(left[49, 20]) == class_colour(0)  # GT box, bottom edge
        assert tuple(right[49, 20]) == (60, 60, 60)  # no GT on the right
        assert tuple(right[49, 45]) == class_colour(1)  # the confident prediction
        assert tuple(right[59, 5]) == (60, 60, 60)  # the unconfident one is not drawn
        assert tuple(left[49, 45]) == (60, 60, 60)  # no prediction on the left


def test_val_grid_writes_nothing_over_the_pictures():
    samples = _grid_samples(5, scores=())
    rgb = plot_val_predictions(samples, ["a", "b"], None, conf=0.5, cell=64)
    bgr = cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR)
    for n in range(5):
        # No prediction: the right image is the picture itself, its corners included.
        np.testing.assert_array_equal(_cell(bgr, n, "right", 2), samples[n][0])


def test_val_grid_floors_a_zero_confidence_and_says_so():
    conf, text = val_grid_conf(0.0)
    assert conf == VAL_GRID_CONF_FLOOR > 0
    assert "0.000" in text and "floor" in text
    assert val_grid_conf(0.4) == (0.4, "score >= 0.400, the confusion matrix's threshold")
    rgb = plot_val_predictions(_grid_samples(1), ["a", "b"], None, conf=0.0, cell=64)
    right = _cell(cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR), 0, "right", 1)
    assert tuple(right[49, 45]) == class_colour(1)  # 0.9: drawn
    assert tuple(right[59, 5]) == (60, 60, 60)  # 0.1: under the floor, not drawn
