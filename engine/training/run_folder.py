"""train.py's rules for its run folder: a fresh run is refused in a folder that holds another
run (unless it overwrites), and ``train.resume=auto`` without a named run continues the
latest one."""

from __future__ import annotations

import logging
import os
import shutil
from typing import Any

from msdet.common.runs import latest_run, resolve_run_folder
from msdet.engine.training.run_record import RESULTS_CSV, RESULTS_PNG

log = logging.getLogger("train")

# What a run writes into its folder besides its log and config record.
RUN_OUTPUTS = ("checkpoints", RESULTS_CSV, RESULTS_PNG, "tensorboard", "eval", "metrics.json",
               "detections.json", "coco_summary.txt")  # fmt: skip


def locate_resumed_run(cfg: Any) -> None:
    """``train.resume=auto`` without ``run.name``/``run.dir`` continues the latest run under
    ``<run.root>/train``: its folder becomes ``run.dir``."""
    if str(cfg.train.resume) != "auto" or cfg.run.dir or cfg.run.name:
        return
    parent, _ = resolve_run_folder(cfg.run, "train")
    latest = latest_run(parent)
    if latest is None:
        raise ValueError(
            f"train.resume=auto: no run to resume under {parent}; name one with run.name=... "
            "or run.dir=..., or start a fresh run without train.resume"
        )
    cfg.run.dir = latest


def accept_train_folder(run: Any) -> None:
    """Refuse to start a fresh run in a folder that holds another run (its checkpoints or
    results would mix with this one's), unless ``train.overwrite=true`` removes them.

    Only the main rank, the one writer of a run's artefacts, judges whether the folder is
    used: by the time another rank looks, rank 0 may already have begun this very run."""
    tcfg = run.cfg.train
    if run.folder.lock is None:
        return
    found = [name for name in RUN_OUTPUTS if os.path.exists(os.path.join(run.dir, name))]
    if not found or tcfg.resume:
        return
    if not tcfg.overwrite:
        raise ValueError(
            f"{run.dir} already holds a run ({', '.join(found)}): continue it with "
            "train.resume=auto, replace it with train.overwrite=true, or choose a new "
            "folder with run.dir=... (or run.name=...)"
        )
    log.warning("train.overwrite=true: removing %s from %s", ", ".join(found), run.dir)
    for name in found:
        path = os.path.join(run.dir, name)
        shutil.rmtree(path) if os.path.isdir(path) else os.remove(path)
