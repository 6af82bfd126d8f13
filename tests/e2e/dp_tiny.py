"""A tiny data-parallel job for the launcher tests: train.py's runtime set-up, a tiny MLP.

``scripts/run_distributed_train.sh N`` starts it on every rank (``TRAIN_ENTRY=...``) with
the usual overrides. Each rank trains the two-layer MLP of tests/support/dp_tiny.py on its
shard of the fixed regression problem with ``nn.TrainOneStepCell``, which reduces gradients
as the data-parallel context set by ``engine.runtime`` says (mean over ranks), and writes
its final weights and losses to ``<run dir>/tiny_rank<R>.npz``; the test holds them against
one process training on the whole batch, so the launcher and the runtime are tested at 8
ranks in seconds.
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
from tests.support.dp_tiny import (  # noqa: E402
    FAIL_CODE,
    FAIL_RANK_VAR,
    FAIL_SCHEDULER_VAR,
    FOREVER_VAR,
    RESULT_FILE,
    SAMPLES,
    mlp_step,
    tiny_problem,
    train_tiny,
)


def step_forever(x: np.ndarray, y: np.ndarray, weights: dict) -> None:
    """Data-parallel steps without end, one line each: every step all-reduces the gradients,
    so a rank that dies leaves the others waiting in the collective."""
    import mindspore as ms

    _, step = mlp_step(weights)
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
    if rt.distributed:  # Model.train's context, as its loop (engine.training.loops) sets it
        import mindspore as ms

        from msdet.engine.runtime.distributed import set_data_parallel_context

        set_data_parallel_context(ms, rt.world_size)
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
