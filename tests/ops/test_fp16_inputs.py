"""float16 inputs (AMP on Ascend) must give the float32 result: the assigner's 1e9/1e5
costs and NMS's class offsets exceed float16's 65504, so both compute in float32."""

from __future__ import annotations

import mindspore as ms
import numpy as np
import pytest

from msdet.ops.assigner import SimOTAAssigner
from msdet.ops.nms import BatchedNMS
from tests.support.loss_cases import anchor_grid, random_raw_outputs, random_targets
from tests.support.nms import random_predictions

# Every test here takes seconds: it compiles, trains or starts a process.
pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("graph_mode")]


def as_fp16(*arrays):
    """Each array rounded to float16, as float16 and as the same values in float32."""
    half = [np.asarray(a, np.float16) for a in arrays]
    return half, [h.astype(np.float32) for h in half]


@pytest.mark.parametrize("rule", ["yolox-0.3.0", "yolox-latest"])
def test_assigner_given_float16_gives_the_float32_assignment(rule):
    rng = np.random.default_rng(3)
    img, c, m = 128, 4, 20
    grids, strides = anchor_grid(img)
    raw = random_raw_outputs(rng, 2, len(strides), c)
    targets, mask = random_targets(rng, [4, 6], img, c, m)
    boxes = np.concatenate(
        ((raw[..., :2] + grids) * strides[:, None], np.exp(raw[..., 2:4]) * strides[:, None]), -1
    )
    half, full = as_fp16(boxes, raw[..., 4], raw[..., 5:], targets[..., 1:5])
    classes, gt_mask = ms.Tensor(targets[..., 0].astype(np.int32)), ms.Tensor(mask)
    g, s = ms.Tensor(grids), ms.Tensor(strides)
    assigner = SimOTAAssigner(c, rule)

    def assign(b, obj, cls, gt):
        out = assigner(
            ms.Tensor(b), ms.Tensor(obj), ms.Tensor(cls), g, s, ms.Tensor(gt), classes, gt_mask
        )
        return [o.asnumpy() for o in out]

    got, want = assign(*half), assign(*full)
    assert want[3] > 0  # some foreground
    for name, a, b in zip(("fg", "matched_gt", "matched_iou", "num_fg"), got, want):
        assert a.dtype == b.dtype, name
        np.testing.assert_array_equal(a, b, err_msg=name)


def test_nms_given_float16_gives_the_float32_detections():
    # 80 classes at 832 px: class offsets reach 80 x 833 > 65504.
    rng = np.random.default_rng(4)
    preds = random_predictions(rng, 2, 2000, num_classes=80, size=832.0)
    (half,), (full,) = as_fp16(preds)
    nms = BatchedNMS(80, conf_thresh=0.01, iou_thresh=0.65, pre_nms_topk=1000, max_det=100)
    dets16, counts16 = (o.asnumpy() for o in nms(ms.Tensor(half)))
    dets32, counts32 = (o.asnumpy() for o in nms(ms.Tensor(full)))
    assert counts32.min() > 10
    np.testing.assert_array_equal(counts16, counts32)
    np.testing.assert_array_equal(dets16, dets32)
