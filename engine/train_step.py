"""The training step Cell used through ``mindspore.train.Model``.

One call: forward + loss, gradients (loss-scaled), gradient mean over ranks, optional
clipping, the SGD update, then the EMA update. With dynamic loss scaling (Ascend/GPU)
an overflowed step updates nothing and lowers the scale. Everything runs inside one
graph: no host round-trip per step beyond the loss values returned for logging.

Overflow handling follows MindSpore's own loss-scale cell (``mindspore/nn/wrap/loss_scale.py``):
where the device reports overflow through its float-status register (the Atlas training
series), the register is cleared before the step (forward and backward are one graph here)
and read and cleared after the backward pass; the overflow flag is then summed over the
ranks, so every rank skips the same steps and the weights stay identical. A skipped step still advances the learning-rate schedule and the EMA, as every
iteration does in YOLOX. Per-step statistics are summed in-graph (``engine.step_stats``).
"""

from __future__ import annotations

import mindspore as ms
from mindspore import Parameter, ParameterTuple, nn, ops

from engine.step_stats import StepStatistics
from models.checkpoint import EMA_PREFIX

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


def network_images(images: ms.Tensor) -> ms.Tensor:
    """The training pipeline's uint8 [B, H, W, 3] batch as the network's float32
    [B, 3, H, W], in-graph (4x less host-to-device traffic than float32); a float batch
    (benchmarks, tests) is taken as already laid out."""
    if images.dtype == ms.uint8:
        return ops.transpose(images, (0, 3, 1, 2)).astype(ms.float32)
    return images


class TrainStep(nn.Cell):
    """forward/backward/update; returns (total, iou, obj, cls, l1, num_fg, lr, scale, skipped).

    ``loss_scale``: the (initial) scale; ``dynamic_scale`` enables overflow detection,
    skipping and scale adjustment (halve on overflow, double after ``scale_window`` good
    steps). ``clip_norm`` <= 0 disables gradient clipping. ``skip_nonfinite`` (without
    dynamic scaling): a step whose loss or (rank-reduced) gradient is NaN/Inf updates
    nothing, so the weights stay those that produced it and a stop on that loss can name
    the parameter at fault. ``float_status``: the (clear, get) float-status primitives of
    ``engine.runtime.float_status_ops`` where the device detects overflow through its
    status register, else None (``ms.amp.all_finite`` on the gradients). With a
    ``grad_reducer`` (several ranks) the skip decision is all-reduced. ``skipped`` is True
    when this step updated no weight; :attr:`stats` sums every step for the callbacks.
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
        float_status: tuple | None = None,
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
        self.reduce_flag = grad_reducer is not None
        if self.reduce_flag:
            self.allreduce = ops.AllReduce()
        self.check_overflow = dynamic_scale or skip_nonfinite
        self.use_status = float_status is not None
        if self.use_status:
            self.clear_status, self.get_status = float_status
        self.stats = StepStatistics()
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
        images = network_images(images)
        status = ops.zeros((8,), ms.int32)
        if self.use_status:
            # The register holds whatever overflowed before: clear it before this forward pass.
            status = ops.depend(status, images)
            images = ops.depend(images, self.clear_status(status))
        (_, losses), grads = self.grad_fn(images, targets, mask)
        grads = self.grad_reducer(grads)
        scale = self.scale * 1.0  # the value used for this step, before any adjustment
        lr = self.optimizer.get_lr()
        if self.unscale:
            grads = self.hyper_map(ops.partial(_unscale, scale), grads)
        if self.clip_norm > 0:
            grads = ops.clip_by_global_norm(grads, self.clip_norm)
        if self.check_overflow:
            finite = self._all_ranks_finite(grads, losses[0], status)
            # Before the branch: a Parameter first touched after graph control flow no
            # longer sees the host's set_data (measured with MindSpore 2.10).
            finite = ops.depend(finite, self.stats(losses, ops.logical_not(finite)))
            if finite:
                self.optimizer(grads)
            else:
                # YOLOX's scheduler and EMA count every iteration, skipped or not.
                step = self.optimizer.global_step
                ops.assign_add(step, ops.ones_like(step))
        else:
            finite = ms.Tensor(True)
            finite = ops.depend(finite, self.stats(losses, ops.logical_not(finite)))
            self.optimizer(grads)
        if self.use_ema:
            self.ema()
        if self.dynamic_scale:
            self._adjust_scale(finite)
        return losses + (lr, scale, ops.logical_not(finite))

    def _all_ranks_finite(self, grads, loss, status):
        """True when no rank saw an overflow: the local flag, summed over the ranks."""
        if self.use_status:
            status = ops.depend(status, grads)
            flags = self.get_status(status)
            # Clear again, so that this step's overflow (or the all-reduce's) is not
            # seen by the next step's check.
            flags = ops.depend(flags, self.clear_status(ops.depend(status, flags)))
            local_bad = (flags != 0).any()
        else:
            local_bad = ops.logical_not(ms.amp.all_finite(grads))
        if not self.dynamic_scale:
            local_bad = ops.logical_or(local_bad, ops.logical_not(ops.isfinite(loss)))
        bad = local_bad.astype(ms.float32)
        if self.reduce_flag:
            bad = self.allreduce(bad)
        return bad < 0.5

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
