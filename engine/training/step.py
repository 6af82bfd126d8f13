"""The training step Cell used through ``mindspore.train.Model``.

One call: forward + loss, gradients (loss-scaled), gradient mean over ranks, optional
clipping, the SGD update, then the EMA update. With dynamic loss scaling (Ascend/GPU)
an overflowed step updates nothing and lowers the scale. Everything runs inside one
graph: no host round-trip per step beyond the loss values returned for logging.

Overflow handling follows MindSpore's own loss-scale cell (``mindspore/nn/wrap/loss_scale.py``):
where the device reports overflow through its float-status register (the Atlas training
series), the register is cleared before the step (forward and backward are one graph here)
and read and cleared after the backward pass; the overflow flag is then summed over the
ranks, so every rank skips the same steps and the weights stay identical. The skip is a
select on the update's inputs (``DecayInKernelSGD``), not a branch as in MindSpore's own
loss-scale cell: a graph that data sinking runs on the device then holds no control flow.
A skipped step still
advances the learning-rate schedule and the EMA, as every iteration does in YOLOX. Per-step statistics are summed in-graph (``engine.training.step_stats``).

Gradient accumulation (``accumulate`` = k > 1): the Cell is called once per micro-batch
and one optimizer step spans k calls, a *window*. Each call adds its (rank-averaged,
still loss-scaled) gradients to Parameter buffers ``accumulate.grad.<name>``; the k-th
call divides the sum by k (and the loss scale), clips, decides on overflow for the whole
window, and makes the one optimizer step, EMA update, LR step and loss-scale adjustment;
the buffers restart at zero. Like the skip, the window's end is a select, not a branch:
every call runs the update with its inputs gated (the other calls' rate, momentum and
gradients 0, EMA weight 0, step counters unchanged), which leaves every Parameter as it
was. Why this design rather than k micro-batches per call (a
k x batch input split by a static loop inside the graph):

- memory, the reason to accumulate: one micro-batch's activations live at a time, plus
  one gradient-sized buffer; an unrolled loop would hold k forward/backward copies in one
  graph, and compile k times the operators (YOLOX graphs already take minutes per size);
- one graph, the same as without accumulation, so multi-scale (a graph per size) and data
  sinking (one graph run ``sink size x k`` times on the device) work unchanged: the
  window's position is a Parameter counter, not Python control flow;
- the data pipeline keeps its batch; the micro-batch is ``train.batch_size``.

(MindYOLO accumulates on the host instead: its step returns the gradients, Python adds
them and calls the optimizer every k-th step, which cannot run inside a data sink.)

The cost is that MindSpore's own step counters (callbacks' ``cur_step_num``, a sink's
length) count calls, i.e. micro-batches: the trainer converts (``engine.training.trainer``), and
the in-graph statistics count optimizer steps (a window adds one step, with the window's
mean losses and summed foreground count, only on its last call). Gradients are reduced
over ranks on every micro-batch, at k times the communication of reducing once per
window. Overflow: a non-finite gradient (or status-register flag, or fp32 non-finite
loss) in any micro-batch of any rank skips the whole window's step. The counters and
buffers are Parameters of this Cell, saved in checkpoints with it, so a save in the
middle of a window resumes exactly; the trainer saves at epoch ends only, where a window
never stays open (an epoch holds whole windows).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import mindspore as ms
import numpy as np
from mindspore import Parameter, ParameterTuple, nn, ops

from msdet.engine.runtime.ascend import float_status_ops
from msdet.engine.runtime.process import Runtime
from msdet.engine.training.ema import ModelEMA, flat_value
from msdet.engine.training.multiscale import (
    MultiScaleResize,
)
from msdet.engine.training.optim import build_optimizer
from msdet.engine.training.schedule import accumulation
from msdet.engine.training.step_stats import StepStatistics
from msdet.models.loss import DetectorWithLoss, YOLOXLoss
from msdet.models.yolox import set_recompute

log = logging.getLogger("train")


def build_train_step(
    net: nn.Cell,
    loss: YOLOXLoss,
    lrs: np.ndarray,
    tcfg: Any,
    rt: Runtime,
    skip_nonfinite: bool = False,
    img_size: tuple[int, int] | None = None,
    multiscale: bool = False,
    grad_reducer: Callable[[Any], nn.Cell | None] | None = None,
) -> TrainStep:
    """The training step Cell: SGD, EMA and loss scaling as configured (bench/ uses it too).

    ``skip_nonfinite``: a NaN/Inf loss updates no weight (see ``TrainStep``). With
    ``multiscale``, the batch (at ``img_size``, the base input size) is resized inside the
    step (``engine.training.multiscale``). ``grad_reducer``: the loop's gradient mean over the
    ranks, made for the optimizer's parameters (``TrainLoop.gradient_reducer``). ``train.accumulate`` micro-batches
    make one optimizer step; ``train.recompute`` marks cells of ``net`` for recomputation
    (:func:`models.yolox.set_recompute`).
    """
    recomputed = set_recompute(net, str(tcfg.recompute))
    if recomputed:
        log.info(
            "train.recompute=%s: %d cells recomputed in the backward pass",
            tcfg.recompute,
            len(recomputed),
        )
    optimizer = build_optimizer(net, lrs, tcfg, rt.kernels)
    kernels = rt.kernels
    ema = (
        ModelEMA(net, float(tcfg.ema_decay), kernels.library_for("ema"), kernels.eager)
        if tcfg.ema
        else None
    )
    reducer = grad_reducer(optimizer.parameters) if grad_reducer is not None else None
    scale = float(rt.loss_scale) if rt.amp_level != "O0" else 1.0
    net_with_loss = DetectorWithLoss(net, loss)
    if multiscale:
        net_with_loss = MultiScaleResize(net_with_loss, img_size)
    step = TrainStep(
        net_with_loss,
        optimizer,
        ema,
        loss_scale=scale,
        dynamic_scale=rt.uses_dynamic_loss_scale,
        clip_norm=tcfg.clip_grad_norm or 0.0,
        grad_reducer=reducer,
        skip_nonfinite=skip_nonfinite,
        float_status=float_status_ops() if rt.float_status else None,
        accumulate=accumulation(tcfg),
        finite_check=rt.finite_check,
    )
    step.set_train(True)
    return step


ACCUMULATE_PREFIX = "accumulate."  # the accumulation window's Parameters (k > 1 only)
FINITE_CHECKS = ("flat", "mindspore")  # how TrainStep tells a finite gradient (_all_finite)


_unscale = ops.MultitypeFuncGraph("unscale")


@_unscale.register("Tensor", "Tensor")
def _unscale_one(scale, grad):
    return grad / scale.astype(grad.dtype)


_accumulate = ops.MultitypeFuncGraph("accumulate")


@_accumulate.register("Tensor", "Tensor", "Tensor")
def _accumulate_one(closes, total, grad):
    # The window's sum so far, this micro-batch included; the buffer keeps it, or restarts
    # at zero when this call closes the window (select: a skipped window's inf must not
    # reach the next one, as 0 * inf would).
    value = total + grad.astype(total.dtype)
    kept = ops.select(ops.broadcast_to(closes, value.shape), ops.zeros_like(value), value)
    return ops.depend(value, ops.assign(total, kept))


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
    ``engine.runtime.ascend.float_status_ops`` where the device detects overflow through its
    status register, else None (a finite check on the gradients). With a
    ``grad_reducer`` (several ranks) the skip decision is all-reduced. ``skipped`` is True
    when this step updated no weight; :attr:`stats` sums every step for the callbacks.
    ``accumulate`` > 1: one call per micro-batch, one optimizer step per ``accumulate``
    calls (module docstring); a call returns the open window's mean loss terms so far
    (``num_fg`` summed), the window's lr and scale, and ``skipped`` True only on the last
    call of a skipped window. ``finite_check``: how the gradients are checked without a
    status register (:meth:`_all_finite`; ``engine.runtime.process.Runtime.finite_check`` chooses
    per device).
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
        accumulate: int = 1,
        finite_check: str = "flat",
    ):
        super().__init__(auto_prefix=False)
        if finite_check not in FINITE_CHECKS:
            raise ValueError(f"finite_check must be one of {FINITE_CHECKS}, got {finite_check!r}")
        self.finite_check = finite_check
        if int(accumulate) < 1:
            raise ValueError(f"train.accumulate must be >= 1, got {accumulate}")
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
        # Comparisons against tensors, not Python numbers: MindSpore 2.10 turns `x < 0.5` into
        # LessScalar, which has no GE adapter (the 910A compiles whole graphs through GE).
        self.half, self.zero = ms.Tensor(0.5, ms.float32), ms.Tensor(0.0, ms.float32)
        # A fixed scale of 1 (fp32) needs no unscaling: skip ~330 divisions per step.
        self.unscale = dynamic_scale or float(loss_scale) != 1.0
        self.hyper_map = ops.HyperMap()
        self.grad_fn = ms.value_and_grad(self._scaled_forward, None, self.weights, has_aux=True)
        self.accumulate = int(accumulate)
        if self.accumulate > 1:
            self._init_accumulation()

    def _init_accumulation(self):
        """The window's state (see the module docstring), all Parameters named ``accumulate.*``."""
        self.grad_sums = ParameterTuple(
            [
                Parameter(
                    ms.Tensor(np.zeros(p.shape, np.float32)),
                    name=ACCUMULATE_PREFIX + "grad." + p.name,
                    requires_grad=False,
                )
                for p in self.weights
            ]
        )
        self.micro_step = Parameter(  # micro-batches of the open window already added
            ms.Tensor(0, ms.int32), name=ACCUMULATE_PREFIX + "micro_step", requires_grad=False
        )
        self.window_bad = Parameter(  # 1.0 once a micro-batch of the window overflowed
            ms.Tensor(0.0, ms.float32), name=ACCUMULATE_PREFIX + "overflow", requires_grad=False
        )
        self.loss_sums = Parameter(  # (total, iou, obj, cls, l1, num_fg) summed over the window
            ms.Tensor(np.zeros(6, np.float32)),
            name=ACCUMULATE_PREFIX + "losses",
            requires_grad=False,
        )

    def _scaled_forward(self, images, targets, mask):
        out = self.net_with_loss(images, targets, mask)
        return out[0] * self.scale, out

    def _gradients(self, images, targets, mask):
        """(float-status input, loss terms, rank-reduced loss-scaled gradients) of a batch."""
        images = network_images(images)
        status = ops.zeros((8,), ms.int32)
        if self.use_status:
            # The register holds whatever overflowed before: clear it before this forward pass.
            status = ops.depend(status, images)
            images = ops.depend(images, self.clear_status(status))
        (_, losses), grads = self.grad_fn(images, targets, mask)
        return status, losses, self.grad_reducer(grads)

    def construct(self, images, targets, mask):
        if self.accumulate > 1:
            return self._accumulating_step(images, targets, mask)
        status, losses, grads = self._gradients(images, targets, mask)
        scale = self.scale * 1.0  # the value used for this step, before any adjustment
        lr = self.optimizer.get_lr()
        grads = self._unscaled_clipped(grads, scale, self.unscale)
        if self.check_overflow:
            finite = self._all_ranks_finite(grads, losses[0], status)
            finite = ops.depend(finite, self.stats(losses, ops.logical_not(finite)))
            # A select on the update's inputs, no graph branch (control flow in a graph that
            # data sinking runs on the device is a common first-run failure): a step that is
            # not finite updates no Parameter, and still advances the step counter, as
            # YOLOX's scheduler and EMA count every iteration.
            self.optimizer(grads, finite)
        else:
            finite = ms.Tensor(True)
            finite = ops.depend(finite, self.stats(losses, ops.logical_not(finite)))
            self.optimizer(grads)
        if self.use_ema:
            self.ema()
        if self.dynamic_scale:
            self._adjust_scale(finite)
        return losses + (lr, scale, ops.logical_not(finite))

    def _accumulating_step(self, images, targets, mask):
        """One micro-batch of a window of ``accumulate``; the window's last one updates."""
        status, losses, grads = self._gradients(images, targets, mask)
        k = self.accumulate
        scale = self.scale * 1.0
        lr = self.optimizer.get_lr()
        micro = self.micro_step * 1
        closes = micro >= k - 1  # this call completes the window
        sums = self.hyper_map(ops.partial(_accumulate, closes), self.grad_sums, grads)
        values = ops.stack([v.astype(ms.float32).reshape(()) for v in losses[:6]])
        window = self.loss_sums + values
        calls = (micro + 1).astype(ms.float32)
        # The window so far: mean loss terms per micro-batch, foreground anchors summed (what
        # one batch of the window's images would count).
        means = ops.concat((window[:5] / calls, window[5:]))
        if self.check_overflow:
            bad = ops.maximum(self.window_bad, self._local_overflow(grads, losses[0], status))
            if self.reduce_flag:
                # Every call, so that no collective sits inside the branch below.
                bad = (self.allreduce(bad) > 0.5).astype(ms.float32)
            finite = bad < self.half
        else:
            bad = ops.zeros((), ms.float32)
            finite = ms.Tensor(True)
        skipped = ops.logical_and(closes, ops.logical_not(finite))
        report = tuple(means[i] for i in range(6))
        # One statistics step per window, on its last call.
        closes = ops.depend(closes, self.stats(report, skipped, closes))
        # The window's mean gradient (the sum over k micro-batches, unscaled) updates the
        # weights on the window's last call, if finite; the step counter, the EMA and the
        # loss scale move on that call, a skipped window's too (see construct). Selects,
        # not a branch: on the other calls every input is gated to a no-op.
        applies = ops.logical_and(closes, finite) if self.check_overflow else closes
        self.optimizer(self._unscaled_clipped(sums, scale * float(k)), applies, closes)
        if self.use_ema:
            self.ema(closes)
        if self.dynamic_scale:
            self._adjust_scale(finite, closes)
        ops.assign(self.micro_step, ops.select(closes, ops.zeros_like(micro), micro + 1))
        ops.assign(self.window_bad, ops.select(closes, ops.zeros_like(bad), bad))
        ops.assign(
            self.loss_sums,
            ops.select(ops.broadcast_to(closes, window.shape), ops.zeros_like(window), window),
        )
        return report + (lr, scale, skipped)

    def _unscaled_clipped(self, grads, divisor, divide: bool = True):
        """Gradients divided by ``divisor`` (the loss scale; times k for an accumulation
        window's sum) unless ``divide`` is False (a fixed scale of 1), then clipped to
        ``clip_norm`` when it is set."""
        if divide:
            grads = self.hyper_map(ops.partial(_unscale, divisor), grads)
        if self.clip_norm > 0:
            grads = ops.clip_by_global_norm(grads, self.clip_norm)
        return grads

    def _local_overflow(self, grads, loss, status):
        """1.0 when this rank's micro-batch (or step) overflowed: gradients, status
        register, or, in fp32, a non-finite loss; else 0.0."""
        if self.use_status:
            status = ops.depend(status, grads)
            flags = self.get_status(status)
            # Clear again, so that this step's overflow (or the all-reduce's) is not
            # seen by the next step's check.
            flags = ops.depend(flags, self.clear_status(ops.depend(status, flags)))
            local_bad = ops.abs(flags.astype(ms.float32)).sum() > self.zero
        else:
            local_bad = ops.logical_not(self._all_finite(grads))
        if not self.dynamic_scale:
            local_bad = ops.logical_or(local_bad, ops.logical_not(ops.isfinite(loss)))
        return local_bad.astype(ms.float32)

    def _all_finite(self, grads):
        """True when every gradient element is finite. ``finite_check="flat"``: one
        ``IsFinite`` over the gradients concatenated (3 operators, one copy of the
        gradients); ``"mindspore"``: ``ms.amp.all_finite`` (Ascend's ``AllFinite``
        operator; elsewhere 4 operators per gradient, ~1,320 per YOLOX step)."""
        if self.finite_check == "flat":
            return ops.isfinite(ops.concat(self.hyper_map(flat_value, grads))).all()
        return ms.amp.all_finite(grads)

    def _all_ranks_finite(self, grads, loss, status):
        """True when no rank saw an overflow: the local flag, summed over the ranks."""
        bad = self._local_overflow(grads, loss, status)
        if self.reduce_flag:
            bad = self.allreduce(bad)
        return bad < self.half

    def _adjust_scale(self, finite, moves=None):
        # Halve on overflow; double after `scale_window` good steps in a row. `moves`
        # (an accumulation window's last call): False leaves scale and count as they are.
        good = ops.select(finite, self.good_steps + 1, ops.zeros_like(self.good_steps))
        grow = good >= self.scale_window
        new_scale = ops.select(
            finite,
            ops.select(grow, self.scale * 2.0, self.scale),
            ops.maximum(self.scale * 0.5, 1.0),
        )
        new_good = ops.select(grow, ops.zeros_like(good), good)
        if moves is not None:
            new_good = ops.select(moves, new_good, self.good_steps)
            new_scale = ops.select(moves, new_scale, self.scale)
        ops.assign(self.good_steps, new_good)
        ops.assign(self.scale, new_scale)
        return True
