"""The training step as it was before its overflow skip became a select: the skip as a graph
branch (``if finite: optimizer(grads)``), kept here as the reference the branch-free step
must match bit for bit, and a small network with a decayed and an undecayed parameter."""

from __future__ import annotations

import mindspore as ms
import numpy as np
from mindspore import Parameter, nn, ops

from msdet.engine.training.step import TrainStep


class Affine(nn.Cell):
    """loss = sum((W x + b - 1)^2): ``conv.weight`` gets weight decay, ``conv.bias`` none."""

    def __init__(self):
        super().__init__()
        rng = np.random.default_rng(3)
        self.weight = Parameter(ms.Tensor(rng.normal(size=(2, 3)).astype(np.float32)),
                                name="conv.weight")  # fmt: skip
        self.bias = Parameter(ms.Tensor(np.array([0.5, -0.25], np.float32)), name="conv.bias")

    def construct(self, x, targets, mask):
        y = ops.matmul(self.weight, x.reshape(3, 1)).reshape(2) + self.bias
        loss = ((y - 1.0) ** 2).sum() * targets.sum() * mask.sum()
        zero = ops.zeros((), ms.float32)
        return loss, zero, zero, zero, zero, zero


class BranchingStep(TrainStep):
    """:class:`TrainStep` with the skip as a branch (accumulate = 1 only)."""

    def construct(self, images, targets, mask):
        status, losses, grads = self._gradients(images, targets, mask)
        scale = self.scale * 1.0
        lr = self.optimizer.get_lr()
        grads = self._unscaled_clipped(grads, scale, self.unscale)
        finite = self._all_ranks_finite(grads, losses[0], status)
        finite = ops.depend(finite, self.stats(losses, ops.logical_not(finite)))
        if finite:
            self.optimizer(grads)
        else:
            step = self.optimizer.global_step
            ops.assign_add(step, ops.ones_like(step))
        if self.use_ema:
            self.ema()
        if self.dynamic_scale:
            self._adjust_scale(finite)
        return losses + (lr, scale, ops.logical_not(finite))
