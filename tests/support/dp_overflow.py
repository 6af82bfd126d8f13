"""The overflow-synchronisation job (tests/e2e/dp_overflow.py runs its 2 ranks): a
two-weight quadratic trained by msdet's TrainStep on batches where only rank 1 goes wrong,
at step :data:`BAD_GRAD_STEP` with a non-finite gradient, at :data:`BAD_LOSS_STEP` with a
non-finite loss and a finite gradient (the case only the all-reduced flag catches)."""

from __future__ import annotations

import numpy as np
from omegaconf import OmegaConf

RESULT_FILE = "overflow_rank{rank}.npz"
STEPS = 5
BAD_GRAD_STEP, BAD_LOSS_STEP = 2, 4  # 1-based; only on rank 1
MODES = ("skip_nonfinite", "dynamic_scale")


def batches(rank: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per step (x, t): the loss is sum((w - x)^2) + t, t outside the gradient."""
    out = []
    for step in range(1, STEPS + 1):
        x = np.array([0.5 * step, -1.0 - rank], np.float32)
        t = np.zeros(1, np.float32)
        if rank == 1 and step == BAD_GRAD_STEP:
            x[0] = np.inf
        if rank == 1 and step == BAD_LOSS_STEP:
            t[0] = np.inf
        out.append((x, t))
    return out


def build_probe():
    import mindspore as ms
    from mindspore import Parameter, nn, ops

    class Probe(nn.Cell):
        def __init__(self):
            super().__init__()
            self.w = Parameter(ms.Tensor(np.array([1.0, -2.0], np.float32)), name="w")

        def construct(self, x, t, mask):
            total = ((self.w - x) ** 2).sum() + ops.stop_gradient(t.sum()) * mask.sum()
            zero = ops.zeros((), ms.float32)
            return total, zero, zero, zero, zero, zero

    return Probe()


def train(mode: str, rank: int, world: int) -> tuple[np.ndarray, list[bool]]:
    import mindspore as ms
    from mindspore import nn

    from msdet.engine.training.optim import build_optimizer
    from msdet.engine.training.step import TrainStep

    sgd = OmegaConf.create({"momentum": 0.9, "nesterov": True, "weight_decay": 0.0})
    net = build_probe()
    opt = build_optimizer(net, 0.05, sgd)
    step = TrainStep(
        net,
        opt,
        loss_scale=1024.0 if mode == "dynamic_scale" else 1.0,
        dynamic_scale=mode == "dynamic_scale",
        skip_nonfinite=mode == "skip_nonfinite",
        grad_reducer=nn.DistributedGradReducer(opt.parameters, mean=True, degree=world),
    )
    step.set_train(True)
    one = ms.Tensor(np.ones(1, np.float32))
    skipped = [bool(step(ms.Tensor(x), ms.Tensor(t), one)[8].asnumpy()) for x, t in batches(rank)]
    return net.w.asnumpy(), skipped
