"""Greedy NMS on the compiled operator (kernels/greedy_nms.cc): the same masks as
MindSpore's NMSWithMask, and BatchedNMS on it the same detections as on NMSWithMask."""

from __future__ import annotations

import mindspore as ms
import numpy as np
import pytest

from msdet.ops.nms import BatchedNMS, greedy_nms_op, postprocess_numpy, suppress
from tests.support.nms import random_predictions, run_nms

pytestmark = pytest.mark.usefixtures("graph_mode")

IOU = 0.5


def nms_with_mask(boxes: np.ndarray, valid: np.ndarray, iou: float) -> np.ndarray:
    """MindSpore's NMSWithMask per image on rows already in order (rank as the score),
    and-ed with ``valid``: what BatchedNMS computes without the kernel."""
    nms = ms.ops.NMSWithMask(iou)
    k = boxes.shape[1]
    rank = np.arange(k, 0, -1, dtype=np.float32)[:, None]
    masks = [nms(ms.Tensor(np.concatenate((b, rank), 1)))[2].asnumpy() for b in boxes]
    return np.stack(masks) & (valid > 0.5)


def crowded_boxes(seed: int, batch: int, k: int) -> tuple[np.ndarray, np.ndarray]:
    """xyxy boxes [B, k, 4] in clusters (so that many overlap, some at IoUs close to the
    threshold), and valid [B, k] with a different number of candidates per image, one image
    with none and one with all."""
    rng = np.random.default_rng(seed)
    centres = rng.uniform(0, 300, (batch, k // 8, 2)).repeat(8, 1)[:, :k]
    centres = centres + rng.normal(0, 6, (batch, k, 2))
    half = rng.uniform(4, 40, (batch, k, 2))
    boxes = np.concatenate((centres - half, centres + half), -1).astype(np.float32)
    counts = rng.integers(1, k, batch)
    counts[0], counts[-1] = 0, k
    valid = (np.arange(k)[None] < counts[:, None]).astype(np.float32)
    return boxes, valid


def exact_ties() -> tuple[np.ndarray, np.ndarray]:
    """Pairs whose IoU is exactly the threshold (kept: suppression needs IoU > threshold),
    just above it (suppressed), zero-area boxes and identical boxes, in one image."""
    rows = [
        [0, 0, 3, 1], [1, 0, 4, 1],  # intersection 2, union 4: IoU 0.5 exactly -> kept
        [10, 0, 13, 1], [10.9, 0, 13.9, 1],  # IoU 2.1 / 3.9 > 0.5 -> suppressed
        [20, 20, 20, 20], [20, 20, 20, 20],  # zero area: 0 / 0 is not > 0.5 -> both kept
        [30, 30, 40, 40], [30, 30, 40, 40],  # identical -> the second suppressed
    ]  # fmt: skip
    boxes = np.asarray(rows, np.float32)[None]
    return boxes, np.ones(boxes.shape[:2], np.float32)


def kernel_mask(library, boxes, valid, iou):
    op = greedy_nms_op(library)
    hyper = ms.Tensor([iou], ms.float32)
    return op(ms.Tensor(boxes), ms.Tensor(valid), hyper).asnumpy() > 0.5


@pytest.mark.parametrize("seed", [0, 1])
def test_the_masks_equal_nms_with_masks(library, seed):
    boxes, valid = crowded_boxes(seed, batch=6, k=600)
    got = kernel_mask(library, boxes, valid, IOU)
    expected = nms_with_mask(boxes, valid, IOU)
    np.testing.assert_array_equal(got, expected)
    counts = valid.sum(1).astype(int)
    kept = expected.sum(1)
    assert kept[0] == 0 and (kept[1:] > 0).all()
    assert (counts - kept)[1:].min() > 0, "every image with candidates had something suppressed"


def test_invalid_rows_anywhere_are_skipped(library):
    """Rows marked invalid between valid ones are neither kept nor suppress anything: the
    result is greedy NMS over the valid rows alone (BatchedNMS's invalid rows all come last,
    where NMSWithMask gives the same)."""
    boxes, _ = crowded_boxes(2, batch=2, k=400)
    valid = (np.random.default_rng(3).uniform(size=(2, 400)) < 0.5).astype(np.float32)
    got = kernel_mask(library, boxes, valid, IOU)
    for b in range(2):
        idx = np.flatnonzero(valid[b])
        expected = np.zeros(400, bool)
        expected[suppress(boxes[b], np.zeros(400), idx, IOU, agnostic=True)] = True
        np.testing.assert_array_equal(got[b], expected)
        assert 0 < expected.sum() < len(idx)


def test_ties_at_the_threshold_and_degenerate_boxes(library):
    boxes, valid = exact_ties()
    got = kernel_mask(library, boxes, valid, IOU)
    np.testing.assert_array_equal(got, nms_with_mask(boxes, valid, IOU))
    assert got[0].tolist() == [True, True, True, False, True, True, True, False]


@pytest.mark.slow
@pytest.mark.parametrize("class_agnostic", [False, True])
def test_batched_nms_on_the_kernel_gives_the_same_detections(library, class_agnostic):
    """At 80 classes and eval's default top-k, on the kernel and on NMSWithMask: the same
    detections bit for bit, and those of the numpy reference."""
    preds = random_predictions(np.random.default_rng(7), 4, 3549, 80, size=416.0)
    preds[..., 5 + 6 :] *= 0.1  # most anchors in 6 classes: same-class overlaps to suppress
    preds[1, :, 4] *= 0.02  # one image with few candidates above the threshold
    settings = dict(conf_thresh=0.01, iou_thresh=0.65, pre_nms_topk=1000, max_det=300)
    settings["class_agnostic"] = class_agnostic
    native = run_nms(BatchedNMS(80, **settings, library=None), preds)
    compiled = run_nms(BatchedNMS(80, **settings, library=library), preds)
    np.testing.assert_array_equal(compiled[1], native[1])
    np.testing.assert_array_equal(compiled[0], native[0])
    assert native[1].min() > 20, "detections to compare"
    expected = postprocess_numpy(preds, 80, **settings)
    assert [len(e) for e in expected] == native[1].tolist()


@pytest.mark.slow
def test_no_candidates_give_no_detections(library):
    preds = random_predictions(np.random.default_rng(8), 2, 500, 3)
    preds[..., 4] = 1e-4  # every score under conf_thresh
    dets, counts = run_nms(BatchedNMS(3, 0.01, 0.65, 100, 50, library=library), preds)
    assert counts.tolist() == [0, 0] and not dets.any()
