"""A tiny model trained with multi-scale through ``Model.train``, reporting the input size
each step really ran at (tests/engine/training/test_multiscale.py, in process and in fresh
processes through tests/engine/training/multiscale_probe.py)."""

from __future__ import annotations

import mindspore as ms
import mindspore.dataset as ds
import numpy as np
from mindspore import nn, ops
from mindspore.train import Callback, Model
from omegaconf import OmegaConf

from msdet.engine.training.multiscale import MultiScaleResize, MultiScaleSchedule
from msdet.engine.training.optim import build_optimizer
from msdet.engine.training.step import TrainStep


class _SizeProbe(nn.Cell):
    """A small conv 'network with loss' that also reports the input size it received, in
    the six outputs the training step expects of a network with loss (total, iou, obj,
    cls, l1, num_fg): here (loss, height, width, first target's cx, 0, 0)."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, has_bias=True)

    def construct(self, images, targets, mask):
        loss = self.conv(images * (1.0 / 255)).mean() + 0.0 * (targets.sum() + mask.sum())
        h = ops.shape(images)[2] * 1.0
        w = ops.shape(images)[3] * 1.0
        zero = ops.zeros((), ms.float32)
        return (
            loss,
            ms.Tensor(h, ms.float32),
            ms.Tensor(w, ms.float32),
            targets[0, 0, 1],
            zero,
            zero,
        )


class _Record(Callback):
    def __init__(self):
        super().__init__()
        self.seen = []

    def on_train_step_end(self, run_context):
        out = run_context.original_args().net_outputs
        self.seen.append((int(out[1].asnumpy()), int(out[2].asnumpy()), float(out[3].asnumpy())))


def train_probe(base, epochs, initial_epoch, seed, interval, steps_per_epoch=3):
    probe = _SizeProbe()
    resize = MultiScaleResize(probe, base)
    lrs = np.full(epochs * steps_per_epoch, 0.01, np.float32)
    cfg = {"momentum": 0.9, "nesterov": True, "weight_decay": 0.0}
    step = TrainStep(resize, build_optimizer(probe, lrs, OmegaConf.create(cfg)))
    step.set_train(True)
    images = np.full((steps_per_epoch, 1, 3, *base), 100.0, np.float32)
    targets = np.zeros((steps_per_epoch, 1, 2, 5), np.float32)
    targets[..., 1] = 32.0  # cx: scaled with the width
    mask = np.ones((steps_per_epoch, 1, 2), np.float32)
    data = ds.NumpySlicesDataset(
        {"images": images[:, 0], "targets": targets[:, 0], "mask": mask[:, 0]}, shuffle=False
    ).batch(1)
    schedule = MultiScaleSchedule(resize, 2, seed, steps_per_epoch, interval)
    record = _Record()
    weight = probe.conv.weight
    before = weight.asnumpy().copy()
    Model(step).train(
        epochs,
        data,
        callbacks=[schedule, record],
        dataset_sink_mode=False,
        initial_epoch=initial_epoch,
    )
    assert probe.conv.weight is weight and not np.allclose(weight.asnumpy(), before)
    return step, schedule, record.seen
