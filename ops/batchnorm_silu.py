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


def _first(first, *_):
    return first


def _forward_shapes(x, gamma, _beta, _eps):
    return x, gamma, gamma


def _forward_dtypes(x, *_):
    return x, x, x


def _grad_shapes(x, gamma, *_):
    return x, gamma, gamma


def _grad_dtypes(x, *_):
    return x, x, x


def batchnorm_silu_op(library: str):
    """``(x, gamma, beta, eps) -> (silu(batchnorm(x)), batch mean, batch variance)`` with its
    backward attached; the variance is the biased one that normalises."""
    grad = ops.Custom(
        f"{library}:BatchNormSiluGrad",
        out_shape=_grad_shapes,
        out_dtype=_grad_dtypes,
        func_type="aot",
    )

    def bprop(x, gamma, beta, eps, out, dout):
        # The statistics outputs feed only the running averages (no gradient flows back).
        dx, dgamma, dbeta = grad(x, gamma, beta, eps, out[1], out[2], dout[0])
        return dx, dgamma, dbeta, ops.zeros_like(eps)

    return ops.Custom(
        f"{library}:BatchNormSiluForward",
        out_shape=_forward_shapes,
        out_dtype=_forward_dtypes,
        func_type="aot",
        bprop=bprop,
    )


class BatchNormSiLU(nn.Cell):
    """``silu(bn(x))`` for an ``nn.BatchNorm2d`` ``bn``, on the kernel.

    Holds no parameters: the layer's own are passed in. Called, it normalises with the batch
    statistics (training) and updates ``moving_mean`` and ``moving_variance`` as MindSpore's
    BatchNorm does (running value weighted by its ``momentum``; the variance made unbiased,
    ``M / (M - 1)``); :meth:`infer` normalises with the running statistics (evaluation).
    """

    def __init__(self, eps: float, momentum: float, library: str):
        super().__init__()
        self.op = batchnorm_silu_op(library)
        self.infer_op = ops.Custom(
            f"{library}:BatchNormSiluInfer",
            out_shape=_first,
            out_dtype=_first,
            func_type="aot",
        )
        self.eps = Tensor(np.array([eps], np.float32))
        self.keep = float(momentum)  # MindSpore's convention: the weight of the running value

    def construct(self, x, gamma, beta, moving_mean, moving_variance):
        y, mean, var = self.op(x, gamma, beta, self.eps)
        count = x.shape[0] * x.shape[2] * x.shape[3]
        mean = ops.stop_gradient(mean)
        var = ops.stop_gradient(var) * (count / max(count - 1, 1))
        new = (1.0 - self.keep) * mean
        y = ops.depend(y, ops.assign(moving_mean, moving_mean * self.keep + new))
        new = (1.0 - self.keep) * var
        return ops.depend(y, ops.assign(moving_variance, moving_variance * self.keep + new))

    def infer(self, x, gamma, beta, moving_mean, moving_variance):
        return self.infer_op(x, gamma, beta, self.eps, moving_mean, moving_variance)
