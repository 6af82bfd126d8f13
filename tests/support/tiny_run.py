"""Run the entry points as a user would, on a tiny shapes set, and read what the runs leave."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np

from tests.support import ROOT

# Small enough for ~30 s per run on 2 cores (most of it graph compilation).
TINY = [
    "runtime=cpu",
    "data.num_train=24",
    "data.num_val=8",
    "data.img_size=[128,128]",
    "eval.img_size=[128,128]",
    "train.img_scale=1",
    "eval.batch_size=4",
    "train.batch_size=4",
    "train.warmup_epochs=1",
    "train.eval_interval=1",
    "train.log_interval=2",
]


# What every rank of tests/e2e/dp_entry.py's train.py writes when training ends.
WEIGHTS_FILE = "final_weights_rank{rank}.npz"

# Every augmentation off: the same images each epoch (runs that must fit a fixed batch).
NO_AUG = [
    "data.aug.mosaic_prob=0",
    "data.aug.hsv_prob=0",
    "data.aug.flip_prob=0",
    "data.aug.degrees=0",
    "data.aug.translate=0",
    "data.aug.shear=0",
]


def taken_by(script: str, overrides: list[str]) -> list[str]:
    """The settings of ``overrides`` that ``script`` takes (eval.py refuses train.*)."""
    from msdet.common.config import COMMANDS

    sections = COMMANDS[script.removesuffix(".py")].sections
    return [o for o in overrides if o.split("=", 1)[0].split(".")[0] in sections]


def tiny_val_split(cache_dir, *overrides: str) -> tuple[Path, Path]:
    """(annotation file, image folder) of the TINY set's val split, generated if missing
    (so that a test reading it runs alone, without a training run before it). The set is
    found as train.py finds it: from the composed config with TINY's data overrides, then
    the ``data.*`` ones among ``overrides`` (a run's own, e.g. a larger set)."""
    from hydra import compose, initialize_config_dir

    from msdet.data.build import build_sources

    data_overrides = [o for o in (*TINY, *overrides) if o.startswith("data.")]
    with initialize_config_dir(config_dir=os.path.join(ROOT, "configs"), version_base="1.3"):
        cfg = compose("config", overrides=[*data_overrides, f"data.cache_dir={cache_dir}"])
    _, val = build_sources(cfg.data)
    return Path(val.ann_file), Path(val.img_dir)


def run_entry(
    script: str,
    run_dir,
    cache_dir,
    *overrides: str,
    timeout: int = 900,
    tiny: bool = True,
    **popen: Any,
) -> subprocess.CompletedProcess:
    """``python <script> <TINY> <overrides>`` with its run folder and dataset cache
    (``popen``: more arguments of ``subprocess.run``, e.g. ``preexec_fn``).

    ``timeout`` only guards against a hang: a shared machine can run several times slower
    than usual (a tiny run takes ~30 s idle, over 300 s was seen under load)."""
    args = [
        sys.executable,
        script,
        *(taken_by(script, TINY) if tiny else []),
        f"data.cache_dir={cache_dir}",
        f"run.dir={run_dir}",
        *overrides,
    ]
    return subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=timeout, **popen)


def read_results(run_dir) -> list[dict[str, float]]:
    """results.csv as the run record's rows (``engine.training.run_record``)."""
    from msdet.engine.training.run_record import read_results as read

    return read(str(run_dir))


def final_weights(run_dir) -> dict[str, np.ndarray]:
    """The network's weights in a run's last checkpoint (its description left out)."""
    import mindspore as ms

    params = ms.load_checkpoint(os.path.join(run_dir, "checkpoints", "last.ckpt"))
    return {k: v.asnumpy() for k, v in params.items() if not k.startswith("msdet_")}


def assert_same_weights(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> None:
    """The two runs' weights are equal bit for bit."""
    assert set(a) == set(b)
    worst = max(float(np.abs(a[k].astype(np.float64) - b[k]).max()) for k in a)
    assert worst == 0.0, f"resumed run differs from the straight run by {worst}"
