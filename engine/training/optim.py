"""Optimizer parameter groups and YOLOX's learning-rate schedule."""

from __future__ import annotations

from typing import Any

import numpy as np
from mindspore import Tensor, nn, ops

from msdet.ops.cpu_kernels import NATIVE, CpuKernels
from msdet.ops.sgd import flat_sgd_op

_sgd_step = ops.MultitypeFuncGraph("sgd_step")


@_sgd_step.register("Tensor", "Tensor", "Tensor", "Tensor", "Tensor", "Tensor", "Function")
def _sgd_step_one(momentum, lr, gradient, weight, accum, stat, opt):
    return ops.depend(True, opt(weight, gradient, lr, accum, momentum, stat))


_gate = ops.MultitypeFuncGraph("gate")


@_gate.register("Tensor", "Tensor")
def _gate_one(keep, gradient):
    # A select, not a product: a non-finite gradient times 0 would still be NaN.
    return ops.select(ops.broadcast_to(keep, gradient.shape), gradient, ops.zeros_like(gradient))


def split_decay_params(network: nn.Cell) -> tuple[list, list]:
    """(conv/linear weights, everything else trainable): weight decay applies to the first.

    As YOLOX: BatchNorm weights (gamma) and all biases (conv biases, BN beta) get no decay.
    """
    decay, no_decay = [], []
    for p in network.trainable_params():
        is_bn = ".bn." in p.name or p.name.endswith((".gamma", ".beta"))
        if p.name.endswith(".weight") and not is_bn and p.ndim > 1:
            decay.append(p)
        else:
            no_decay.append(p)
    return decay, no_decay


class DecayInKernelSGD(nn.SGD):
    """``nn.SGD`` whose weight decay runs inside each parameter's ``SGD`` kernel.

    ``nn.SGD`` adds the decay to the gradients first, a ``Mul`` and an ``AddN`` per decayed
    parameter (~226 operators per YOLOX step), and gives every kernel a decay of 0. The
    ``SGD`` primitive takes the decay itself (``grad + weight_decay * weight`` before the
    momentum, on CPU, GPU and Ascend alike), so this subclass hands each parameter's group
    decay to its kernel and skips the separate pass: the same update in one operator per
    parameter, with the same Parameters (``accum.*``, ``stat.*``, ``global_step``) as
    ``nn.SGD``, so checkpoints are unchanged.

    Given msdet's kernel library (``library``: ``CpuKernels.library_for("sgd")``), all
    parameters are updated by one operator instead (``ops.sgd``), with the same arithmetic and the same
    Parameters.

    ``construct(gradients, keep)`` with a boolean ``keep`` makes the update a select on its
    inputs, not a graph branch (``engine.training.step`` skips non-finite steps with it, in
    graphs that data sinking runs on the device): where ``keep`` is False the rate and the
    momentum are 0 and the gradients 0. MindSpore's ``SGD`` (``sgd_cpu_kernel.cc``: the
    momentum buffer and first-step flag are written only when momentum > 0), CANN's
    (``impl/sgd.py``: ``accum`` and ``stat`` written only where momentum != 0) and msdet's
    kernel then leave every Parameter as it was; the step counter advances either way, as
    YOLOX's schedule counts skipped iterations, unless ``counts`` (a boolean) is False: a
    call inside a gradient-accumulation window. Where ``keep`` is True the inputs are
    passed through unchanged: the same update, bit for bit.
    """

    def __init__(self, params, library: str | None = None, eager: bool = False, **kwargs):
        super().__init__(params, **kwargs)
        decays = getattr(self, "group_weight_decay", None)  # one per parameter, in order
        if not decays:  # no parameter groups: one decay for all
            decays = [self.weight_decay] * len(self._parameters)
        self.opt = tuple(ops.SGD(self.dampening, float(wd), self.nesterov) for wd in decays)
        self.exec_weight_decay = False  # nn.Optimizer.decay_weight: leave gradients as they are
        self.flat = None
        centralized = any(getattr(self, "grad_centralization_flags", ()) or ())
        if library and not (self.is_group_lr or self.need_scale or centralized):
            self.flat = flat_sgd_op(library, len(self._parameters), eager)
            self.flat_settings = tuple(
                Tensor(np.array([v], np.float32)) for v in (self.dampening, float(self.nesterov))
            )
            self.flat_decays = Tensor(np.array(decays, np.float32))

    def construct(self, gradients, keep=None, counts=None):
        if keep is None and self.flat is None:
            return super().construct(gradients)
        step = self.global_step_increase_tensor
        if counts is not None:
            step = ops.select(counts, step, ops.zeros_like(step))
        lr = self.get_lr()
        momentum = self.momentum
        if keep is not None:
            lr = (
                self.hyper_map(ops.partial(_gate, keep), lr)
                if self.is_group_lr
                else (_gate_one(keep, lr))
            )
            momentum = _gate_one(keep, momentum)
        if self.flat is None:
            # nn.SGD's update with the rate and momentum given (the decay pass is off, see
            # above); gradients zeroed where skipped, so that no NaN reaches a weight.
            gradients = self.hyper_map(ops.partial(_gate, keep), gradients)
            gradients = self.gradients_centralization(gradients)
            gradients = self.scale_grad(gradients)
            self.assignadd(self.global_step, step)
            if self.is_group_lr:
                return self.hyper_map_reverse(ops.partial(_sgd_step, momentum), lr, gradients,
                                              self._parameters, self.accum, self.stat, self.opt)  # fmt: skip
            return self.hyper_map_reverse(ops.partial(_sgd_step, momentum, lr), gradients,
                                          self._parameters, self.accum, self.stat, self.opt)  # fmt: skip
        self.assignadd(self.global_step, step)
        dampening, nesterov = self.flat_settings
        return self.flat(
            lr,
            momentum,
            dampening,
            nesterov,
            self.flat_decays,
            *gradients,
            *self._parameters,
            *self.accum,
            *self.stat,
        )


def build_optimizer(
    network: nn.Cell, lrs: np.ndarray | float, cfg: Any, kernels: CpuKernels = NATIVE
) -> nn.SGD:
    """SGD with (Nesterov) momentum; weight decay on conv/linear weights only, applied
    inside the SGD kernel (:class:`DecayInKernelSGD`).

    ``cfg`` is the ``train`` config group (momentum, nesterov, weight_decay); ``kernels``
    says whether the update runs on msdet's CPU kernel.
    """
    decay, no_decay = split_decay_params(network)
    groups = [
        {"params": params, "weight_decay": wd}
        for params, wd in ((decay, float(cfg.weight_decay)), (no_decay, 0.0))
        if params  # MindSpore rejects an empty group
    ]
    lr = list(map(float, lrs)) if isinstance(lrs, np.ndarray) else float(lrs)
    return DecayInKernelSGD(
        groups,
        library=kernels.library_for("sgd"),
        eager=kernels.eager,
        learning_rate=lr,
        momentum=float(cfg.momentum),
        nesterov=bool(cfg.nesterov),
        weight_decay=0.0,
    )
