"""Evaluation analysis on hand-made COCO data: exact matrices, curves, and pycocotools parity."""

from __future__ import annotations

import contextlib
import copy
import io
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from pycocotools.coco import COCO
from pycocotools.cocoeval import COCOeval

from msdet.engine.evaluation.analysis import (
    CONF_THRESHOLDS,
    FALLBACK_CONF,
    RECALL_THRESHOLDS,
    analyse_detections,
    best_f1,
    coco_iou,
    confidence_curves,
    confusion_matrix,
    match_by_class,
    normalize_confusion,
    pr_curves,
)
from tests.support import ROOT as REPO_ROOT
from tests.support.evaluation import HAND_DETS, HAND_GT, dataset, det

ROOT = Path(REPO_ROOT)


def cocoeval_precision(gt, dets, cat_ids, img_ids=None) -> np.ndarray:
    """pycocotools' precision at IoU 0.5, area all, 100 detections: [K, 101]."""
    with contextlib.redirect_stdout(io.StringIO()):
        coco_gt = COCO()
        coco_gt.dataset = copy.deepcopy(gt)
        coco_gt.createIndex()
        coco_dt = coco_gt.loadRes(copy.deepcopy(dets))
        ev = COCOeval(coco_gt, coco_dt, "bbox")
        if img_ids is not None:
            ev.params.imgIds = list(img_ids)
        ev.params.catIds = list(cat_ids)
        ev.evaluate()
        ev.accumulate()
    assert ev.params.iouThrs[0] == 0.5 and ev.params.maxDets[2] == 100
    return ev.eval["precision"][0, :, :, 0, 2].T


def test_pr_curve_equals_pycocotools_on_a_hand_made_set():
    ids = [1, 2, 5, 9, 11]
    mine = pr_curves(match_by_class(HAND_GT, HAND_DETS, ids))
    reference = cocoeval_precision(HAND_GT, HAND_DETS, ids)
    np.testing.assert_allclose(mine, reference, rtol=0, atol=1e-12)
    assert (mine[3] == -1).all()  # fish: no ground truth
    assert (mine[2] == 0).all()  # bird: never detected
    # cat: TP .9, (crowd .85 ignored), TP .7, FP .65, FP .6, TP .3: precision 1 up to
    # recall 2/3, then 3/5 at recall 1
    np.testing.assert_allclose(mine[0, RECALL_THRESHOLDS <= 2 / 3], 1.0, atol=1e-12)
    np.testing.assert_allclose(mine[0, RECALL_THRESHOLDS > 2 / 3], 0.6, atol=1e-12)


def test_crowd_detection_is_neither_true_nor_false_positive():
    cat = match_by_class(HAND_GT, HAND_DETS, [1])[0]
    np.testing.assert_array_equal(cat.scores, [0.9, 0.85, 0.7, 0.65, 0.6, 0.3])
    np.testing.assert_array_equal(cat.tp, [1, 0, 1, 0, 0, 1])
    np.testing.assert_array_equal(cat.fp, [0, 0, 0, 1, 1, 0])
    assert cat.num_gt == 3  # the crowd region is not an object to find


def test_iou_ties_go_to_the_later_box_and_iou_exactly_at_the_threshold_is_a_hit():
    tie = match_by_class(HAND_GT, HAND_DETS, [11])[0]
    np.testing.assert_array_equal(tie.tp, [1, 1, 1])
    assert tie.num_gt == 3


def random_set(seed: int, n_images: int = 25):
    rng = np.random.default_rng(seed)
    anns, dets = [], []
    for img in range(1, n_images + 1):
        for _ in range(rng.integers(0, 6)):
            box = [float(v) for v in np.round([*rng.uniform(0, 150, 2), *rng.uniform(2, 60, 2)], 1)]
            ann = {"image_id": img, "category_id": int(rng.choice([1, 3, 7])), "bbox": box}
            ann["iscrowd"] = int(rng.random() < 0.1)
            anns.append(ann)
            for _ in range(rng.integers(0, 3)):  # near hits, some with the wrong class
                noisy = [float(v) for v in np.round(np.array(box) + rng.normal(0, 6, 4), 2)]
                cat = ann["category_id"] if rng.random() < 0.8 else int(rng.choice([1, 3, 7, 9]))
                score = float(np.round(rng.choice([0.5, 0.3, rng.random()]), 2))  # ties
                dets.append(det(img, cat, noisy, score))
        for _ in range(rng.integers(0, 3)):  # false alarms
            box = [*rng.uniform(0, 150, 2), *rng.uniform(2, 60, 2)]
            dets.append(det(img, int(rng.choice([1, 3, 7, 9])), box, float(rng.random())))
    return dataset(range(1, n_images + 1), anns, [1, 3, 7, 9]), dets


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_pr_curve_equals_pycocotools_on_random_sets(seed):
    gt, dets = random_set(seed)
    ids = [1, 3, 7, 9]
    np.testing.assert_allclose(
        pr_curves(match_by_class(gt, dets, ids)),
        cocoeval_precision(gt, dets, ids),
        rtol=0,
        atol=1e-12,
    )
    subset = [2, 5, 11, 17, 23]  # a partial evaluation, as the trainer's quick eval
    np.testing.assert_allclose(
        pr_curves(match_by_class(gt, dets, ids, image_ids=subset)),
        cocoeval_precision(gt, dets, ids, subset),
        rtol=0,
        atol=1e-12,
    )


def test_coco_iou_divides_by_the_detection_area_for_crowd():
    dt = np.array([[0, 0, 10, 10], [5, 0, 10, 10], [15, 0, 10, 10]], dtype=np.float64)
    gt = np.array([[0, 0, 20, 20], [0, 0, 10, 10]], dtype=np.float64)
    iou = coco_iou(dt, gt, np.array([True, False]))
    np.testing.assert_allclose(iou, [[1.0, 1.0], [1.0, 50 / 150], [0.5, 0.0]])
    assert coco_iou(np.zeros((0, 4)), gt, np.array([0, 0])).shape == (0, 2)


# Single class, one image: three objects; detections 0.9 hit, 0.8 miss, 0.6 hit, 0.3 miss.
SINGLE_GT = dataset(
    [1],
    [{"image_id": 1, "category_id": 4, "bbox": [x, 10, 20, 20]} for x in (0, 50, 100)],
    [4],
)
SINGLE_DETS = [
    det(1, 4, [0, 10, 20, 20], 0.9),
    det(1, 4, [200, 100, 20, 20], 0.8),
    det(1, 4, [50, 10, 20, 20], 0.6),
    det(1, 4, [200, 200, 20, 20], 0.3),
]


def test_precision_recall_f1_at_hand_computed_thresholds():
    curves = confidence_curves(match_by_class(SINGLE_GT, SINGLE_DETS, [4]))
    at = {c: int(np.flatnonzero(CONF_THRESHOLDS == c)[0]) for c in (0.2, 0.5, 0.7, 0.85, 0.95)}
    expected = {  # threshold: (P, R, F1)
        0.2: (2 / 4, 2 / 3, 2 * (1 / 2) * (2 / 3) / (1 / 2 + 2 / 3)),
        0.5: (2 / 3, 2 / 3, 2 / 3),
        0.7: (1 / 2, 1 / 3, 0.4),
        0.85: (1.0, 1 / 3, 0.5),
        0.95: (1.0, 0.0, 0.0),  # nothing passes: precision 1, as the curve continues
    }
    for c, (p, r, f) in expected.items():
        i = at[c]
        got = (curves.precision[0, i], curves.recall[0, i], curves.f1[0, i])
        assert got == pytest.approx((p, r, f)), c
    # A score equal to the threshold passes it.
    assert curves.recall[0, int(np.flatnonzero(CONF_THRESHOLDS == 0.6)[0])] == pytest.approx(2 / 3)


def test_best_f1_is_the_lowest_threshold_of_the_best_plateau():
    curves = confidence_curves(match_by_class(SINGLE_GT, SINGLE_DETS, [4]))
    best = best_f1(curves, ["box"])
    # Mean F1 is 2/3 for thresholds in (0.3, 0.6]; the grid's first point there is 0.301.
    assert best["best_f1_conf"] == 0.301
    assert best["best_f1"] == pytest.approx(2 / 3)
    assert best["precision_at_best_f1"] == pytest.approx(2 / 3)
    assert best["recall_at_best_f1"] == pytest.approx(2 / 3)
    assert best["per_class_at_best_f1"] == {
        "box": pytest.approx({"precision": 2 / 3, "recall": 2 / 3, "f1": 2 / 3})
    }


def test_class_never_detected_scores_zero_and_class_without_ground_truth_is_left_out():
    curves = confidence_curves(match_by_class(HAND_GT, HAND_DETS, [1, 2, 5, 9]))
    np.testing.assert_array_equal(curves.valid, [True, True, True, False])
    assert (curves.precision[2] == 0).all() and (curves.recall[2] == 0).all()
    assert np.isnan(curves.f1[3]).all()
    np.testing.assert_allclose(curves.mean("f1"), curves.f1[:3].mean(0))
    best = best_f1(curves, ["cat", "dog", "bird", "fish"])
    assert set(best["per_class_at_best_f1"]) == {"cat", "dog", "bird"}
    empty = best_f1(confidence_curves([]), [])
    assert empty["best_f1"] is None and empty["best_f1_conf"] is None


# Two classes, two images: image 1 has a cat found as a cat and a dog found as a cat;
# image 2 has a dog nobody found and a dog detected where there is nothing.
MATRIX_GT = dataset(
    [1, 2],
    [
        {"image_id": 1, "category_id": 1, "bbox": [0, 0, 10, 10]},
        {"image_id": 1, "category_id": 2, "bbox": [50, 50, 10, 10]},
        {"image_id": 2, "category_id": 2, "bbox": [20, 20, 10, 10]},
    ],
    [1, 2],
)
MATRIX_DETS = [
    det(1, 1, [0, 0, 10, 10], 0.9),
    det(1, 1, [50, 50, 10, 10], 0.8),
    det(2, 2, [100, 100, 10, 10], 0.7),
    det(2, 1, [20, 20, 10, 10], 0.1),  # below the threshold: not a prediction
]


def test_confusion_matrix_counts_rows_predicted_columns_true():
    matrix = confusion_matrix(MATRIX_GT, MATRIX_DETS, [1, 2], conf=0.25)
    assert matrix.dtype == np.int64
    np.testing.assert_array_equal(
        matrix,
        [
            [1, 1, 0],  # predicted cat: the cat, the dog
            [0, 0, 1],  # predicted dog: a false alarm
            [0, 1, 0],  # background: the missed dog
        ],
    )
    np.testing.assert_allclose(
        normalize_confusion(matrix, axis=0), [[1, 0.5, 0], [0, 0, 1], [0, 0.5, 0]]
    )
    np.testing.assert_allclose(
        normalize_confusion(matrix, axis=1), [[0.5, 0.5, 0], [0, 0, 1], [0, 1, 0]]
    )
    # At conf 0.05 the low-scoring cat on the missed dog counts: dog -> cat.
    low = confusion_matrix(MATRIX_GT, MATRIX_DETS, [1, 2], conf=0.05)
    np.testing.assert_array_equal(low, [[1, 2, 0], [0, 0, 1], [0, 0, 0]])


def test_confusion_matrix_matches_one_to_one_by_highest_iou_first():
    # d2 == g2 (IoU 1), d1 overlaps g2 (0.667) more than g1 (0.429). Greedy: d2-g2, then
    # d1-g1, both found. (Keeping each detection's best box first would strand d1.)
    gt = dataset(
        [1],
        [
            {"image_id": 1, "category_id": 1, "bbox": [0, 0, 10, 10]},
            {"image_id": 1, "category_id": 1, "bbox": [6, 0, 10, 10]},
        ],
        [1],
    )
    dets = [det(1, 1, [4, 0, 10, 10], 0.9), det(1, 1, [6, 0, 10, 10], 0.8)]
    np.testing.assert_array_equal(
        confusion_matrix(gt, dets, [1], conf=0.25, iou_threshold=0.4), [[2, 0], [0, 0]]
    )
    # Two detections on one object: one matches, the other is a false alarm.
    dup = [det(1, 1, [0, 0, 10, 10], 0.9), det(1, 1, [1, 0, 10, 10], 0.8)]
    np.testing.assert_array_equal(confusion_matrix(gt, dup, [1], conf=0.25), [[1, 1], [1, 0]])


def test_confusion_matrix_ignores_crowd_regions():
    gt = dataset(
        [1],
        [
            {"image_id": 1, "category_id": 1, "bbox": [0, 0, 100, 100], "iscrowd": 1},
            {"image_id": 1, "category_id": 2, "bbox": [200, 0, 20, 20]},
        ],
        [1, 2],
    )
    dets = [
        det(1, 1, [10, 10, 20, 20], 0.9),  # inside the crowd region: not counted
        det(1, 2, [250, 150, 20, 20], 0.9),  # a false alarm
    ]
    np.testing.assert_array_equal(
        confusion_matrix(gt, dets, [1, 2], conf=0.25), [[0, 0, 0], [0, 0, 1], [0, 1, 0]]
    )


def test_analysis_takes_the_matrix_at_the_best_f1_threshold_unless_told():
    analysis = analyse_detections(SINGLE_GT, SINGLE_DETS, [4], ["box"])
    assert (analysis.matrix_conf, analysis.matrix_conf_rule) == (0.301, "best_f1")
    # >= 0.301: two hits and the 0.8 false alarm; the third object is missed.
    np.testing.assert_array_equal(analysis.matrix, [[2, 1], [1, 0]])
    assert analysis.ap50()[0] == pytest.approx((34 * 1 + 33 * 2 / 3) / 101)
    assert analysis.mean_pr().mean() == pytest.approx(analysis.ap50()[0])
    summary = analysis.summary()
    assert json.loads(json.dumps(summary)) == summary
    assert summary["best_f1_conf"] == summary["confusion_matrix_conf"] == 0.301
    assert summary["confusion_matrix_iou"] == summary["curves_iou"] == 0.5

    fixed = analyse_detections(SINGLE_GT, SINGLE_DETS, [4], ["box"], matrix_conf=0.7)
    assert (fixed.matrix_conf, fixed.matrix_conf_rule) == (0.7, "fixed")
    np.testing.assert_array_equal(fixed.matrix, [[1, 1], [2, 0]])

    misses = [det(1, 4, [200, 100, 20, 20], 0.9)]
    fallback = analyse_detections(SINGLE_GT, misses, [4], ["box"])
    assert fallback.best["best_f1"] == 0.0
    assert (fallback.matrix_conf, fallback.matrix_conf_rule) == (FALLBACK_CONF, "fallback")


def test_detections_on_unknown_images_are_an_error():
    with pytest.raises(ValueError, match="image ids not in the ground truth: \\[99\\]"):
        match_by_class(SINGLE_GT, [det(99, 4, [0, 0, 1, 1], 0.5)], [4])
    with pytest.raises(ValueError, match="2 class names for 1 category ids"):
        analyse_detections(SINGLE_GT, SINGLE_DETS, [4], ["a", "b"])


@pytest.mark.slow
def test_analysis_modules_do_not_import_mindspore():
    code = "import sys, msdet.engine.evaluation.analysis, msdet.engine.evaluation.plots; print('mindspore' in sys.modules)"
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "False"
