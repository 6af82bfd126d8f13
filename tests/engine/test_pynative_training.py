"""``runtime.mode=pynative``: a tiny training run steps op by op (for debugging) and produces
the same run folder as graph mode."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest

from tests.e2e.tiny_run import read_results, run_entry

pytestmark = pytest.mark.slow  # a whole training run: full suite only

PYNATIVE_RUN = [
    "runtime=cpu",
    "runtime.mode=pynative",
    "data.num_train=8",
    "data.num_val=4",
    "data.img_size=[64,64]",
    "eval.img_size=[64,64]",
    "eval.batch_size=4",
    "train.batch_size=4",
    "train.epochs=1",
    "train.warmup_epochs=1",
    "train.no_aug_epochs=0",
    "train.tensorboard=false",
]


def test_tiny_training_runs_in_pynative_mode(tmp_path):
    run_dir = tmp_path / "run"
    out = run_entry("train.py", run_dir, tmp_path / "cache", *PYNATIVE_RUN, tiny=False)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    log = Path(run_dir, "train.log").read_text()
    assert "pynative mode" in log
    rows = read_results(run_dir)
    assert [r["epoch"] for r in rows] == [1]
    assert all(math.isfinite(rows[0][f"loss_{k}"]) for k in ("total", "iou", "obj", "cls"))
    assert rows[0]["loss_total"] > 0 and rows[0]["num_fg"] > 0
    assert os.path.isfile(Path(run_dir, "checkpoints", "last.ckpt"))
    metrics = json.loads(Path(run_dir, "metrics.json").read_text())
    assert 0.0 <= metrics["mAP"] <= 1.0
