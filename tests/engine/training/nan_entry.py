"""Entry point for the non-finite check test: ``train.py`` plus a weight poisoned mid-run.

``MSDET_TEST_POISON="<parameter name>@<global step>"`` (a switch that exists only here)
sets the first element of that parameter to NaN just before that training step. Everything
else is train.py's command unchanged; production runs never see this.
"""

from __future__ import annotations

import os
import runpy
import sys

# Launched as a script: the repository root holds train.py and the tests package.
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
sys.path.insert(0, ROOT)

POISON_VAR = "MSDET_TEST_POISON"


def _add_poison(name: str, step: int) -> None:
    import mindspore as ms
    import numpy as np
    from mindspore.train import Callback, Model

    class PoisonWeight(Callback):
        def on_train_step_begin(self, run_context):
            cb = run_context.original_args()
            if cb.cur_step_num != step:
                return
            param = dict(cb.train_network.parameters_and_names())[name]
            value = param.asnumpy().copy()
            value.flat[0] = np.nan
            param.set_data(ms.Tensor(value, param.dtype))

    train = Model.train

    def train_with_poison(self, *args, callbacks=None, **kwargs):
        return train(self, *args, callbacks=[PoisonWeight(), *(callbacks or [])], **kwargs)

    Model.train = train_with_poison


if __name__ == "__main__":
    from msdet.engine.runtime.cpu import configure_process_env

    configure_process_env("CPU")  # before MindSpore loads, as setup_runtime would
    param_name, _, at_step = os.environ[POISON_VAR].rpartition("@")
    _add_poison(param_name, int(at_step))
    # Run train.py as the main script, with this script's command line.
    sys.argv[0] = os.path.join(ROOT, "train.py")
    runpy.run_path(sys.argv[0], run_name="__main__")
