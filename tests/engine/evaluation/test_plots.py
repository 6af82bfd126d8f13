"""Evaluation plots: the files Ultralytics users expect, legible from 1 to 80 classes."""

from __future__ import annotations

import json

import cv2
import numpy as np

from msdet.data.visualize import class_colour
from msdet.engine.evaluation.analysis import analyse_detections
from msdet.engine.evaluation.plots import (
    FILES,
    confidence_curve_figure,
    confusion_matrix_figure,
    plot_confusion_matrix,
    plot_val_predictions,
    pr_curve_figure,
    write_evaluation_plots,
)
from tests.engine.evaluation.test_analysis import HAND_DETS, HAND_GT, det

HAND_IDS = [1, 2, 5, 9, 11]
HAND_NAMES = ["cat", "dog", "bird", "fish", "tie"]


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


def test_val_grid_shows_ground_truth_left_and_confident_predictions_right(tmp_path):
    img = np.zeros((64, 64, 3), dtype=np.uint8)
    gt = (np.array([[10, 30, 30, 50]], np.float32), np.array([0]))
    preds = (
        np.array([[35, 30, 60, 50], [5, 40, 20, 60]], np.float32),
        np.array([0.9, 0.1]),  # the second is below conf: not drawn
        np.array([1, 1]),
    )
    samples = [(img, *gt, *preds)] * 3
    path = tmp_path / "val_batch_pred.jpg"
    rgb = plot_val_predictions(samples, ["a", "b"], str(path), conf=0.5, cell=64)
    # 3 images, 2 per row: 2 rows of 64 px cells; gaps 4 px within a pair, 8 between
    assert rgb.shape == (2 * 64 + 4, 2 * (2 * 64 + 4) + 8, 3)
    assert cv2.imread(str(path)).shape == rgb.shape
    bgr = cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR)
    left, right = bgr[:64, :64], bgr[:64, 68:132]
    assert tuple(left[40, 10]) == class_colour(0)  # GT box, left edge
    assert tuple(right[40, 10]) == (0, 0, 0)  # no GT on the right
    assert tuple(right[40, 35]) == class_colour(1)  # the confident prediction
    assert tuple(right[50, 5]) == (0, 0, 0)  # the unconfident one is not drawn
    assert tuple(left[40, 35]) == (0, 0, 0)  # no prediction on the left
    assert (bgr[68:, 136:] == 255).all()  # the fourth slot stays empty
