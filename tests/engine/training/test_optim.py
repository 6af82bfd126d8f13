"""Learning-rate schedule and optimizer parameter groups, as YOLOX's."""

from __future__ import annotations

import mindspore as ms
import numpy as np
import pytest
from mindspore import Parameter, nn

from msdet.engine.training.optim import (
    DecayInKernelSGD,
    scaled_lr,
    split_decay_params,
    yolox_lr_schedule,
)
from msdet.models.yolox import build_model, load_model_config
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


class Weights(nn.Cell):
    """A decayed weight and an undecayed one."""

    def __init__(self):
        super().__init__()
        rng = np.random.default_rng(0)
        self.a = Parameter(ms.Tensor(rng.normal(size=(3, 2, 2)).astype(np.float32)), name="a")
        self.b = Parameter(ms.Tensor(rng.normal(size=(5,)).astype(np.float32)), name="b")


def test_sgd_weight_decay_in_the_kernel_matches_mindspores_decay_pass():
    """DecayInKernelSGD hands the decay to each SGD kernel; the updates are nn.SGD's."""

    def run(cls):
        net = Weights()
        params = [p for p in net.get_parameters() if p.requires_grad]
        groups = [
            {"params": params[:1], "weight_decay": 0.05},
            {"params": params[1:], "weight_decay": 0.0},
        ]
        opt = cls(groups, learning_rate=0.1, momentum=0.9, nesterov=True, weight_decay=0.0)
        rng = np.random.default_rng(1)
        for _ in range(3):
            grads = tuple(ms.Tensor(rng.normal(size=p.shape).astype(np.float32)) for p in params)
            opt(grads)
        return [p.asnumpy().copy() for p in params]

    ours, theirs = run(DecayInKernelSGD), run(nn.SGD)
    start = Weights()
    assert not np.allclose(ours[0], start.a.asnumpy())  # the weights moved
    for a, b in zip(ours, theirs):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
