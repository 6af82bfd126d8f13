"""A 2-rank job for the overflow-synchronisation test: msdet's TrainStep on a tiny loss.

``scripts/run_distributed_train.sh 2`` starts it on every rank (``TRAIN_ENTRY=...``). Each
rank trains the same two-weight quadratic with ``engine.training.step.TrainStep`` and a
data-parallel gradient reducer, once with the fp32 non-finite skip and once with dynamic
loss scaling, on batches where only rank 1 goes wrong: at step 2 its gradient is
non-finite, at step 4 its loss is non-finite while its gradient is finite (the case only
the all-reduced flag catches). Each rank writes which steps it skipped and its final
weights to ``<run dir>/overflow_rank<R>.npz`` (with the HCCL_EXEC_TIMEOUT the launcher
passed down); the test checks that the ranks agree.
"""

from __future__ import annotations

import os
import sys

import numpy as np
from omegaconf import OmegaConf

from msdet.engine.cli import Run, run_command

# Launched as a script (msrun): the repository root holds the tests package.
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from msdet.engine.runtime.process import setup_runtime  # noqa: E402  (needs ROOT on sys.path)

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


def main(run: Run) -> None:
    cfg = run.cfg
    rt = setup_runtime(cfg.runtime, run.dir)
    results = {}
    for mode in MODES:
        weights, skipped = train(mode, rt.rank, rt.world_size)
        results[f"{mode}_weights"] = weights
        results[f"{mode}_skipped"] = np.asarray(skipped)
    results["hccl_exec_timeout"] = os.environ.get("HCCL_EXEC_TIMEOUT", "")  # set by the launcher
    results["hccl_connect_timeout"] = os.environ.get("HCCL_CONNECT_TIMEOUT", "")
    np.savez(os.path.join(rt.run_dir, RESULT_FILE.format(rank=rt.rank)), **results)


if __name__ == "__main__":
    run_command("tool", main)
