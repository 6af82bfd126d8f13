"""engine.evaluation.val_loss: the training loss of the evaluation's outputs on the val split."""

from __future__ import annotations

import json

import cv2
import mindspore as ms
import numpy as np
import pytest
from mindspore import ops

from msdet.common.config import load_config
from msdet.data.coco import CocoSource
from msdet.engine.evaluation.val_loss import (
    VAL_LOSS_TERMS,
    PredictionLoss,
    ValidationLoss,
    anchor_grid,
    raw_outputs,
)
from msdet.engine.training.run_record import VAL_LOSS_TERMS as COLUMN_TERMS
from msdet.models.loss import YOLOXLoss
from msdet.ops.boxes import decode_boxes
from msdet.ops.cpu_kernels import NATIVE

SIZE, STRIDES, CLASSES = (64, 96), (8, 16, 32), 3
ANCHORS = sum((SIZE[0] // s) * (SIZE[1] // s) for s in STRIDES)  # 96 + 24 + 6


def decoded(raw: np.ndarray) -> ms.Tensor:
    """What the inference head makes of ``raw``: boxes in pixels and sigmoid scores."""
    grids, strides = anchor_grid(SIZE, STRIDES)
    raw = ms.Tensor(raw)
    boxes = decode_boxes(raw[..., :4], grids, strides)
    return ops.concat((boxes, ops.sigmoid(raw[..., 4:])), -1)


def random_raw(seed: int, batch: int = 2) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.normal(0.0, 2.0, (batch, ANCHORS, 5 + CLASSES)).astype(np.float32)


def train_cfg():
    return load_config("train", []).train


@pytest.fixture()
def source(tmp_path):
    """Two 64x96 images: two boxes (one 1 px thin), and none."""
    (tmp_path / "images").mkdir()
    (tmp_path / "annotations").mkdir()
    for name in ("a.jpg", "b.jpg"):
        cv2.imwrite(str(tmp_path / "images" / name), np.full((64, 96, 3), 90, np.uint8))
    images = [
        {"id": 1, "file_name": "a.jpg", "height": 64, "width": 96},
        {"id": 2, "file_name": "b.jpg", "height": 64, "width": 96},
    ]
    anns = [
        {"id": 1, "image_id": 1, "category_id": 3, "bbox": [8, 4, 40, 20], "area": 800, "iscrowd": 0},
        {"id": 2, "image_id": 1, "category_id": 1, "bbox": [60, 30, 2, 30], "area": 60, "iscrowd": 0},
    ]  # fmt: skip
    categories = [{"id": c, "name": n} for c, n in ((1, "disc"), (2, "rectangle"), (3, "star"))]
    (tmp_path / "annotations" / "val.json").write_text(
        json.dumps({"images": images, "annotations": anns, "categories": categories})
    )
    return CocoSource(str(tmp_path), "annotations/val.json", "images")


def test_the_column_names_are_the_losss_terms():
    assert VAL_LOSS_TERMS == COLUMN_TERMS == ("total", "iou", "obj", "cls")


def test_decoded_predictions_turn_back_into_the_raw_outputs():
    grids, strides = anchor_grid(SIZE, STRIDES)
    assert grids.shape == (ANCHORS, 2) and strides.shape == (ANCHORS,)
    # The head's order: stride 8 first, x fastest.
    np.testing.assert_array_equal(grids.asnumpy()[:13], [[x, 0] for x in range(12)] + [[0, 1]])
    assert strides.asnumpy()[96] == 16 and strides.asnumpy()[-1] == 32
    raw = random_raw(0)
    back = raw_outputs(decoded(raw), grids, strides).asnumpy()
    np.testing.assert_allclose(back, raw, atol=2e-3)  # float32 sigmoid, |logit| up to ~9
    # A saturated score (sigmoid rounded to 1.0) gets a large finite logit; a size exp
    # overflowed to inf (a diverged network), the largest finite log size.
    saturated = raw.copy()
    saturated[0, 0, 4] = 40.0
    saturated[0, 1, 2] = 100.0
    back = raw_outputs(decoded(saturated), grids, strides).asnumpy()
    assert 15.0 < back[0, 0, 4] < 17.0 and back[0, 1, 2] == 88.0


def test_targets_are_the_training_boxes_at_the_letterbox_scale(source):
    val = ValidationLoss(source, CLASSES, SIZE, STRIDES, 4, train_cfg(), NATIVE)
    targets, mask = val.targets(np.array([0, 1]), np.array([0.5, 0.5], np.float32))
    assert targets.shape == (2, 4, 5) and mask.tolist() == [[1, 0, 0, 0], [0, 0, 0, 0]]
    # (class, cx, cy, w, h) at half size; the box 2 px wide (1 px scaled) is left out as
    # training leaves it out.
    np.testing.assert_allclose(targets[0, 0], [2, 14, 7, 20, 10])
    assert not targets[0, 1:].any() and not targets[1].any()
    # A batch with padding (-1) or an unreadable image (<= -2) adds nothing.
    preds = decoded(random_raw(1))
    val.add(preds, np.array([0, -1]), np.ones(2, np.float32))
    val.add(preds, np.array([-3, 1]), np.ones(2, np.float32))
    assert val.batches == 0 and val.means() is None


@pytest.mark.slow  # two loss graphs compiled
def test_the_val_loss_is_the_training_loss_of_the_same_outputs(source):
    loss = YOLOXLoss(CLASSES)
    val = ValidationLoss(source, CLASSES, SIZE, STRIDES, 4, train_cfg(), NATIVE)
    grids, strides = anchor_grid(SIZE, STRIDES)
    index, scale = np.array([0, 1]), np.ones(2, np.float32)
    targets, mask = (ms.Tensor(a) for a in val.targets(index, scale))
    expected = []
    for seed in (2, 3):
        raw = random_raw(seed)
        want = [float(t.asnumpy()) for t in loss(ms.Tensor(raw), grids, strides, targets, mask)]
        got = [float(t.asnumpy()) for t in val.net(decoded(raw), targets, mask)]
        np.testing.assert_allclose(got, want, rtol=1e-4)
        assert want[1] > 0 and want[2] > 0 and want[5] > 0  # iou, obj, foreground anchors
        val.add(decoded(raw), index, scale)
        expected.append(want[:4])
    assert val.batches == 2
    means = val.means()
    assert list(means) == list(VAL_LOSS_TERMS)
    np.testing.assert_allclose(list(means.values()), np.mean(expected, axis=0), rtol=1e-4)
    assert means["total"] == pytest.approx(means["iou"] + means["obj"] + means["cls"], rel=1e-5)
    assert isinstance(val.net, PredictionLoss)
    # A diverged network (sizes overflowed to inf, as seen from an fp16 run's EMA weights):
    # large finite terms, not NaN.
    val.reset()
    diverged = random_raw(4)
    diverged[..., 2:4] = 100.0
    val.add(decoded(diverged), index, scale)
    assert all(np.isfinite(v) for v in val.means().values()) and val.means()["iou"] == 5.0
