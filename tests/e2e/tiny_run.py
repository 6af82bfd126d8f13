"""Run the entry points as a user would, on a tiny shapes set (shared by e2e tests)."""

from __future__ import annotations

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# Small enough for ~30 s per run on 2 cores (most of it graph compilation).
TINY = [
    "runtime=cpu",
    "data.num_train=24",
    "data.num_val=8",
    "data.img_size=[128,128]",
    "eval.img_size=[128,128]",
    "eval.batch_size=4",
    "train.batch_size=4",
    "train.warmup_epochs=1",
    "train.eval_interval=1",
    "train.log_interval=2",
]


def run_entry(
    script: str, run_dir, cache_dir, *overrides: str, timeout: int = 300, tiny: bool = True
) -> subprocess.CompletedProcess:
    """``python <script> <TINY> <overrides>`` with its run folder and dataset cache."""
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
