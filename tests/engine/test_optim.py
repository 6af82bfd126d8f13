"""Learning-rate schedule and optimizer parameter groups, as YOLOX's."""

from __future__ import annotations

import numpy as np
import pytest

from engine.optim import scaled_lr, split_decay_params, yolox_lr_schedule
from models.yolox import build_model, load_model_config
from tests.torch_reference import require_yolox


def test_schedule_shape_warmup_cosine_and_flat_tail():
    lrs = yolox_lr_schedule(
        0.01, steps_per_epoch=10, epochs=20, warmup_epochs=2, no_aug_epochs=3, min_lr_ratio=0.05
    )
    assert lrs.shape == (200,)
    assert lrs[0] == pytest.approx(0.01 * (1 / 20) ** 2)  # quadratic warm-up from 0
    assert lrs[19] == pytest.approx(0.01)  # end of warm-up: the full rate
    assert np.all(np.diff(lrs[20:170]) <= 1e-12)  # cosine decreases
    assert np.all(lrs[169:] == pytest.approx(0.0005))  # last 3 epochs at 5%


@pytest.mark.torch
def test_schedule_equals_yolox_scheduler():
    require_yolox()
    from yolox.utils.lr_scheduler import LRScheduler

    ref = LRScheduler(
        "yoloxwarmcos",
        0.02,
        iters_per_epoch=7,
        total_epochs=12,
        warmup_epochs=2,
        warmup_lr_start=0.0,
        no_aug_epochs=3,
        min_lr_ratio=0.05,
    )
    ours = yolox_lr_schedule(0.02, 7, 12, 2, 3, 0.05, 0.0)
    # YOLOX updates the rate before each step with the 1-based iteration count.
    np.testing.assert_allclose(ours, [ref.update_lr(i + 1) for i in range(7 * 12)], rtol=1e-6)


def test_lr_scales_with_total_batch():
    assert scaled_lr(0.01 / 64, 64) == pytest.approx(0.01)
    assert scaled_lr(0.01 / 64, 8 * 8) == pytest.approx(0.01)
    assert scaled_lr(0.01 / 64, 8) == pytest.approx(0.00125)


def test_weight_decay_only_on_conv_weights():
    net = build_model(load_model_config("yolox_nano"), 3)
    decay, no_decay = split_decay_params(net)
    assert all(p.name.endswith(".weight") and p.ndim == 4 for p in decay)
    names = {p.name for p in no_decay}
    assert "backbone.backbone.stem.conv.bn.gamma" in names  # BN weights: no decay
    assert "backbone.backbone.stem.conv.bn.beta" in names
    assert "head.cls_preds.0.bias" in names  # biases: no decay
    # As YOLOX's groups: every conv has a weight with decay (113 convs in nano).
    assert len(decay) == 113
    assert len(decay) + len(no_decay) == len(net.trainable_params())
