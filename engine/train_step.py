"""The training step Cell used through ``mindspore.train.Model``.

One call: forward + loss, gradients (loss-scaled), gradient mean over ranks, optional
clipping, the SGD update, then the EMA update. With dynamic loss scaling (Ascend/GPU)
an overflowed step updates nothing and lowers the scale. Everything runs inside one
graph: no host round-trip per step beyond the loss values returned for logging.
"""

from __future__ import annotations

import math

import mindspore as ms
from mindspore import Parameter, ParameterTuple, nn, ops

EMA_PREFIX = "ema."
EMA_RAMP = 2000.0  # YOLOX: decay * (1 - exp(-updates / 2000))

_ema_update = ops.MultitypeFuncGraph("ema_update")


@_ema_update.register("Tensor", "Tensor", "Tensor")
def _update_one(weight, ema, value):
    # ema + (1 - d) * (value - ema) == d * ema + (1 - d) * value, in one Lerp kernel
    # instead of three (the EMA touches all ~540 parameters every step).
    return ops.assign(ema, ops.lerp(ema, value, weight))


_unscale = ops.MultitypeFuncGraph("unscale")


@_unscale.register("Tensor", "Tensor")
def _unscale_one(scale, grad):
    return grad / scale.astype(grad.dtype)


class ModelEMA(nn.Cell):
    """Exponential moving average of every network parameter, BatchNorm statistics included.

    The averaged copies are Parameters named ``ema.<name>``: they live in the training
    graph, and in checkpoints next to the raw weights.
    """

    def __init__(self, network: nn.Cell, decay: float = 0.9998):
        super().__init__()
        self.decay = decay
        # Parameter names, not cell paths: mixed precision wraps cells (the path of a BN
        # weight gains a segment) but keeps each parameter's own name.
        params = list(network.get_parameters())
        self.sources = ParameterTuple(params)
        self.averages = ParameterTuple(
            [
                Parameter(p.data.copy(), name=EMA_PREFIX + p.name, requires_grad=False)
                for p in params
            ]
        )
        self.updates = Parameter(
            ms.Tensor(0.0, ms.float32), name="ema_updates", requires_grad=False
        )
        self.hyper_map = ops.HyperMap()

    def construct(self):
        updates = self.updates + 1.0
        ops.assign(self.updates, updates)
        d = self.decay * (1.0 - ops.exp(-updates / EMA_RAMP))
        return self.hyper_map(ops.partial(_ema_update, 1.0 - d), self.averages, self.sources)

    def current_decay(self) -> float:
        """The decay the next update will use (for logs)."""
        return self.decay * (1.0 - math.exp(-(float(self.updates.asnumpy()) + 1) / EMA_RAMP))


class TrainStep(nn.Cell):
    """forward/backward/update; returns (total, iou, obj, cls, l1, num_fg, lr, scale, overflow).

    ``loss_scale``: the (initial) scale; ``dynamic_scale`` enables overflow detection,
    skipping and scale adjustment (halve on overflow, double after ``scale_window`` good
    steps). ``clip_norm`` <= 0 disables gradient clipping. ``skip_nonfinite`` (without
    dynamic scaling): a step whose loss is NaN/Inf updates nothing, so the weights stay
    those that produced it and a stop on that loss can name the parameter at fault.
    """

    def __init__(
        self,
        net_with_loss: nn.Cell,
        optimizer: nn.Optimizer,
        ema: ModelEMA | None = None,
        loss_scale: float = 1.0,
        dynamic_scale: bool = False,
        clip_norm: float = 0.0,
        grad_reducer: nn.Cell | None = None,
        scale_window: int = 2000,
        skip_nonfinite: bool = False,
    ):
        super().__init__(auto_prefix=False)
        self.net_with_loss = net_with_loss
        self.optimizer = optimizer
        self.weights = optimizer.parameters
        self.ema = ema
        self.use_ema = ema is not None
        self.dynamic_scale = dynamic_scale
        self.skip_nonfinite = skip_nonfinite
        self.clip_norm = float(clip_norm or 0.0)
        self.grad_reducer = grad_reducer if grad_reducer is not None else ops.identity
        self.scale = Parameter(
            ms.Tensor(loss_scale, ms.float32), name="loss_scale", requires_grad=False
        )
        self.good_steps = Parameter(
            ms.Tensor(0, ms.int32), name="loss_scale_good_steps", requires_grad=False
        )
        self.scale_window = scale_window
        # A fixed scale of 1 (fp32) needs no unscaling: skip ~330 divisions per step.
        self.unscale = dynamic_scale or float(loss_scale) != 1.0
        self.hyper_map = ops.HyperMap()
        self.grad_fn = ms.value_and_grad(self._scaled_forward, None, self.weights, has_aux=True)

    def _scaled_forward(self, images, targets, mask):
        out = self.net_with_loss(images, targets, mask)
        return out[0] * self.scale, out

    def construct(self, images, targets, mask):
        (_, losses), grads = self.grad_fn(images, targets, mask)
        grads = self.grad_reducer(grads)
        scale = self.scale * 1.0  # the value used for this step, before any adjustment
        if self.unscale:
            grads = self.hyper_map(ops.partial(_unscale, scale), grads)
        if self.clip_norm > 0:
            grads = ops.clip_by_global_norm(grads, self.clip_norm)
        lr = self.optimizer.get_lr()
        if self.dynamic_scale:
            finite = ms.amp.all_finite(grads)
            overflow = ops.logical_not(finite)
            if finite:
                self._apply(grads)
            self._adjust_scale(finite)
        elif self.skip_nonfinite:
            finite = ops.isfinite(losses[0])
            overflow = ops.logical_not(finite)
            if finite:
                self._apply(grads)
        else:
            overflow = ms.Tensor(False)
            self._apply(grads)
        return losses + (lr, scale, overflow)

    def _apply(self, grads):
        self.optimizer(grads)
        if self.use_ema:
            self.ema()
        return True

    def _adjust_scale(self, finite):
        # Halve on overflow; double after `scale_window` good steps in a row.
        good = ops.select(finite, self.good_steps + 1, ops.zeros_like(self.good_steps))
        grow = good >= self.scale_window
        new_scale = ops.select(
            finite,
            ops.select(grow, self.scale * 2.0, self.scale),
            ops.maximum(self.scale * 0.5, 1.0),
        )
        ops.assign(self.good_steps, ops.select(grow, ops.zeros_like(good), good))
        ops.assign(self.scale, new_scale)
        return True
