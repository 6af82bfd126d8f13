"""The training samples against the original's own code (YOLOX 0.3.0's ``TrainTransform``
and ``COCODataset.pull_item``) where no random draw decides the result, or where the draw is
made the same on both sides: a sample without boxes, a sample whose every box is dropped, and
a plain (non-mosaic) sample's order of resize and colour jitter."""

from __future__ import annotations

import numpy as np
import pytest

from msdet.data.coco import CocoSource
from msdet.data.pipeline import AugmentParams, TrainSamples
from msdet.data.synthetic import ANN_FILES
from tests.support.torch_reference import require_yolox

pytestmark = pytest.mark.torch
SIZE = (320, 320)


def samples(source: CocoSource, hsv_prob: float, flip_prob: float) -> TrainSamples:
    aug = AugmentParams(mosaic_prob=0.0, mixup_prob=0.0, hsv_prob=hsv_prob, flip_prob=flip_prob)
    return TrainSamples(source, SIZE, 50, aug, seed=0, epochs=5, no_aug_epochs=1)


def yolox_transform(img, boxes, labels, hsv_prob: float, flip_prob: float):
    """YOLOX's TrainTransform on (image, xyxy boxes, labels): the image HWC uint8 and the
    targets (class, cx, cy, w, h) of its real rows."""
    require_yolox()
    from yolox.data import TrainTransform

    targets = np.concatenate([boxes, labels[:, None]], 1).astype(np.float32)
    image, padded = TrainTransform(50, flip_prob=flip_prob, hsv_prob=hsv_prob)(
        img.copy(), targets, SIZE
    )
    rows = padded[padded.sum(1) > 0] if len(boxes) else padded[:0]
    return image.transpose(1, 2, 0).astype(np.uint8), rows


def msdet_targets(boxes, labels):
    cxcywh = np.stack(
        [(boxes[:, 0] + boxes[:, 2]) / 2, (boxes[:, 1] + boxes[:, 3]) / 2,
         boxes[:, 2] - boxes[:, 0], boxes[:, 3] - boxes[:, 1]], 1,
    )  # fmt: skip
    return np.concatenate([labels[:, None], cxcywh], 1)


@pytest.fixture(scope="module")
def source(shapes_root) -> CocoSource:
    return CocoSource(shapes_root, ANN_FILES["train"], "train")


def test_a_sample_without_boxes_is_only_letterboxed(source):
    """YOLOX draws no colour jitter and no flip for an image without boxes."""
    img = np.random.default_rng(0).integers(0, 255, (200, 300, 3), dtype=np.uint8)
    none = np.zeros((0, 4), np.float32)
    expected, rows = yolox_transform(img, none, np.zeros(0), hsv_prob=1.0, flip_prob=1.0)
    got, boxes, labels = samples(source, 1.0, 1.0).train_transform(
        img, none, np.zeros(0, np.int64), np.random.default_rng(1)
    )
    assert len(rows) == len(boxes) == 0
    np.testing.assert_array_equal(got, expected)


def test_when_every_box_is_dropped_the_sample_is_yolox_fallback(source):
    """Every box 1 px or thinner after the letterbox: YOLOX goes back to the image before
    jitter and flip, with all its boxes, the thin ones included."""
    rng = np.random.default_rng(2)
    img = rng.integers(0, 255, (320, 320, 3), dtype=np.uint8)
    boxes = np.array([[10, 20, 10.8, 60], [100, 100, 140, 100.5], [5, 5, 5, 5]], np.float32)
    labels = np.array([0, 2, 1])
    expected, rows = yolox_transform(img, boxes, labels, hsv_prob=1.0, flip_prob=1.0)
    got, got_boxes, got_labels = samples(source, 1.0, 1.0).train_transform(
        img, boxes, labels, np.random.default_rng(3)
    )
    np.testing.assert_array_equal(got, expected)  # the unjittered, unflipped image
    assert len(rows) == 3
    np.testing.assert_allclose(msdet_targets(got_boxes, got_labels), rows, atol=1e-5)


def _fixed_hsv(img: np.ndarray) -> np.ndarray:
    """One colour jitter both sides apply: hue +10, saturation +25, value -20."""
    import cv2

    h, s, v = cv2.split(cv2.cvtColor(img, cv2.COLOR_BGR2HSV))
    h = ((h.astype(np.int16) + 10) % 180).astype(np.uint8)
    s = np.clip(s.astype(np.int16) + 25, 0, 255).astype(np.uint8)
    v = np.clip(v.astype(np.int16) - 20, 0, 255).astype(np.uint8)
    return cv2.cvtColor(cv2.merge((h, s, v)), cv2.COLOR_HSV2BGR)


def test_a_plain_sample_is_resized_before_its_colour_jitter(source, shapes_root, monkeypatch):
    """YOLOX's dataset hands TrainTransform the image already resized to fit (pull_item),
    so the jitter works on the small image; the same jitter on both sides gives the same
    pixels and boxes."""
    require_yolox()
    import yolox.data.data_augment as yolox_augment
    from yolox.data import COCODataset, TrainTransform

    import msdet.data.pipeline as pipeline

    def yolox_hsv(img, hgain=5, sgain=30, vgain=30):
        img[...] = _fixed_hsv(img)

    monkeypatch.setattr(yolox_augment, "augment_hsv", yolox_hsv)
    monkeypatch.setattr(pipeline, "hsv_jitter", lambda img, rng: _fixed_hsv(img))
    dataset = COCODataset(data_dir=shapes_root, json_file="instances_train.json", name="train",
                          img_size=SIZE, preproc=TrainTransform(50, 0.0, 1.0))  # fmt: skip
    ours = samples(source, hsv_prob=1.0, flip_prob=0.0)
    checked = 0
    for i in range(len(source)):
        if not source.has_objects(i):
            continue
        img, target, _, _ = dataset.pull_item(i)
        expected, rows = dataset.preproc(img, target, SIZE)
        got, boxes, labels = ours.sample(epoch=4, i=i)  # epoch 4: no mosaic
        np.testing.assert_array_equal(got, expected.transpose(1, 2, 0).astype(np.uint8))
        real = rows[rows.sum(1) > 0]
        np.testing.assert_allclose(msdet_targets(boxes, labels), real, atol=1e-3)
        checked += 1
        if checked == 4:
            break
    assert checked == 4
