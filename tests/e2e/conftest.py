"""Shared end-to-end fixtures: the dataset cache and one tiny training run."""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.support.tiny_run import run_entry


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("shapes_cache")


@pytest.fixture(scope="session")
def trained(tmp_path_factory, cache_dir):
    """One tiny training run with data sinking and O2 mixed precision requested on CPU.

    Under pytest-xdist the workers share it: the first to ask trains (the others wait on a
    lock), and every worker reads the same run folder and console output."""
    if os.environ.get("PYTEST_XDIST_WORKER") is None:
        return _train(tmp_path_factory.mktemp("run"), cache_dir)
    shared = tmp_path_factory.getbasetemp().parent  # this session's, common to its workers
    with open(shared / "trained.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        record = shared / "trained.json"
        if record.is_file():
            saved = json.loads(record.read_text())
            out = subprocess.CompletedProcess(saved["args"], 0, saved["stdout"], saved["stderr"])
            return Path(saved["run_dir"]), out
        run_dir, out = _train(shared / "trained", cache_dir)
        saved = {
            "run_dir": str(run_dir),
            "args": out.args,
            "stdout": out.stdout,
            "stderr": out.stderr,
        }
        record.write_text(json.dumps(saved))
        return run_dir, out


def _train(run_dir: Path, cache_dir) -> tuple[Path, subprocess.CompletedProcess]:
    out = run_entry(
        "train.py",
        run_dir,
        cache_dir,
        "train.epochs=3",
        "train.no_aug_epochs=1",
        "train.lr_per_img=0.0025",
        "runtime.sink=true",
        "runtime.amp=O2",
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return run_dir, out
