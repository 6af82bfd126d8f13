"""The YOLOX loss: meaning of its terms, and parity with YOLOX 0.3.0 ``get_losses``."""

from __future__ import annotations

import mindspore as ms
import numpy as np
import pytest

from msdet.models.loss import YOLOXLoss
from tests.support.loss_cases import anchor_grid, random_raw_outputs, random_targets
from tests.support.torch_reference import require_yolox

# Every test here takes seconds: it compiles, trains or starts a process.
pytestmark = pytest.mark.slow

IMG, C, M = 128, 4, 40
COMPONENTS = ("total", "iou", "obj", "cls", "l1")


def run_msdet(raw, grids, strides, targets, mask, use_l1, rule="yolox-0.3.0"):
    loss = YOLOXLoss(C, assigner_rule=rule)
    loss.use_l1.set_data(ms.Tensor(float(use_l1), ms.float32))
    out = loss(*(ms.Tensor(a) for a in (raw, grids, strides, targets, mask)))
    return {k: float(v.asnumpy()) for k, v in zip(COMPONENTS + ("num_fg",), out)}


def yolox_losses(raw_t, grids, strides, targets, mask, use_l1):
    """YOLOX 0.3.0's get_losses on the raw outputs ``raw_t`` (a torch tensor; its decoding
    reproduced here): (loss, iou, obj, cls, l1, fg_ratio)."""
    require_yolox()
    import torch
    from yolox.models import YOLOXHead

    head = YOLOXHead(C, width=0.25)
    head.use_l1 = bool(use_l1)
    grid_t, stride_t = torch.from_numpy(grids), torch.from_numpy(strides)
    xy = (raw_t[..., :2] + grid_t) * stride_t[:, None]
    wh = torch.exp(raw_t[..., 2:4]) * stride_t[:, None]
    outputs = torch.cat((xy, wh, raw_t[..., 4:]), -1)
    labels = torch.from_numpy(targets * mask[..., None])
    return head.get_losses(
        None,
        [grid_t[None, :, 0]],
        [grid_t[None, :, 1]],
        [stride_t[None]],
        labels,
        outputs,
        [raw_t[..., :4]],
        dtype=torch.float32,
    )


def run_yolox(raw, grids, strides, targets, mask, use_l1):
    """YOLOX 0.3.0's loss terms on the same raw outputs."""
    import torch

    with torch.no_grad():
        loss, iou, obj, cls, l1, fg_ratio = yolox_losses(
            torch.from_numpy(raw), grids, strides, targets, mask, use_l1
        )
    num_gts = max(float(mask.sum()), 1.0)
    vals = {"total": loss, "iou": iou, "obj": obj, "cls": cls, "l1": l1}
    out = {k: float(v) for k, v in vals.items()}
    out["num_fg"] = round(float(fg_ratio) * num_gts)
    return out


def test_images_without_objects_have_only_objectness_loss():
    rng = np.random.default_rng(0)
    grids, strides = anchor_grid(IMG)
    raw = random_raw_outputs(rng, 2, len(strides), C)
    targets, mask = random_targets(rng, [0, 0], IMG, C, M)
    out = run_msdet(raw, grids, strides, targets, mask, use_l1=True)
    assert out["iou"] == 0.0 and out["cls"] == 0.0 and out["l1"] == 0.0 and out["num_fg"] == 0
    assert out["obj"] > 0 and out["total"] == pytest.approx(out["obj"])
    # With no foreground the normaliser is 1: objectness BCE summed over all anchors.
    logits = raw[..., 4].astype(np.float64)
    expected = np.sum(np.maximum(logits, 0) + np.log1p(np.exp(-np.abs(logits))))
    assert out["obj"] == pytest.approx(expected, rel=1e-5)  # 4.5e-7 under every CPU variant


def test_l1_term_only_when_switched_on():
    rng = np.random.default_rng(1)
    grids, strides = anchor_grid(IMG)
    raw = random_raw_outputs(rng, 2, len(strides), C)
    targets, mask = random_targets(rng, [3, 5], IMG, C, M)
    off = run_msdet(raw, grids, strides, targets, mask, use_l1=False)
    on = run_msdet(raw, grids, strides, targets, mask, use_l1=True)
    assert off["l1"] == 0.0 and on["l1"] > 0
    assert on["total"] == pytest.approx(off["total"] + on["l1"], rel=1e-6)  # measured 3e-8
    assert on["num_fg"] == off["num_fg"] > 0


CASES = {
    "mixed": [3, 7, 1, 12],
    "with_empty_images": [0, 4, 0, 2],
    "crowded": [30, 40, 25, 35],
    "single_object": [1, 1, 1, 1],
}


@pytest.mark.torch
@pytest.mark.parametrize("use_l1", [False, True])
# One case in the fast tier (empty images and objects); all four in the full suite.
@pytest.mark.parametrize(
    "case",
    [
        c if c == "with_empty_images" else pytest.param(c, marks=pytest.mark.slow)
        for c in sorted(CASES)
    ],
)
def test_loss_matches_yolox_0_3_0(case, use_l1):
    rng = np.random.default_rng(sorted(CASES).index(case))
    grids, strides = anchor_grid(IMG)
    counts = CASES[case]
    raw = random_raw_outputs(rng, len(counts), len(strides), C)
    targets, mask = random_targets(rng, counts, IMG, C, M)
    ours = run_msdet(raw, grids, strides, targets, mask, use_l1)
    ref = run_yolox(raw, grids, strides, targets, mask, use_l1)
    print(f"\n{case} l1={use_l1}: msdet {ours}\n  yolox {ref}")
    assert ours["num_fg"] == ref["num_fg"] > 0
    for k in COMPONENTS:  # measured <= 4.7e-7 relative under every CPU variant
        assert ours[k] == pytest.approx(ref[k], rel=1e-4, abs=1e-6), k


@pytest.mark.torch
@pytest.mark.parametrize(
    "seed, counts, use_l1",
    [(2, [6, 9, 2, 4], True), pytest.param(1, [1, 0, 1, 3], False, marks=pytest.mark.slow)],
)
def test_loss_gradient_matches_yolox_0_3_0(seed, counts, use_l1):
    """The gradient of the total loss with respect to the head's raw outputs is the one
    PyTorch's autograd computes through YOLOX 0.3.0's get_losses (measured: at most 5.7e-7
    apart where the largest entry is 0.15-0.42)."""
    import torch

    rng = np.random.default_rng(seed)
    grids, strides = anchor_grid(IMG)
    raw = random_raw_outputs(rng, len(counts), len(strides), C)
    targets, mask = random_targets(rng, counts, IMG, C, M)
    loss = YOLOXLoss(C)
    loss.use_l1.set_data(ms.Tensor(float(use_l1), ms.float32))
    consts = [ms.Tensor(a) for a in (grids, strides, targets, mask)]

    def total(r):
        return loss(r, *consts)[0]

    _, grad = ms.value_and_grad(total)(ms.Tensor(raw))
    raw_t = torch.from_numpy(raw).requires_grad_(True)
    yolox_losses(raw_t, grids, strides, targets, mask, use_l1)[0].backward()
    ref = raw_t.grad.numpy()
    assert np.abs(ref[..., :4]).max() > 0.01 and np.abs(ref[..., 5:]).max() > 0.01
    np.testing.assert_allclose(grad.asnumpy(), ref, rtol=1e-4, atol=5e-6)


def far_from_every_box(grids, strides, targets, mask, radius=2.5):
    """[B, A] True for anchors that are no SimOTA candidate of any ground truth."""
    centers = (grids + 0.5) * strides[:, None]
    far = np.ones((len(targets), len(grids)), bool)
    for b in range(len(targets)):
        for _, cx, cy, w, h in targets[b][mask[b] > 0]:
            # The box and the centre region both lie inside the larger of the two extents.
            extent = np.maximum(np.array([[w / 2, h / 2]]), radius * strides[:, None])
            near = np.abs(centers - [cx, cy]) < extent
            far[b] &= ~near.all(1)
    return far


def test_overflowing_box_logits_at_background_anchors_keep_loss_and_gradients_finite():
    """exp(100) overflows float32: such a background box must neither change the loss nor
    turn the gradient into NaN (0 x inf behind a select)."""
    import mindspore as ms

    rng = np.random.default_rng(5)
    grids, strides = anchor_grid(IMG)
    raw = random_raw_outputs(rng, 2, len(strides), C)
    targets, mask = random_targets(rng, [3, 2], IMG, C, M)
    far = far_from_every_box(grids, strides, targets, mask)
    assert far.sum() > 50
    huge = raw.copy()
    huge[far, 2:4] = 100.0
    loss = YOLOXLoss(C)
    loss.use_l1.set_data(ms.Tensor(1.0, ms.float32))
    consts = [ms.Tensor(a) for a in (grids, strides, targets, mask)]

    def total(r):
        return loss(r, *consts)[0]

    grad_fn = ms.value_and_grad(total)
    base, base_grad = grad_fn(ms.Tensor(raw))
    value, grad = grad_fn(ms.Tensor(huge))
    # the masked anchors drop out exactly: loss and gradients are bit-equal (measured)
    assert float(value.asnumpy()) == pytest.approx(float(base.asnumpy()), rel=1e-6)
    assert np.isfinite(grad.asnumpy()).all()
    # Only the objectness/class terms reach a background anchor: its box gradient is 0.
    np.testing.assert_array_equal(grad.asnumpy()[far][:, :4], 0.0)
    np.testing.assert_allclose(grad.asnumpy(), base_grad.asnumpy(), rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("counts", [[3, 7, 1, 12], [0, 4, 0, 2]])
def test_a_batch_trimmed_to_its_target_bucket_has_the_same_loss_and_gradient(counts):
    """data.target_buckets drops padding rows only: every loss term, the foreground count
    and the gradient of the head's outputs are those of the fully padded batch."""
    from msdet.data.buckets import TrimToBucket

    rng = np.random.default_rng(7)
    grids, strides = anchor_grid(IMG)
    raw = random_raw_outputs(rng, len(counts), len(strides), C)
    targets, mask = random_targets(rng, counts, IMG, C, M)
    cut_targets, cut_mask = TrimToBucket((4, 16, M))(targets, mask)
    assert cut_targets.shape[1] == (16 if max(counts) > 4 else 4) < M

    loss = YOLOXLoss(C)
    loss.use_l1.set_data(ms.Tensor(1.0, ms.float32))
    anchors = ms.Tensor(grids), ms.Tensor(strides)

    def total(r, t, m):
        return loss(r, *anchors, t, m)[0]

    grad = ms.value_and_grad(total)

    def run(t, m):
        out = loss(ms.Tensor(raw), *anchors, ms.Tensor(t), ms.Tensor(m))
        _, g = grad(ms.Tensor(raw), ms.Tensor(t), ms.Tensor(m))
        return [float(v.asnumpy()) for v in out], g.asnumpy()

    (full, full_grad), (cut, cut_grad) = run(targets, mask), run(cut_targets, cut_mask)
    assert full[5] > 0 and full[0] > full[2] > 0  # foreground found, more than objectness
    assert cut == full  # every term, to the bit
    assert np.abs(full_grad).max() > 0
    np.testing.assert_array_equal(cut_grad, full_grad)
