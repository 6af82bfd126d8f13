"""msdet's own data-parallel training step on 2 ranks (the one-process computation it must
equal: tests/support/dp_step.py).

``scripts/run_distributed_train.sh 2`` starts this on both ranks (``TRAIN_ENTRY=...``).
Each rank builds YOLOX through train.py's runtime set-up and
``engine.training.step.build_train_step`` (the gradient reducer, SGD with momentum and
weight decay, EMA: the production step) and trains ``STEPS`` steps on its own fixed batch,
then writes its trainable weights to ``<run dir>/step_rank<R>.npz``; rank 0 also writes the
initial weights.
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

from tests.support.dp_step import INITIAL_FILE, LR, RESULT_FILE, STEPS, network, rank_batch  # noqa: E402
from tests.support.training import training_loop  # noqa: E402


def main(run: Run) -> None:
    cfg = run.cfg
    import mindspore as ms

    from msdet.engine.runtime.process import setup_runtime
    from msdet.engine.training.step import build_train_step

    rt = setup_runtime(cfg.runtime, run.dir)
    loop = training_loop(cfg, rt)  # runtime.loop's: Model.train's or the jit loop's reducer
    net, loss = network(cfg)
    if rt.rank == 0:
        initial = {p.name: p.asnumpy() for p in net.trainable_params()}
        np.savez(os.path.join(rt.run_dir, INITIAL_FILE), **initial)
    step = build_train_step(net, loss, np.full(STEPS, LR, np.float32), cfg.train, rt,
                            grad_reducer=loop.gradient_reducer)  # fmt: skip
    losses = []
    for i in range(STEPS):
        out = step(*(ms.Tensor(a) for a in rank_batch(rt.rank, i)))
        losses.append(float(out[0].asnumpy()))
    weights = {p.name: p.asnumpy() for p in net.trainable_params()}
    out_file = os.path.join(rt.run_dir, RESULT_FILE.format(rank=rt.rank))
    np.savez(out_file, losses=np.asarray(losses), world=rt.world_size, **weights)


if __name__ == "__main__":
    run_command("tool", main)
