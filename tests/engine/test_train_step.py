"""The training step: EMA ramp, loss scaling and overflow skipping, gradient clipping."""

from __future__ import annotations

import math

import mindspore as ms
import numpy as np
import pytest
from mindspore import Parameter, nn, ops
from omegaconf import OmegaConf

from engine.optim import build_optimizer
from engine.train_step import ModelEMA, TrainStep

SGD_CFG = OmegaConf.create({"momentum": 0.9, "nesterov": True, "weight_decay": 0.0})


class Quadratic(nn.Cell):
    """loss = sum((w - x)^2) with the output tuple shape of DetectorWithLoss."""

    def __init__(self):
        super().__init__()
        self.w = Parameter(ms.Tensor(np.array([1.0, -2.0], np.float32)), name="w")

    def construct(self, x, targets, mask):
        loss = ((self.w - x) ** 2).sum() * targets.sum() * mask.sum()
        zero = ops.zeros((), ms.float32)
        return loss, zero, zero, zero, zero, zero


def make_step(**kwargs):
    net = Quadratic()
    step = TrainStep(net, build_optimizer(net, 0.1, SGD_CFG), **kwargs)
    return net, step


def call(step, x):
    one = ms.Tensor(np.ones(1, np.float32))
    return step(ms.Tensor(np.asarray(x, np.float32)), one, one)


def test_ema_follows_yolox_ramp():
    net = Quadratic()
    ema = ModelEMA(net, decay=0.9998)
    start = net.w.asnumpy().copy()
    net.w.set_data(ms.Tensor(np.array([3.0, 3.0], np.float32)))
    ema()
    d = 0.9998 * (1 - math.exp(-1 / 2000))
    np.testing.assert_allclose(ema.averages[0].asnumpy(), d * start + (1 - d) * 3.0, rtol=1e-6)
    assert float(ema.updates.asnumpy()) == 1.0
    assert ema.averages[0].name == "ema.w"


def test_fixed_loss_scale_gives_unscaled_update():
    net, step = make_step(loss_scale=1024.0)
    _, ref = make_step(loss_scale=1.0)
    out = call(step, [0.0, 0.0])
    call(ref, [0.0, 0.0])
    np.testing.assert_allclose(net.w.asnumpy(), ref.net_with_loss.w.asnumpy(), rtol=1e-6)
    assert float(out[7].asnumpy()) == 1024.0 and not bool(out[8].asnumpy())


def test_dynamic_scale_skips_overflowed_step_and_halves_scale():
    net, step = make_step(loss_scale=2.0**20, dynamic_scale=True, scale_window=2)
    before = net.w.asnumpy().copy()
    out = call(step, [np.inf, 0.0])  # gradient is inf: the step must change nothing
    assert bool(out[8].asnumpy())
    np.testing.assert_array_equal(net.w.asnumpy(), before)
    assert float(step.scale.asnumpy()) == 2.0**19
    call(step, [0.0, 0.0])
    call(step, [0.0, 0.0])  # two good steps (window 2): the scale grows back
    assert float(step.scale.asnumpy()) == 2.0**20
    assert not np.array_equal(net.w.asnumpy(), before)


def test_gradient_clipping_bounds_the_update():
    net, step = make_step(clip_norm=0.5)
    before = net.w.asnumpy().copy()
    call(step, [100.0, 100.0])  # raw gradient norm ~280
    # First SGD step with nesterov momentum: delta = lr * (1 + momentum) * g.
    assert np.linalg.norm(net.w.asnumpy() - before) == pytest.approx(0.1 * 1.9 * 0.5, rel=1e-4)
