"""A 2-rank job for gradient accumulation: msdet's TrainStep with ``accumulate=2`` and a
data-parallel gradient reducer (the job and its one-process reference:
tests/support/dp_accumulate.py).

``scripts/run_distributed_train.sh 2`` starts it on every rank (``TRAIN_ENTRY=...``). Each
rank trains the small linear model for ``STEPS`` optimizer steps of ``ACCUMULATE``
micro-batches, once in fp32 with the non-finite skip and once with dynamic loss scaling,
and writes per-call skip flags, final weights, EMA, LR step and loss scale to
``<run dir>/accumulate_rank<R>.npz``.
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
from tests.support.dp_accumulate import ACCUMULATE, MODES, RESULT_FILE, STEPS, micro_batch, train  # noqa: E402


def main(run: Run) -> None:
    cfg = run.cfg
    rt = setup_runtime(cfg.runtime, run.dir)
    if rt.distributed:  # Model.train's context, as its loop (engine.training.loops) sets it
        import mindspore as ms

        from msdet.engine.runtime.distributed import set_data_parallel_context

        set_data_parallel_context(ms, rt.world_size)
    results = {"world": rt.world_size}
    for mode in MODES:
        batches = [micro_batch(s, rt.rank, i) for s in range(STEPS) for i in range(ACCUMULATE)]
        for key, value in train(mode, ACCUMULATE, rt.world_size, batches).items():
            results[f"{mode}_{key}"] = value
    np.savez(os.path.join(rt.run_dir, RESULT_FILE.format(rank=rt.rank)), **results)


if __name__ == "__main__":
    run_command("tool", main)
