"""train.py with gradient accumulation: the schedule in optimizer steps of the total
batch, epochs of whole windows, and a resume that continues exactly."""

from __future__ import annotations

import os
from pathlib import Path

import mindspore as ms
import numpy as np
import pytest

from msdet.common.config import load_config
from tests.support.tiny_run import assert_same_weights, final_weights, read_results, run_entry

pytestmark = pytest.mark.slow

# 20 images at batch 4: 5 micro-batches per epoch, 2 windows of 2 (the 5th is not drawn).
ACCUMULATE = [
    "train.accumulate=2",
    "data.num_train=20",
    "train.epochs=3",
    "train.no_aug_epochs=1",
    "train.eval_interval=100",
    "train.tensorboard=false",
    "runtime.compile_cache=true",  # the stopped and the resumed run load the straight run's graphs
]


@pytest.fixture(scope="module")
def straight(tmp_path_factory, cache_dir):
    run_dir = tmp_path_factory.mktemp("accumulate")
    out = run_entry("train.py", run_dir, cache_dir, *ACCUMULATE)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return run_dir


def test_the_schedule_counts_optimizer_steps_of_the_total_batch(straight):
    log = Path(straight, "train.log").read_text()
    # the default recipe's lr_per_img x the total batch of 4 x 1 rank x 2 micro-batches
    lr = float(load_config("train").train.lr_per_img) * 4 * 2
    assert f"3 epochs x 2 steps, batch 4 x 1 ranks x 2 accumulated, lr {lr:.4g}\n" in log
    rows = read_results(straight)
    assert [r["epoch"] for r in rows] == [1, 2, 3]
    assert all(np.isfinite(r["loss_total"]) and r["num_fg"] > 0 for r in rows)
    params = ms.load_checkpoint(os.path.join(straight, "checkpoints", "last.ckpt"))
    assert int(params["global_step"].asnumpy().ravel()[0]) == 6  # 3 epochs x 2 windows
    # Checkpoints come at epoch ends, where no window is open.
    assert int(params["accumulate.micro_step"].asnumpy()) == 0
    sums = [k for k in params if k.startswith("accumulate.grad.")]
    assert len(sums) > 100 and not any(params[k].asnumpy().any() for k in sums)


def test_resume_with_accumulation_continues_exactly(tmp_path, cache_dir, straight):
    stopped = tmp_path / "stopped"
    out = run_entry("train.py", stopped, cache_dir, *ACCUMULATE, "train.stop_at_epoch=1")
    assert out.returncode == 0, out.stderr[-3000:]
    out = run_entry("train.py", stopped, cache_dir, *ACCUMULATE, "train.resume=auto")
    assert out.returncode == 0, out.stderr[-3000:]
    assert [r["epoch"] for r in read_results(stopped)] == [1, 2, 3]
    assert_same_weights(final_weights(stopped), final_weights(straight))
