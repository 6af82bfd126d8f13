"""A run on a dataset of one's own, as a user meets it: stopped by SIGTERM it says where and
the command that resumes it, that command resumes it, and eval.py and export.py without
``data=`` score the dataset the checkpoint recorded (or say, in one error, that it is gone)."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

import pytest

from msdet.data.synthetic import generate_shapes
from tests.support import ROOT
from tests.support.tiny_run import read_results

pytestmark = pytest.mark.slow

# A 3-epoch run at 128 px from scratch (no network here), one graph: TINY's settings for a
# folder dataset (whose config has no data.num_train), multi-scale off.
SETTINGS = [
    "runtime=cpu",
    "data.img_size=[128,128]",
    "eval.img_size=[128,128]",
    "eval.batch_size=4",
    "train.batch_size=4",
    "train.epochs=3",
    "train.warmup_epochs=1",
    "train.no_aug_epochs=0",
    "train.eval_interval=1",
    "train.multiscale_range=0",
    "train.pretrained=null",
    "train.tensorboard=false",
    "train.log_interval=2",
]


def run(script: str, *args: str, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, script, *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=900, env=env)  # fmt: skip


@pytest.mark.long(145)
def test_a_stopped_run_on_own_data_resumes_and_its_checkpoint_knows_its_data(tmp_path):
    env = {**os.environ, "MSDET_CACHE_DIR": str(tmp_path / "cache")}
    data = tmp_path / "gadgets"
    generate_shapes(str(data), 24, 8, seed=4)
    run_dir = tmp_path / "run"
    args = [f"data={data}", *SETTINGS, f"run.dir={run_dir}"]
    proc = subprocess.Popen([sys.executable, "train.py", *args], cwd=ROOT, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)  # fmt: skip
    first = run_dir / "checkpoints" / "epoch_0001.ckpt"
    deadline = time.time() + 600
    while not first.exists() and time.time() < deadline and proc.poll() is None:
        time.sleep(0.2)
    time.sleep(1.0)  # into epoch 2
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 128 + signal.SIGTERM, out[-3000:]
    assert "stopped by SIGTERM (" in out and "resume with: msdet train" in out  # the console
    log = (run_dir / "train.log").read_text()  # every line whole
    # The header: the own-data recipe, and where it starts (train.pretrained typed: null).
    assert f"recipe: yolox (own data: data={data}), start: from scratch" in log
    stopped = (
        r"stopped by SIGTERM \(.*\) (in|after) epoch [123] of 3( \(after step \d of 6\))?; "
        rf"the last checkpoint: {run_dir}/checkpoints/last.ckpt \(after epoch [12], "
    )
    assert re.search(stopped, log), log[-3000:]
    (resume,) = re.findall(r"resume with: msdet train (.*)", log)
    assert resume.split() == [f"data={data}", *SETTINGS, f"run.dir={run_dir}", "train.resume=auto"]

    done = run("train.py", *resume.split(), env=env)  # the command, as printed
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    assert [r["epoch"] for r in read_results(run_dir)] == [1, 2, 3]

    best = str(run_dir / "checkpoints" / "best.ckpt")
    scored = run("eval.py", f"ckpt={best}", f"run.dir={tmp_path / 'eval'}", env=env)
    text = scored.stdout + scored.stderr
    assert scored.returncode == 0, text[-3000:]
    eval_log = (tmp_path / "eval" / "eval.log").read_text()
    assert f"data: {best}'s own, data={data} (COCO json files; val " in eval_log
    assert "; 8 val images at [128, 128]" in eval_log
    assert not (tmp_path / "cache").exists() or not [
        p for p in os.listdir(tmp_path / "cache") if p.startswith("shapes")
    ]  # the built-in set was not generated

    exported = run("export.py", f"ckpt={best}", f"run.dir={tmp_path / 'export'}", env=env)
    assert exported.returncode == 0, (exported.stdout + exported.stderr)[-3000:]
    (report,) = (run_dir / "checkpoints").glob("best_*.json")
    val = json.loads(report.read_text())["val"]
    assert val["images"] == 8 and val["split"] == str(data / "annotations/instances_val.json")

    shutil.move(str(data), str(tmp_path / "moved"))
    gone = run("eval.py", f"ckpt={best}", f"run.dir={tmp_path / 'eval2'}", env=env)
    errors = [line for line in (gone.stdout + gone.stderr).splitlines() if "error" in line]
    assert gone.returncode == 1 and errors == [
        f"error: {best} was trained on data={data}, recorded at {data}, which is gone: name "
        "the dataset to use with data=PATH (or data=... and data.root=PATH)"
    ]
