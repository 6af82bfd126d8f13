"""BatchNorm2d + SiLU on CPU as one compiled custom operator.

Every YOLOX block ends in BatchNorm -> SiLU. MindSpore 2.10's CPU backend runs the pair as
BatchNorm, Sigmoid and Mul forward and BatchNormGrad plus five element-wise operators
backward; ``kernels/batchnorm_silu.cc`` does each direction in one operator (why and how:
its header). :class:`BatchNormSiLU` applies it with the parameters of an existing
``nn.BatchNorm2d`` and, in training, updates that layer's running statistics exactly as the
layer would, so checkpoints and converted weights are unchanged. Models use it when
``ops.cpu_kernels`` has a library enabled.
"""

from __future__ import annotations

import numpy as np
from mindspore import Tensor, nn, ops

from msdet.ops.aot import aot_op, in_place_op, same_as_first


def _forward_shapes(x, gamma, *_):
    return x, gamma, gamma


def _grad_shapes(x, gamma, *_):
    return x, gamma, gamma


def _dtypes(n: int):
    def dtypes(x, *_):
        return (x,) * n

    return dtypes


def batchnorm_silu_op(library: str, eager: bool = False):
    """``(x, gamma, beta, running mean, running variance, (eps, keep)) -> (silu(batchnorm(x)),
    batch mean, batch variance)`` with its backward attached, moving the running statistics
    in place; the batch variance is the biased one that normalises. ``eager``: run op by op
    in PyNative mode (``ops.aot.in_place_op``)."""
    grad = aot_op(library, "BatchNormSiluGrad", _grad_shapes, _dtypes(3))

    def bprop(x, gamma, beta, running_mean, running_var, hyper, out, dout):
        # Only y carries a gradient; the statistics feed the running averages.
        dx, dgamma, dbeta = grad(x, gamma, beta, hyper, out[1], out[2], dout[0])
        zeros = ops.zeros_like
        return dx, dgamma, dbeta, zeros(running_mean), zeros(running_var), zeros(hyper)

    # The running statistics are written in place (ops.aot), as MindSpore's own
    # BatchNorm writes them: the graph passes the Parameters and orders their other uses.
    return in_place_op(
        library,
        "BatchNormSiluForward",
        ["x", "gamma", "beta", "running_mean", "running_var", "hyper"],
        {"running_mean", "running_var"},
        _forward_shapes,
        _dtypes(3),
        bprop,
        eager=eager,
    )


class BatchNormSiLU(nn.Cell):
    """``silu(bn(x))`` for an ``nn.BatchNorm2d`` ``bn``, on the kernel.

    Holds no parameters: the layer's own are passed in. Called, it normalises with the batch
    statistics (training) and moves the layer's ``moving_mean`` and ``moving_variance`` to
    the values MindSpore's BatchNorm would (running value weighted by its ``momentum``; the
    variance made unbiased, ``M / (M - 1)``); :meth:`infer` normalises with the running
    statistics (evaluation). The update is made in the kernel, in place: as separate
    operators it added ~10 small operators per layer, ~1,000 per YOLOX-nano step, whose
    launches cost more than their arithmetic, and an ``Assign`` of each statistic held
    compiled-graph memory of its own.
    """

    def __init__(self, eps: float, momentum: float, library: str, eager: bool = False):
        super().__init__()
        self.op = batchnorm_silu_op(library, eager)
        self.infer_op = aot_op(library, "BatchNormSiluInfer", same_as_first)
        # (eps, weight of the running value): MindSpore's BatchNorm momentum convention
        self.hyper = Tensor(np.array([eps, momentum], np.float32))

    def construct(self, x, gamma, beta, moving_mean, moving_variance):
        y, _, _ = self.op(x, gamma, beta, moving_mean, moving_variance, self.hyper)
        return y

    def infer(self, x, gamma, beta, moving_mean, moving_variance):
        return self.infer_op(x, gamma, beta, moving_mean, moving_variance, self.hyper)
