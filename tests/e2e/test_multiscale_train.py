"""train.py with multi-scale on: several sizes in graph mode, eval at eval.img_size, resume."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from msdet.engine.training.schedule import scheduled_size
from msdet.ops.cpu_kernels import default_cache_dir
from tests.support.tiny_run import run_entry

pytestmark = pytest.mark.slow

# Seed 2: steps 0-5 run at 128 and 96, steps 6-11 at 160 only, so a resumed run that
# restarted the sequence would be caught.
SEED = 2
SIZES_LINE = re.compile(r"steps per size: (.*)")


def steps_per_size(log: str) -> dict[tuple[int, int], int]:
    """The last 'steps per size' summary of a train.log."""
    text = SIZES_LINE.findall(log)[-1]
    out = {}
    for part in text.split(", "):
        size, n = part.split(": ")
        h, w = size.split("x")
        out[(int(h), int(w))] = int(n)
    return out


def expected(first: int, last: int) -> dict[tuple[int, int], int]:
    counts: dict[tuple[int, int], int] = {}
    for step in range(first, last):
        size = scheduled_size((128, 128), 1, SEED, step, 2)
        counts[size] = counts.get(size, 0) + 1
    return counts


# MindSpore's own log line when a graph comes from the persistent compile cache.
CACHE_HIT = "Use the compilation cache"


def test_multiscale_trains_several_sizes_and_resume_continues(tmp_path, cache_dir, monkeypatch):
    """With runtime.compile_cache on: the first run compiles every size up front (3 for
    range 1), the resumed run loads them all from the cache and compiles none."""
    # Its own graph cache; the kernel library (and the measured kernel choice) as built.
    kernels = default_cache_dir()  # read before the variable changes
    os.makedirs(kernels, exist_ok=True)
    monkeypatch.setenv("MSDET_CACHE_DIR", str(tmp_path / "msdet-cache"))
    (tmp_path / "msdet-cache").mkdir()
    (tmp_path / "msdet-cache" / "kernels").symlink_to(kernels, target_is_directory=True)
    run = tmp_path / "run"
    common = [
        "train.epochs=2",
        f"runtime.seed={SEED}",
        "train.no_aug_epochs=0",
        "train.multiscale_range=1",
        "train.multiscale_interval=2",
        "train.tensorboard=false",
        "eval.img_size=[160,160]",
        "runtime.compile_cache=true",
    ]
    # Each size compiles its own graph (1-3 min on a loaded 2-core CPU).
    out = run_entry("train.py", run, cache_dir, *common, "train.stop_at_epoch=1", timeout=1200)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    log = Path(os.path.join(run, "train.log")).read_text()
    assert steps_per_size(log) == expected(0, 6)  # 24 images / batch 4: 6 steps an epoch
    assert len(expected(0, 6)) < 3  # so that compiling all three sizes up front shows
    assert len(re.findall(r"training graph for \d+x\d+ compiled", log)) == 3
    assert "mAP" in log  # evaluated (at eval.img_size: its own network, not resized)
    assert CACHE_HIT not in out.stdout + out.stderr
    graphs = list((tmp_path / "msdet-cache" / "graphs").rglob("compile_cache_*.mindir"))
    assert len(graphs) >= 4  # three training sizes and the evaluation network

    out = run_entry("train.py", run, cache_dir, *common, "train.resume=auto", timeout=1200)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    log = Path(os.path.join(run, "train.log")).read_text()
    assert "resumed from" in log
    assert steps_per_size(log) == expected(6, 12)  # the sequence continues at step 6
    assert (out.stdout + out.stderr).count(CACHE_HIT) >= 4  # every graph loaded, none compiled
    assert sorted((tmp_path / "msdet-cache" / "graphs").rglob("compile_cache_*.mindir")) == sorted(
        graphs
    )
