"""A tiny data-parallel job for the launcher tests: train.py's runtime set-up, a tiny MLP.

``scripts/run_distributed_train.sh N`` starts it on every rank (``TRAIN_ENTRY=...``) with
the usual overrides. Each rank trains a two-layer MLP on its shard of a fixed regression
problem with ``nn.TrainOneStepCell``, which reduces gradients as the data-parallel
context set by ``engine.runtime`` says (mean over ranks), and writes its final weights and
losses to ``<run dir>/tiny_rank<R>.npz``. With equal shards and a mean-reduced loss, N
ranks must end exactly where one process training on the whole batch ends: the test
checks that, so the launcher and the runtime are tested at 8 ranks in seconds.
"""

from __future__ import annotations

import os
import sys

import numpy as np

from msdet.engine.cli import Run, run_command

# Launched as a script (msrun): the repository root holds the tests package.
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from msdet.engine.runtime.process import setup_runtime  # noqa: E402  (needs ROOT on sys.path)

SAMPLES, FEATURES, HIDDEN = 64, 8, 16
STEPS, LR = 20, 0.05
RESULT_FILE = "tiny_rank{rank}.npz"
FAIL_RANK_VAR, FAIL_CODE = "TINY_FAIL_RANK", 3  # this rank exits with FAIL_CODE after init
FAIL_SCHEDULER_VAR = "TINY_FAIL_SCHEDULER"  # msrun's scheduler exits before init
FOREVER_VAR = "TINY_FOREVER"  # the ranks step until they are killed, printing each step


def tiny_problem() -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]:
    """The fixed data (x, y) and initial weights every rank and the reference use."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(SAMPLES, FEATURES)).astype(np.float32)
    y = (np.sin(x[:, :1]) + 0.5 * x[:, 1:2] ** 2).astype(np.float32)
    weights = {
        "0.weight": rng.normal(0, 0.5, (HIDDEN, FEATURES)).astype(np.float32),
        "0.bias": np.zeros(HIDDEN, np.float32),
        "2.weight": rng.normal(0, 0.5, (1, HIDDEN)).astype(np.float32),
        "2.bias": np.zeros(1, np.float32),
    }
    return x, y, weights


def _mlp_step(weights: dict):
    """(the MLP from ``weights``, its SGD training step)."""
    import mindspore as ms
    from mindspore import nn

    net = nn.SequentialCell(nn.Dense(FEATURES, HIDDEN), nn.ReLU(), nn.Dense(HIDDEN, 1))
    for name, param in net.parameters_and_names():
        param.set_data(ms.Tensor(weights[name]))
    step = nn.TrainOneStepCell(
        nn.WithLossCell(net, nn.MSELoss()), nn.SGD(net.trainable_params(), learning_rate=LR)
    )
    step.set_train(True)
    return net, step


def train_tiny(x: np.ndarray, y: np.ndarray, weights: dict) -> tuple[dict, list[float]]:
    """``STEPS`` SGD steps of the MLP on (x, y); returns the final weights and the losses."""
    import mindspore as ms

    net, step = _mlp_step(weights)
    xt, yt = ms.Tensor(x), ms.Tensor(y)
    losses = [float(step(xt, yt).asnumpy()) for _ in range(STEPS)]
    return {name: p.asnumpy() for name, p in net.parameters_and_names()}, losses


def step_forever(x: np.ndarray, y: np.ndarray, weights: dict) -> None:
    """Data-parallel steps without end, one line each: every step all-reduces the gradients,
    so a rank that dies leaves the others waiting in the collective."""
    import mindspore as ms

    _, step = _mlp_step(weights)
    xt, yt = ms.Tensor(x), ms.Tensor(y)
    count = 0
    while True:
        count += 1
        print(f"tiny step {count}: loss {float(step(xt, yt).asnumpy()):.6f}", flush=True)


def main(run: Run) -> None:
    cfg = run.cfg
    if os.environ.get(FAIL_SCHEDULER_VAR) and os.environ.get("MS_ROLE") == "MS_SCHED":
        raise SystemExit(FAIL_CODE)  # the launcher test of a scheduler that fails
    rt = setup_runtime(cfg.runtime, run.dir)
    if os.environ.get(FAIL_RANK_VAR) == str(rt.rank):
        raise SystemExit(FAIL_CODE)  # the launcher test of a rank that fails
    x, y, weights = tiny_problem()
    per_rank = SAMPLES // rt.world_size
    shard = slice(rt.rank * per_rank, (rt.rank + 1) * per_rank)
    if os.environ.get(FOREVER_VAR):  # the launcher test of a rank killed mid-run
        step_forever(x[shard], y[shard], weights)
    final, losses = train_tiny(x[shard], y[shard], weights)
    out = os.path.join(rt.run_dir, RESULT_FILE.format(rank=rt.rank))
    np.savez(out, losses=np.asarray(losses), world=rt.world_size, **final)


if __name__ == "__main__":
    run_command("tool", main)
