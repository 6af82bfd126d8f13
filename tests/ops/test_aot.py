"""ops.aot: in-place compiled operators leave MindSpore's other custom operators alone."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from tests.support import ROOT

# Every test here takes seconds: it compiles, trains or starts a process.
pytestmark = pytest.mark.slow

# A fresh process: MindSpore's PyNative executor remembers the first custom operator it
# runs, so what ran earlier in the test process would decide the outcome.
SCRIPT = textwrap.dedent(
    """
    import sys
    import mindspore as ms
    import numpy as np
    from mindspore import nn
    from msdet.ops.ema import flat_ema_op
    from msdet.ops.upsample import upsample2x_op

    ms.set_context(mode=getattr(ms, sys.argv[2]))
    library = sys.argv[1]

    class Update(nn.Cell):
        def __init__(self):
            super().__init__()
            self.op = flat_ema_op(library, 1, eager=sys.argv[2] == "PYNATIVE_MODE")
            self.value = ms.Parameter(ms.Tensor(np.full(3, 4.0, np.float32)), name="value")
            self.buffer = ms.Parameter(ms.Tensor(np.zeros(3, np.float32)), name="buffer")

        def construct(self, weight):
            return self.op(weight, self.value, self.buffer)

    update = Update()
    update(ms.Tensor([0.25], ms.float32))
    up = upsample2x_op(library)(ms.Tensor(np.arange(4, dtype=np.float32).reshape(1, 1, 2, 2)))
    print(update.buffer.asnumpy().tolist(), up.shape, float(up.asnumpy()[0, 0, 3, 3]))
    """
)


@pytest.mark.parametrize("mode", ["PYNATIVE_MODE", "GRAPH_MODE"])
def test_another_custom_operator_runs_after_an_in_place_one(library, mode, tmp_path):
    """The in-place EMA operator writes its buffer, and a compiled kernel of another arity
    runs at once after it (PyNative once applied the in-place operator's signature to every
    later custom operator and refused their inputs: "Check input args failed")."""
    script = tmp_path / "in_place.py"  # a file: graph mode reads the Cell's source
    script.write_text(SCRIPT, encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": ROOT}
    done = subprocess.run(
        [sys.executable, str(script), library, mode],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    # written in place: 0 + (4 - 0) * 0.25; the upsampling's last pixel is x[1, 1] = 3
    assert done.stdout.split("\n")[-2] == "[1.0, 1.0, 1.0] (1, 1, 4, 4) 3.0"
