"""Entry point for the distributed end-to-end tests: ``train.py`` plus a per-rank weight dump.

``scripts/run_distributed_train.sh`` starts it on every rank (``TRAIN_ENTRY=...``). It
runs train.py's command unchanged, except that ``mindspore.train.Model.train`` (and msdet's
jit loop, ``runtime.loop=jit``) gets one more callback: when training ends, every rank writes
its trainable parameters to
``<run dir>/final_weights_rank<R>.npz``, so a test can check that data parallelism kept
the ranks identical. Production runs (train.py itself) never write these files.
"""

from __future__ import annotations

import os
import runpy
import sys

# Launched as a script: the repository root holds train.py and the tests package.
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

from tests.support.tiny_run import WEIGHTS_FILE  # noqa: E402  (needs ROOT on sys.path)


def _add_weight_dump() -> None:
    import numpy as np
    from mindspore.train import Callback, Model

    class DumpTrainable(Callback):
        def on_train_end(self, run_context):
            from mindspore.communication import get_rank

            from msdet.engine.training.checkpoints import not_saved

            network = run_context.original_args().train_network
            # What a checkpoint holds: the LR schedule is derived from the config, not saved.
            params = network.trainable_params()
            weights = {p.name: p.asnumpy() for p in params if not not_saved(p.name)}
            run_dir = next(a.split("=", 1)[1] for a in sys.argv if a.startswith("run.dir="))
            np.savez(os.path.join(run_dir, WEIGHTS_FILE.format(rank=get_rank())), **weights)

    from msdet.engine.training.jit_loop import JitTrainLoop

    train = Model.train

    def train_with_dump(self, *args, callbacks=None, **kwargs):
        return train(self, *args, callbacks=[*(callbacks or []), DumpTrainable()], **kwargs)

    Model.train = train_with_dump
    jit_train = JitTrainLoop.train  # runtime.loop=jit: msdet's loop, the same callbacks

    def jit_train_with_dump(self, epochs, dataset, callbacks, **kwargs):
        return jit_train(self, epochs, dataset, [*callbacks, DumpTrainable()], **kwargs)

    JitTrainLoop.train = jit_train_with_dump


if __name__ == "__main__":
    from msdet.engine.runtime.cpu import configure_process_env

    configure_process_env("CPU")  # before MindSpore loads, as setup_runtime would
    _add_weight_dump()
    # Run train.py as the main script, with this script's command line.
    sys.argv[0] = os.path.join(ROOT, "train.py")
    runpy.run_path(sys.argv[0], run_name="__main__")
