"""A 2-rank job for the overflow-synchronisation test: msdet's TrainStep on a tiny loss.

``scripts/run_distributed_train.sh 2`` starts it on every rank (``TRAIN_ENTRY=...``). Each
rank trains tests/support/dp_overflow.py's two-weight quadratic with
``engine.training.step.TrainStep`` and a data-parallel gradient reducer, once with the fp32
non-finite skip and once with dynamic loss scaling, on batches where only rank 1 goes
wrong. Each rank writes which steps it skipped and its final weights to
``<run dir>/overflow_rank<R>.npz`` (with the HCCL_EXEC_TIMEOUT the launcher passed down);
the test checks that the ranks agree.
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
from tests.support.dp_overflow import MODES, RESULT_FILE, train  # noqa: E402


def main(run: Run) -> None:
    cfg = run.cfg
    rt = setup_runtime(cfg.runtime, run.dir)
    if rt.distributed:  # Model.train's context, as its loop (engine.training.loops) sets it
        import mindspore as ms

        from msdet.engine.runtime.distributed import set_data_parallel_context

        set_data_parallel_context(ms, rt.world_size)
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
