"""The gradient accumulation job (tests/e2e/dp_accumulate.py runs its 2 ranks): a small
linear model trained by msdet's TrainStep with ``accumulate=2`` and a data-parallel reducer,
in fp32 with the non-finite skip and with dynamic loss scaling. In optimizer step 2 only
rank 1's second micro-batch is non-finite: the whole step must be skipped on both ranks.

:func:`reference` is the same run in one process without accumulation: each optimizer
step is one batch of all ranks' micro-batches (equal sizes, so its mean loss has the mean
gradient), the non-finite sample included."""

from __future__ import annotations

import numpy as np
from omegaconf import OmegaConf

RESULT_FILE = "accumulate_rank{rank}.npz"
RANKS, ACCUMULATE, MICRO, STEPS = 2, 2, 3, 4
BAD = (1, 1, 1)  # (optimizer step, rank, micro-batch), 0-based: step 2, rank 1, its 2nd
MODES = ("skip_nonfinite", "dynamic_scale")
LRS = np.array([0.1, 0.08, 0.05, 0.02], np.float32)


def micro_batch(step: int, rank: int, micro: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng([step, rank, micro])
    x = rng.normal(size=(MICRO, 3)).astype(np.float32)
    y = rng.normal(size=(MICRO, 1)).astype(np.float32)
    if (step, rank, micro) == BAD:
        x[0, 1] = np.inf
    return x, y


def build_linear():
    import mindspore as ms
    from mindspore import Parameter, nn, ops

    class Linear(nn.Cell):
        def __init__(self):
            super().__init__()
            w = np.array([[0.5, -1.0, 2.0]], np.float32)
            self.weight = Parameter(ms.Tensor(w), name="weight")
            self.bias = Parameter(ms.Tensor(np.array([0.1], np.float32)), name="bias")

        def construct(self, x, y, mask):
            err = (x * self.weight).sum(-1) + self.bias - y[:, 0]
            total = (err**2).mean() * mask.mean()
            zero = ops.zeros((), ms.float32)
            return total, zero, zero, zero, zero, zero

    return Linear()


def train(mode: str, accumulate: int, reducer_world: int | None, batches) -> dict:
    """Trains a fresh model on ``batches`` (a list of (x, y) per call)."""
    import mindspore as ms
    from mindspore import nn

    from msdet.engine.training.ema import ModelEMA
    from msdet.engine.training.optim import build_optimizer
    from msdet.engine.training.step import TrainStep

    sgd = OmegaConf.create({"momentum": 0.9, "nesterov": True, "weight_decay": 5e-4})
    net = build_linear()
    opt = build_optimizer(net, LRS, sgd)
    reducer = None
    if reducer_world:
        reducer = nn.DistributedGradReducer(opt.parameters, mean=True, degree=reducer_world)
    step = TrainStep(
        net,
        opt,
        ModelEMA(net),
        loss_scale=1024.0 if mode == "dynamic_scale" else 1.0,
        dynamic_scale=mode == "dynamic_scale",
        skip_nonfinite=mode == "skip_nonfinite",
        grad_reducer=reducer,
        accumulate=accumulate,
    )
    step.set_train(True)
    skipped = []
    for x, y in batches:
        out = step(ms.Tensor(x), ms.Tensor(y), ms.Tensor(np.ones((len(x), 1), np.float32)))
        skipped.append(bool(out[8].asnumpy()))
    return {
        "weights": np.concatenate([net.weight.asnumpy().ravel(), net.bias.asnumpy()]),
        "ema": step.ema.buffer.asnumpy().copy(),
        "skipped": np.asarray(skipped),
        "global_step": int(step.optimizer.global_step.asnumpy()[0]),
        "scale": float(step.scale.asnumpy()),
    }


def reference() -> dict[str, dict]:
    """Per mode: the one-process, unaccumulated run on whole steps' batches."""
    out = {}
    for mode in MODES:
        batches = []
        for s in range(STEPS):
            parts = [micro_batch(s, r, i) for r in range(RANKS) for i in range(ACCUMULATE)]
            batches.append(tuple(np.concatenate(a) for a in zip(*parts)))
        out[mode] = train(mode, 1, None, batches)
    return out
