"""Run the entry points as a user would, on a tiny shapes set (shared by e2e tests)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# Small enough for ~30 s per run on 2 cores (most of it graph compilation).
TINY = [
    "runtime=cpu",
    "data.num_train=24",  # TINY_TRAIN
    "data.num_val=8",  # TINY_VAL
    "data.img_size=[128,128]",
    "eval.img_size=[128,128]",
    "eval.batch_size=4",
    "train.batch_size=4",
    "train.warmup_epochs=1",
    "train.eval_interval=1",
    "train.log_interval=2",
]


TINY_TRAIN, TINY_VAL, SHAPES_SEED = 24, 8, 0


def tiny_val_split(cache_dir) -> tuple[Path, Path]:
    """(annotation file, image folder) of the TINY set's val split, generated if missing
    (so that a test reading it runs alone, without a training run before it)."""
    from data.synthetic import ensure_shapes_dataset, shapes_root

    root = ensure_shapes_dataset(
        shapes_root(str(cache_dir), SHAPES_SEED, TINY_TRAIN, TINY_VAL),
        TINY_TRAIN,
        TINY_VAL,
        SHAPES_SEED,
    )
    return Path(root) / "annotations" / "instances_val.json", Path(root) / "val"


def run_entry(
    script: str, run_dir, cache_dir, *overrides: str, timeout: int = 900, tiny: bool = True
) -> subprocess.CompletedProcess:
    """``python <script> <TINY> <overrides>`` with its run folder and dataset cache.

    ``timeout`` only guards against a hang: a shared machine can run several times slower
    than usual (a tiny run takes ~30 s idle, over 300 s was seen under load)."""
    args = [
        sys.executable,
        script,
        *(TINY if tiny else []),
        f"data.cache_dir={cache_dir}",
        f"hydra.run.dir={run_dir}",
        *overrides,
    ]
    return subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=timeout)


def read_results(run_dir) -> list[dict[str, float]]:
    """results.csv as a list of rows of floats."""
    import csv

    with open(os.path.join(run_dir, "results.csv"), encoding="utf-8") as f:
        return [{k: float(v) for k, v in row.items()} for row in csv.DictReader(f)]
