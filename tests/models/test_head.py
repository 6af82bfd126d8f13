"""models.head with models.loss on a tiny head (16 channels, 3 classes, three levels of 4x4,
2x2 and 1x1 cells), operator by operator in PyNative mode: no graph to compile, so these run
in the fast tier. What the outputs and the loss mean, as MMDetection tests its YOLOX head:
no ground truth gives no class, box or L1 loss and a positive objectness loss; a ground
truth gives every term; L1 only when switched on. (The loss against YOLOX 0.3.0's numbers:
tests/models/test_loss.py.)"""

from __future__ import annotations

import mindspore as ms
import numpy as np
import pytest

from msdet.models.head import YOLOXHead, prior_bias
from msdet.models.loss import YOLOXLoss
from tests.support.modes import execution_mode

CLASSES, SIDES, STRIDES, CHANNELS = 3, (4, 2, 1), (8, 16, 32), (16, 16, 16)
IMG = 32  # the input the feature maps stand for: 4 x 8 = 2 x 16 = 1 x 32
ANCHORS = sum(s * s for s in SIDES)  # 21


@pytest.fixture(scope="module")
def pynative():
    with execution_mode(ms.PYNATIVE_MODE):
        yield


def head_and_features(seed: int = 0):
    ms.set_seed(seed)
    head = YOLOXHead(CLASSES, width=1 / 16, strides=STRIDES, in_channels=(256, 256, 256))
    rng = np.random.default_rng(seed)
    feats = [ms.Tensor(rng.standard_normal((2, c, s, s)).astype(np.float32))
             for c, s in zip(CHANNELS, SIDES)]  # fmt: skip
    return head, feats


def targets(boxes: list[list[tuple]], rows: int = 4):
    """(targets [B, rows, 5]: class, cx, cy, w, h in pixels; mask [B, rows]) per image."""
    t = np.zeros((len(boxes), rows, 5), np.float32)
    m = np.zeros((len(boxes), rows), np.float32)
    for i, image in enumerate(boxes):
        for j, box in enumerate(image):
            t[i, j], m[i, j] = box, 1.0
    return ms.Tensor(t), ms.Tensor(m)


def test_training_outputs_are_raw_and_anchored_per_level(pynative):
    head, feats = head_and_features()
    head.set_train(True)
    raw, grids, strides = head(feats)
    assert raw.shape == (2, ANCHORS, 5 + CLASSES)
    assert grids.shape == (ANCHORS, 2)
    assert strides.asnumpy().tolist() == [8.0] * 16 + [16.0] * 4 + [32.0]
    assert grids.asnumpy()[:5].tolist() == [[0, 0], [1, 0], [2, 0], [3, 0], [0, 1]]
    # freshly built, the objectness and class logits start near the prior (0.01)
    prior = prior_bias(0.01)
    assert prior == pytest.approx(-4.59512, abs=1e-5)
    assert np.abs(raw.asnumpy()[..., 4:] - prior).mean() < 1.0


def test_inference_outputs_are_decoded_boxes_and_probabilities(pynative):
    from mindspore import nn

    head, feats = head_and_features()
    for _, cell in head.cells_and_names():  # running statistics in both modes: the same raw
        if isinstance(cell, nn.BatchNorm2d):
            cell.use_batch_statistics = False
    head.set_train(True)
    raw, grids, strides = (t.asnumpy() for t in head(feats))
    head.set_train(False)
    out = head(feats).asnumpy()
    assert out.shape == (2, ANCHORS, 5 + CLASSES)
    xy = (raw[..., :2] + grids) * strides[:, None]
    wh = np.exp(raw[..., 2:4]) * strides[:, None]
    np.testing.assert_allclose(out[..., :2], xy, rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(out[..., 2:4], wh, rtol=1e-5)
    probs = out[..., 4:]
    np.testing.assert_allclose(probs, 1 / (1 + np.exp(-raw[..., 4:])), rtol=1e-5, atol=1e-7)
    assert ((probs > 0) & (probs < 1)).all()


def loss_terms(boxes, use_l1: bool = False, seed: int = 0) -> dict[str, float]:
    head, feats = head_and_features(seed)
    head.set_train(True)
    loss = YOLOXLoss(CLASSES)
    if use_l1:
        loss.use_l1.set_data(ms.Tensor(1.0, ms.float32))
    t, m = targets(boxes)
    out = loss(*head(feats), t, m)
    return dict(zip(("total", "iou", "obj", "cls", "l1", "num_fg"), (float(v.asnumpy())
                                                                      for v in out)))  # fmt: skip


def test_no_ground_truth_gives_only_objectness_loss(pynative):
    got = loss_terms([[], []], use_l1=True)
    assert got["iou"] == got["cls"] == got["l1"] == got["num_fg"] == 0.0
    assert got["obj"] > 0 and got["total"] == pytest.approx(got["obj"])


def test_a_ground_truth_gives_every_term_and_l1_only_when_on(pynative):
    boxes = [[(1, 12.0, 12.0, 10.0, 8.0)], [(2, 20.0, 16.0, 14.0, 20.0), (0, 6.0, 6.0, 6.0, 6.0)]]
    off, on = loss_terms(boxes), loss_terms(boxes, use_l1=True)
    for got in (off, on):
        assert got["num_fg"] >= 3  # every ground truth takes at least one anchor
        assert got["iou"] > 0 and got["obj"] > 0 and got["cls"] > 0
        assert np.isfinite(list(got.values())).all()
    assert off["l1"] == 0.0 and on["l1"] > 0
    for key in ("iou", "obj", "cls", "num_fg"):  # the switch changes nothing else
        assert on[key] == pytest.approx(off[key], rel=1e-6)
    assert on["total"] == pytest.approx(on["iou"] + on["obj"] + on["cls"] + on["l1"], rel=1e-5)
