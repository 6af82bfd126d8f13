"""Mixed precision as the trainer applies it (engine.amp.mixed_precision)."""

from __future__ import annotations

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

SYNC_BN_O2 = """
from mindspore import nn
from mindspore._c_expression import MixedPrecisionType
from omegaconf import OmegaConf
from models.sync_batchnorm import convert_sync_batchnorm
from engine.amp import mixed_precision
from models.yolox import build_model

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
    out = subprocess.run(
        [sys.executable, "-c", SYNC_BN_O2],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "syncbn fp32 104 of 104 conv fp16 113 of 113" in out.stdout, out.stdout
