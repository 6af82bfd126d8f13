"""BatchedNMS keeps exactly what greedy NMS and YOLOX's postprocess keep, in static shapes."""

from __future__ import annotations

import mindspore as ms
import numpy as np
import pytest

from msdet.ops.nms import ASCEND_MAX_NMS_BOXES, BatchedNMS, greedy_nms, postprocess_numpy
from tests.support.nms import random_predictions, run_nms

pytestmark = pytest.mark.usefixtures("graph_mode")


def prediction_rows(boxes_xyxy, obj, cls_probs) -> np.ndarray:
    """Predictions [1, N, 5 + C] from xyxy boxes, objectness and class probabilities."""
    boxes = np.asarray(boxes_xyxy, np.float32)
    centers = (boxes[:, :2] + boxes[:, 2:]) / 2
    sizes = boxes[:, 2:] - boxes[:, :2]
    rows = np.concatenate(
        (centers, sizes, np.asarray(obj, np.float32)[:, None], np.asarray(cls_probs, np.float32)), 1
    )
    return rows[None]


def assert_matches_reference(dets, counts, expected: list[np.ndarray]) -> None:
    for i, ref in enumerate(expected):
        assert counts[i] == len(ref)
        # Equal on every CPU (0 measured): boxes are cx -+ w * 0.5 (exact halving) and a
        # score is one product, each correctly rounded; nothing is summed.
        np.testing.assert_allclose(dets[i, : counts[i]], ref, rtol=0, atol=1e-5)
        assert not dets[i, counts[i] :].any(), "rows after the count must be zero"


@pytest.mark.slow
@pytest.mark.parametrize(
    ("anchors", "topk", "class_agnostic"),
    [(1000, 1000, False), (5000, 2864, False), (5000, 2864, True)],
)
def test_kept_set_equals_numpy_greedy_nms(anchors, topk, class_agnostic):
    rng = np.random.default_rng(anchors)
    preds = random_predictions(rng, 2, anchors, num_classes=4)
    settings = dict(
        conf_thresh=0.05,
        iou_thresh=0.5,
        pre_nms_topk=topk,
        max_det=3000,
        class_agnostic=class_agnostic,
    )
    dets, counts = run_nms(BatchedNMS(4, **settings), preds)
    expected = postprocess_numpy(preds, 4, **settings)
    assert_matches_reference(dets, counts, expected)
    candidates = min(topk, int(((preds[0, :, 4] * preds[0, :, 5:].max(1)) >= 0.05).sum()))
    assert 0 < counts[0] < candidates, "the case must suppress some boxes but not all"
    assert len(np.unique(dets[0, : counts[0], 5])) == 4
    assert np.all(np.diff(dets[0, : counts[0], 4]) <= 0), "sorted by score"


@pytest.mark.slow
def test_max_det_keeps_the_highest_scores_and_pads_small_inputs():
    rng = np.random.default_rng(1)
    preds = random_predictions(rng, 3, 60, num_classes=2)
    dets, counts = run_nms(BatchedNMS(2, 0.0, 0.65, pre_nms_topk=40, max_det=100), preds)
    assert dets.shape == (3, 100, 6) and counts.dtype == np.int32
    expected = postprocess_numpy(preds, 2, 0.0, 0.65, pre_nms_topk=40, max_det=100)
    assert_matches_reference(dets, counts, expected)

    dets, counts = run_nms(BatchedNMS(2, 0.0, 0.65, pre_nms_topk=40, max_det=5), preds)
    assert dets.shape == (3, 5, 6) and list(counts) == [5, 5, 5]
    for i in range(3):
        np.testing.assert_allclose(dets[i], expected[i][:5], atol=1e-6)


@pytest.mark.slow
def test_no_candidates_gives_zero_count_and_zero_rows():
    rng = np.random.default_rng(2)
    preds = random_predictions(rng, 2, 200, num_classes=3)
    preds[..., 4] = 0.001  # every score < 0.01
    dets, counts = run_nms(BatchedNMS(3, 0.01, 0.65, 100, 10), preds)
    assert list(counts) == [0, 0]
    assert not dets.any()


@pytest.mark.slow
def test_score_threshold_is_inclusive_like_yolox():
    preds = prediction_rows(
        [[0, 0, 10, 10], [50, 50, 60, 60]], obj=[0.5, 0.5], cls_probs=[[0.5], [0.25]]
    )
    dets, counts = run_nms(
        BatchedNMS(1, conf_thresh=0.25, iou_thresh=0.65, pre_nms_topk=2, max_det=2), preds
    )
    assert counts[0] == 1
    np.testing.assert_allclose(dets[0, 0], [0, 0, 10, 10, 0.25, 0])


@pytest.mark.slow
def test_duplicates_collapse_to_the_best_box_per_class():
    boxes = [[10, 10, 50, 50]] * 6 + [[11, 11, 51, 51]]
    obj = [0.3, 0.9, 0.5, 0.6, 0.8, 0.7, 0.95]
    # Anchors 0-4 are class 0 (best: anchor 1, 0.9 * 0.9), anchors 5-6 class 1 (best:
    # anchor 6, 0.95 * 0.8); the offset box 6 overlaps the others with IoU 0.91.
    cls = [[0.9, 0.1]] * 5 + [[0.1, 0.9], [0.2, 0.8]]
    preds = prediction_rows(boxes, obj, cls)
    dets, counts = run_nms(BatchedNMS(2, 0.01, 0.65, pre_nms_topk=7, max_det=7), preds)
    assert counts[0] == 2  # one per class; every other box is suppressed by its class's best
    np.testing.assert_allclose(dets[0, :2, 4], [0.9 * 0.9, 0.95 * 0.8], rtol=1e-6)
    np.testing.assert_array_equal(dets[0, :2, 5], [0, 1])
    np.testing.assert_allclose(dets[0, :2, :4], [[10, 10, 50, 50], [11, 11, 51, 51]])
    dets, counts = run_nms(
        BatchedNMS(2, 0.01, 0.65, pre_nms_topk=7, max_det=7, class_agnostic=True), preds
    )
    assert counts[0] == 1 and dets[0, 0, 5] == 0


@pytest.mark.slow
def test_iou_exactly_at_threshold_is_kept():
    # Suppression needs IoU > threshold. Left pair: IoU([0,0,10,10], [0,0,10,5]) = 0.5
    # exactly, both kept; right pair: IoU([100,0,110,10], [100,0,110,5.2]) = 0.52, suppressed.
    boxes = [[0, 0, 10, 10], [0, 0, 10, 5], [100, 0, 110, 10], [100, 0, 110, 5.2]]
    preds = prediction_rows(boxes, obj=[0.9, 0.8, 0.7, 0.6], cls_probs=[[1.0]] * 4)
    dets, counts = run_nms(BatchedNMS(1, 0.01, iou_thresh=0.5, pre_nms_topk=4, max_det=4), preds)
    assert counts[0] == 3
    np.testing.assert_allclose(dets[0, :3, 4], [0.9, 0.8, 0.7], rtol=1e-6)


@pytest.mark.slow
def test_non_finite_predictions_are_never_kept():
    rng = np.random.default_rng(3)
    preds = random_predictions(rng, 1, 300, num_classes=3)
    # NaN objectness, NaN in the first / a middle class column, NaN centre, inf width, inf
    # objectness: each anchor must be dropped as YOLOX's NaN comparisons drop it.
    bad = {
        0: (4, np.nan),
        1: (5, np.nan),
        2: (6, np.nan),
        3: (0, np.nan),
        4: (2, np.inf),
        5: (4, np.inf),
    }
    # The best-scoring anchors are the corrupted ones, so a NaN that slipped through would
    # be kept first and sorted wrong.
    preds[0, list(bad), 4] = 1.0
    preds[0, list(bad), 5:] = 0.9
    for row, (col, value) in bad.items():
        preds[0, row, col] = value
    dets, counts = run_nms(BatchedNMS(3, 0.01, 0.65, 300, 300), preds)
    assert np.isfinite(dets).all()
    clean = preds.copy()
    clean[0, list(bad), 4] = 0.0  # the same anchors, simply below the threshold
    assert_matches_reference(dets, counts, postprocess_numpy(clean, 3, 0.01, 0.65, 300, 300))


@pytest.mark.slow
def test_float16_predictions_match_float32_and_large_offsets_do_not_overflow():
    rng = np.random.default_rng(4)
    preds16 = random_predictions(rng, 2, 500, num_classes=3).astype(np.float16)
    nms = BatchedNMS(3, 0.05, 0.5, 500, 500)
    dets, counts = run_nms(nms, preds16)
    assert dets.dtype == np.float32
    assert_matches_reference(
        dets, counts, postprocess_numpy(preds16.astype(np.float32), 3, 0.05, 0.5, 500, 500)
    )

    # 80 classes at 1280 px: class offsets reach 79 * 1281 > 65504 (float16 max). Identical
    # boxes of classes 0 and 79 must both survive; two of class 79 must collapse to one.
    cls = np.zeros((3, 80), np.float32)
    cls[0, 0] = cls[1, 79] = cls[2, 79] = 0.9
    preds = prediction_rows([[1200, 1200, 1280, 1280]] * 3, obj=[0.9, 0.8, 0.7], cls_probs=cls)
    dets, counts = run_nms(BatchedNMS(80, 0.01, 0.65, 3, 3), preds.astype(np.float16))
    assert counts[0] == 2
    np.testing.assert_array_equal(dets[0, :2, 5], [0, 79])
    np.testing.assert_allclose(dets[0, :2, :4], [[1200, 1200, 1280, 1280]] * 2)


@pytest.mark.slow
def test_classes_stay_apart_for_boxes_left_of_the_image():
    # With torchvision's offset class * (max + 1) = 101, the class-1 box [-11, -1] lands
    # exactly on the class-0 box [90, 100] and would be suppressed; per-class NMS keeps both.
    cls = [[1.0, 0.0], [0.0, 1.0]]
    preds = prediction_rows([[90, 90, 100, 100], [-11, -11, -1, -1]], obj=[0.9, 0.8], cls_probs=cls)
    dets, counts = run_nms(BatchedNMS(2, 0.01, 0.65, 2, 2), preds)
    assert counts[0] == 2
    np.testing.assert_allclose(dets[0, 1, :4], [-11, -11, -1, -1])


def test_pre_nms_topk_above_the_ascend_limit_is_rejected():
    with pytest.raises(ValueError, match=r"eval\.pre_nms_topk.*2864"):
        BatchedNMS(80, pre_nms_topk=ASCEND_MAX_NMS_BOXES + 1)
    with pytest.raises(ValueError, match=r"eval\.nms_iou"):
        BatchedNMS(80, iou_thresh=0.0)


def test_greedy_nms_reference():
    boxes = np.array([[0, 0, 10, 10], [1, 1, 11, 11], [50, 50, 60, 60], [0, 0, 10, 10]], np.float32)
    scores = np.array([0.5, 0.9, 0.5, 0.4], np.float32)
    # IoU([0,0,10,10], [1,1,11,11]) = 81 / 119 = 0.68.
    np.testing.assert_array_equal(greedy_nms(boxes, scores, 0.5), [1, 2])
    np.testing.assert_array_equal(greedy_nms(boxes, scores, 0.7), [1, 0, 2])


@pytest.fixture(scope="module")
def yolox_outputs() -> np.ndarray:
    """Decoded outputs [2, 1344, 85] of a calibrated PyTorch YOLOX-nano at 256 px."""
    from tests.support.torch_reference import require_yolox

    require_yolox()
    import torch

    from msdet.models.yolox import load_model_config
    from msdet.porting.reference import build_torch_yolox, calibrate

    model = calibrate(build_torch_yolox(load_model_config("yolox_nano"), 80), img_size=256)
    x = np.random.default_rng(0).uniform(0, 255, (2, 3, 256, 256)).astype(np.float32)
    with torch.no_grad():
        return model(torch.from_numpy(x)).numpy()


@pytest.mark.slow
@pytest.mark.torch
@pytest.mark.parametrize(
    ("source", "class_agnostic"),
    [("model", False), ("model", True), ("crowded", False), ("crowded", True)],
)
def test_matches_yolox_postprocess(source, class_agnostic, yolox_outputs):
    """Identical predictions -> the detections of YOLOX's own ``postprocess``.

    ``model``: the outputs of a calibrated random-weight YOLOX-nano (hundreds of
    candidates, but small boxes that rarely overlap, so this checks decoding, scores and
    thresholding); ``crowded``: random predictions with heavy overlap, so NMS decides a lot.
    """
    from tests.support.torch_reference import require_yolox

    yolox = require_yolox()
    import torch

    if source == "model":
        preds = yolox_outputs
    else:
        preds = random_predictions(np.random.default_rng(5), 2, 2000, num_classes=80)
        preds[..., 5 + 4 :] *= 0.2  # most anchors in 4 classes: plenty of same-class overlap
    anchors = preds.shape[1]
    ref = yolox.utils.postprocess(
        torch.from_numpy(preds.copy()),
        80,
        conf_thre=0.01,
        nms_thre=0.65,
        class_agnostic=class_agnostic,
    )
    topk = min(anchors, ASCEND_MAX_NMS_BOXES)
    nms = BatchedNMS(80, 0.01, 0.65, pre_nms_topk=topk, max_det=topk, class_agnostic=class_agnostic)
    dets, counts = run_nms(nms, preds)
    suppressed = 0
    for i, out in enumerate(ref):
        out = out.numpy()
        expected = np.concatenate((out[:, :4], (out[:, 4] * out[:, 5])[:, None], out[:, 6:7]), 1)
        candidates = int((preds[i, :, 4] * preds[i, :, 5:].max(1) >= 0.01).sum())
        assert candidates <= topk, "YOLOX has no top-k: every candidate must enter NMS"
        suppressed += candidates - len(expected)
        assert counts[i] == len(expected)
        got = dets[i, : counts[i]]
        # Match as sets: the order may differ only where scores tie.
        got = got[np.lexsort(got.T[::-1])]
        expected = expected[np.lexsort(expected.T[::-1])]
        np.testing.assert_array_equal(got[:, [0, 1, 2, 3, 5]], expected[:, [0, 1, 2, 3, 5]])
        np.testing.assert_allclose(got[:, 4], expected[:, 4], rtol=0, atol=1e-4)  # 1 product: 0
    if source == "crowded":
        assert suppressed > 100, "NMS must have had something to suppress"
    else:
        assert counts.min() > 100


@pytest.mark.slow
@pytest.mark.parametrize("class_agnostic", [False, True])
def test_host_nms_equals_the_device_nms_at_80_classes_and_the_full_candidate_cap(class_agnostic):
    """The Atlas training series runs NMS on the host (its NMSWithMask is float16 only):
    the same detections as NMSWithMask in float32, with 80 classes and all 2,864 candidates
    ``eval.pre_nms_topk`` allows, boxes up to 832 px (class offsets up to 80 x 833 px)."""
    from msdet.ops.nms import HostNMS

    rng = np.random.default_rng(3)
    preds = random_predictions(rng, 2, 3500, 80, size=832.0)
    settings = dict(
        conf_thresh=0.0,
        iou_thresh=0.65,
        pre_nms_topk=ASCEND_MAX_NMS_BOXES,
        max_det=300,
        class_agnostic=class_agnostic,
    )
    device_dets, device_counts = run_nms(BatchedNMS(80, **settings), preds)
    host_dets, host_counts = HostNMS(80, **settings)(ms.Tensor(preds))
    assert host_dets.dtype == np.float32 and host_counts.dtype == np.int32
    assert device_counts.min() >= 100  # plenty kept: the comparison is not of empty sets
    np.testing.assert_array_equal(host_counts, device_counts)
    np.testing.assert_array_equal(host_dets, device_dets)
