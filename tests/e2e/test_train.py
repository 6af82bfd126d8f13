"""End-to-end training on a tiny shapes set: run folder, sink + O2 on CPU, resume, kill."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import mindspore as ms
import numpy as np
import pytest

from tests.e2e.tiny_run import ROOT, TINY, read_results, run_entry

pytestmark = pytest.mark.slow


def test_run_folder_holds_every_artefact(trained):
    run_dir, _ = trained
    for name in (
        "train.log",
        "results.csv",
        "results.png",
        "metrics.json",
        "detections.json",
        ".hydra/config.yaml",
        "checkpoints/last.ckpt",
        "checkpoints/best.ckpt",
    ):
        assert os.path.isfile(os.path.join(run_dir, name)), name
    assert sorted(os.listdir(os.path.join(run_dir, "checkpoints")))[:3] == [
        "best.ckpt",
        "epoch_0001.ckpt",
        "epoch_0002.ckpt",
    ]
    assert any(f.startswith("events.out") for f in os.listdir(os.path.join(run_dir, "tensorboard")))
    metrics = json.loads(Path(os.path.join(run_dir, "metrics.json")).read_text())
    assert {"mAP", "mAP50", "mAP75", "per_class"} <= set(metrics)
    assert set(metrics["per_class"]) == {"disc", "rectangle", "triangle"}
    rows = read_results(run_dir)
    assert [r["epoch"] for r in rows] == [1, 2, 3]


def test_loss_went_down_and_logs_tell_the_truth(trained):
    run_dir, out = trained
    rows = read_results(run_dir)
    iou = [r["loss_iou"] for r in rows]
    assert iou[0] > iou[1] > iou[2]  # boxes improve every epoch
    # Total loss of the augmented epochs (the no-aug epoch adds L1 and changes the data).
    assert rows[1]["loss_total"] < rows[0]["loss_total"]
    assert rows[0]["loss_l1"] == 0 and rows[-1]["loss_l1"] > 0  # L1 on in the no-aug epoch
    log = Path(os.path.join(run_dir, "train.log")).read_text()
    assert "amp O2" in log and "cannot sink data on CPU" in log
    # LossMonitor counts real steps (6 per epoch) and TimeMonitor divides by them.
    assert "epoch: 1 step: 6, loss is" in out.stdout
    assert "per step time" in out.stdout


def final_weights(run_dir) -> dict[str, np.ndarray]:
    params = ms.load_checkpoint(os.path.join(run_dir, "checkpoints", "last.ckpt"))
    return {k: v.asnumpy() for k, v in params.items() if not k.startswith("msdet_")}


def test_resume_continues_exactly(tmp_path, cache_dir):
    """2 epochs straight == 1 epoch, stop, resume for the 2nd (CPU is deterministic)."""
    common = ["train.epochs=2", "train.no_aug_epochs=1", "train.tensorboard=false"]
    straight, stopped = tmp_path / "straight", tmp_path / "stopped"
    out = run_entry("train.py", straight, cache_dir, *common)
    assert out.returncode == 0, out.stderr[-3000:]
    out = run_entry("train.py", stopped, cache_dir, *common, "train.stop_at_epoch=1")
    assert out.returncode == 0, out.stderr[-3000:]
    assert len(read_results(stopped)) == 1
    out = run_entry("train.py", stopped, cache_dir, *common, "train.resume=auto")
    assert out.returncode == 0, out.stderr[-3000:]
    assert "resumed from" in Path(os.path.join(stopped, "train.log")).read_text()
    assert [r["epoch"] for r in read_results(stopped)] == [1, 2]
    a, b = final_weights(straight), final_weights(stopped)
    assert set(a) == set(b)
    worst = max(float(np.abs(a[k].astype(np.float64) - b[k]).max()) for k in a)
    assert worst == 0.0, f"resumed run differs from the straight run by {worst}"


def test_sigkill_mid_epoch_resumes_from_last_checkpoint(tmp_path, cache_dir):
    run_dir = tmp_path / "killed"
    args = [
        sys.executable,
        "train.py",
        *TINY,
        f"data.cache_dir={cache_dir}",
        f"hydra.run.dir={run_dir}",
        "train.epochs=3",
        "train.no_aug_epochs=0",
        "data.num_train=48",
    ]
    proc = subprocess.Popen(args, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    first = run_dir / "checkpoints" / "epoch_0001.ckpt"
    deadline = time.time() + 240
    while not first.exists() and time.time() < deadline and proc.poll() is None:
        time.sleep(0.2)
    time.sleep(1.0)  # into epoch 2
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert first.exists() and not (run_dir / "checkpoints" / "epoch_0003.ckpt").exists()
    out = run_entry(
        "train.py",
        run_dir,
        cache_dir,
        "train.epochs=3",
        "train.no_aug_epochs=0",
        "data.num_train=48",
        "train.resume=auto",
    )
    assert out.returncode == 0, out.stderr[-3000:]
    log = Path(run_dir / "train.log").read_text()
    assert "after epoch 1" in log or "after epoch 2" in log
    assert [r["epoch"] for r in read_results(run_dir)] == [1, 2, 3]
