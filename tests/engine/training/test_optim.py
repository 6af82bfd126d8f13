"""Learning-rate schedule and optimizer parameter groups, as YOLOX's."""

from __future__ import annotations

import mindspore as ms
import numpy as np
import pytest
from mindspore import Parameter, nn

from msdet.engine.training.optim import DecayInKernelSGD, split_decay_params
from msdet.engine.training.schedule import scaled_lr, yolox_lr_schedule
from msdet.models.yolox import build_model, load_model_config
from tests.support.torch_reference import require_yolox


def test_schedule_shape_warmup_cosine_and_flat_tail():
    lrs = yolox_lr_schedule(
        0.01, steps_per_epoch=10, epochs=20, warmup_epochs=2, no_aug_epochs=3, min_lr_ratio=0.05
    )
    assert lrs.shape == (200,)
    assert lrs[0] == 0.0  # the optimizer's initial rate: warmup_lr
    assert lrs[1] == pytest.approx(0.01 * (1 / 20) ** 2)  # quadratic warm-up from 0
    assert lrs[20] == pytest.approx(0.01)  # end of warm-up: the full rate
    assert np.all(np.diff(lrs[20:170]) <= 1e-12)  # cosine decreases
    assert np.all(lrs[170:] == pytest.approx(0.0005))  # last 3 epochs at 5%
    # Without a warm-up the first step runs at the full rate.
    assert yolox_lr_schedule(0.01, 10, 20, 0, 3)[0] == pytest.approx(0.01)


@pytest.mark.slow
@pytest.mark.torch
@pytest.mark.parametrize("warmup_epochs", [2, 0])
def test_each_step_runs_at_the_rate_yolox_trainer_gives_it(warmup_epochs):
    """YOLOX's Trainer: the optimizer starts at ``Exp.get_optimizer``'s rate (warmup_lr with
    a warm-up, the base rate without); after each step ``train_one_iter`` sets
    ``update_lr(progress_in_iter + 1)`` for the next one."""
    require_yolox()
    import torch
    from yolox.exp.yolox_base import Exp
    from yolox.utils.lr_scheduler import LRScheduler

    steps, epochs, batch = 7, 12, 8
    exp = Exp()
    exp.model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4))
    exp.warmup_epochs, exp.warmup_lr, exp.basic_lr_per_img = warmup_epochs, 0.0, 0.02 / batch
    optimizer = exp.get_optimizer(batch)
    scheduler = LRScheduler(
        "yoloxwarmcos",
        0.02,
        iters_per_epoch=steps,
        total_epochs=epochs,
        warmup_epochs=warmup_epochs,
        warmup_lr_start=0.0,
        no_aug_epochs=3,
        min_lr_ratio=0.05,
    )
    used = [optimizer.param_groups[0]["lr"]]
    for progress_in_iter in range(steps * epochs - 1):
        used.append(scheduler.update_lr(progress_in_iter + 1))
    ours = yolox_lr_schedule(0.02, steps, epochs, warmup_epochs, 3, 0.05, 0.0)
    np.testing.assert_allclose(ours, used, rtol=1e-6, atol=1e-12)


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


@pytest.mark.slow
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
