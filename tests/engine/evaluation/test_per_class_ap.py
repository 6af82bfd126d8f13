"""Per-class AP50 next to per-class AP: evaluator metrics, the log table, TensorBoard."""

from __future__ import annotations

import json

import pytest

from msdet.engine.training.callbacks.base import TrainState
from msdet.engine.training.callbacks.records import TensorBoardCallback
from tests.support.evaluation import CATEGORY_IDS, evaluate, ground_truth, model_detections
from tests.support.training import tensorboard_scalars


def test_ap50_per_class_differs_from_ap_where_boxes_are_loose(tmp_path):
    # Every box shifted 15 px: IoU 0.739, a hit at IoU 0.50 .. 0.70 only: AP 0.5, AP50 1.
    _, objects = ground_truth()
    dets, counts, ids, scales, sizes = model_detections(objects, shift=15.0)
    # ... except the disc, which is exact: AP 1 and AP50 1.
    disc = ids.index(1)
    dets[disc, 0, [0, 2]] -= 15.0 * 0.5
    metrics = evaluate(tmp_path, dets, counts, ids, scales, sizes)
    assert metrics["per_class"] == pytest.approx({"disc": 1.0, "box": 0.5, "triangle": 0.5})
    assert metrics["per_class_AP50"] == pytest.approx({"disc": 1.0, "box": 1.0, "triangle": 1.0})
    written = json.loads((tmp_path / "metrics.json").read_text())
    assert written["per_class_AP50"] == metrics["per_class_AP50"]
    out = (tmp_path / "coco_summary.txt").read_text()  # the console's table, kept
    assert "Per-class AP (IoU 0.50:0.95) and AP50:" in out
    assert "box       AP  0.500  AP50  1.000" in out


def test_ap50_counts_a_false_positive_and_no_ground_truth_is_minus_one(tmp_path):
    _, objects = ground_truth()
    objects = {k: v for k, v in objects.items() if k != 3}  # no triangle evaluated
    dets, counts, ids, scales, sizes = model_detections(objects)
    i = ids.index(1)
    dets[i, 1] = [150, 100, 190, 140, 0.95, CATEGORY_IDS.index(3)]  # a "box" where none is
    counts[i] = 2
    metrics = evaluate(tmp_path, dets, counts, ids, scales, sizes)
    assert metrics["per_class_AP50"]["box"] == pytest.approx(2 / 3)
    assert metrics["per_class_AP50"]["triangle"] == -1.0


def test_tensorboard_gets_one_scalar_per_class_and_skips_classes_without_ground_truth(tmp_path):
    state = TrainState(epochs=2, steps_per_epoch=1, total_batch=1)
    cb = TensorBoardCallback(state, str(tmp_path))
    state.history = [{"epoch": 1, "mAP": 0.4, "mAP50": 0.7}]
    state.evaluated = True
    state.metrics = {
        "mAP": 0.4,
        "mAP50": 0.7,
        "per_class": {"cat": 0.25, "dog": 0.5, "owl": -1.0},
        "per_class_AP50": {"cat": 0.5, "dog": 0.875, "owl": -1.0},
    }
    cb.end_epoch(1, None)
    state.history.append({"epoch": 2, "mAP": float("nan"), "mAP50": float("nan")})
    state.evaluated = False  # an epoch without evaluation writes no per-class point
    cb.end_epoch(2, None)
    cb.on_train_end(None)
    scalars = tensorboard_scalars(tmp_path)
    assert scalars["AP_per_class/cat"] == [(1, 0.25)]
    assert scalars["AP50_per_class/dog"] == [(1, 0.875)]
    assert scalars["AP50_per_class/cat"] == [(1, 0.5)]
    assert not any("owl" in tag for tag in scalars)
    assert scalars["metrics/mAP50"] == [(1, pytest.approx(0.7))]
