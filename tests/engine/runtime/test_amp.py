"""Mixed precision as the trainer applies it (engine.runtime.amp.mixed_precision)."""

from __future__ import annotations

import os

import pytest

from tests.support import ROOT, run_python

# Every test here takes seconds: it compiles, trains or starts a process.
pytestmark = pytest.mark.slow

SYNC_BN_O2 = """
from mindspore import nn
from mindspore._c_expression import MixedPrecisionType
from omegaconf import OmegaConf
from msdet.models.sync_batchnorm import convert_sync_batchnorm
from msdet.engine.runtime.amp import mixed_precision
from msdet.models.yolox import build_model

net = build_model(OmegaConf.load("configs/model/yolox_nano.yaml"), 3)
synced = convert_sync_batchnorm(net)
mixed_precision(net, "O2")
cells = list(net.cells_and_names())
syncs = [c for _, c in cells if isinstance(c, nn.SyncBatchNorm)]
convs = [c for _, c in cells if isinstance(c, nn.Conv2d)]
assert len(syncs) == synced == 104, (len(syncs), synced)
fp32 = [c for c in syncs if c.get_mixed_precision_type() == MixedPrecisionType.FP32]
fp16 = [c for c in convs if c.get_mixed_precision_type() == MixedPrecisionType.FP16]
print("syncbn fp32", len(fp32), "of", len(syncs), "conv fp16", len(fp16), "of", len(convs))
"""


def test_o2_keeps_every_sync_batchnorm_in_float32():
    """MindSpore's O2 black list names BatchNorm1d/2d/3d only; runtime.sync_bn's
    SyncBatchNorm layers must stay float32 all the same while convolutions go float16."""
    # A fresh process: MindSpore's device is pinned by the first kernel a process runs.
    env = {**os.environ, "ONEDNN_MAX_CPU_ISA": "AVX2"}
    stdout = run_python(["-c", SYNC_BN_O2], env=env, timeout=180)
    assert "syncbn fp32 104 of 104 conv fp16 113 of 113" in stdout, stdout


O1_CASTS = """
import numpy as np, mindspore as ms
from mindspore import nn
from msdet.engine.runtime.amp import mixed_precision

class Conv(nn.Cell):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)

    def construct(self, x):
        return self.conv(x)

x = ms.Tensor(np.random.default_rng(0).uniform(-1, 1, (1, 3, 8, 8)).astype(np.float32))


def in_float16(values):  # every value exactly a float16: computed in float16
    return bool((values == values.astype(np.float16).astype(np.float32)).all())


print("O0", in_float16(Conv()(x).asnumpy()))
for level in ("O1", "O2", "O3"):
    net = Conv()
    weight = net.conv.weight
    amp = mixed_precision(net, level)
    same = [p is weight for p in amp.get_parameters()] == [True]
    out = amp(x)
    print(level, amp is net, same, out.dtype, in_float16(out.asnumpy().astype(np.float32)))
"""


def test_every_amp_level_returns_the_network_that_casts(tmp_path):
    """O1 used to change nothing: MindSpore rewrites the network into a new Cell at O1, and
    the trainer kept the original. The returned network runs the convolution in float16 at
    every level (its float32 output holds float16 values; a float32 convolution's do not)
    and hands a float32 output back (O2/O3: a cast that only the returned network has); it
    trains the same Parameter objects."""
    script = tmp_path / "o1_casts.py"  # a file: MindSpore's rewrite reads the Cell's source
    script.write_text(O1_CASTS)
    stdout = run_python(
        [str(script)],
        cwd=tmp_path,  # the rewrite writes ./rewritten_network/
        env={**os.environ, "ONEDNN_MAX_CPU_ISA": "AVX2", "PYTHONPATH": ROOT},
        timeout=180,
    )
    lines = dict(line.split(" ", 1) for line in stdout.strip().splitlines()[-4:])
    assert lines["O0"] == "False"  # float32 convolution: values float16 cannot hold
    # A new network each time (O1: rewritten; O2/O3: wrapped in the output cast), the same
    # parameters, float16 arithmetic, a float32 result.
    for level in ("O1", "O2", "O3"):
        assert lines[level] == "False True Float32 True", (level, lines[level])
