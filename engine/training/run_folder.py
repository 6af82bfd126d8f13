"""The run folder: refused when it holds another run, checked writable before any work."""

from __future__ import annotations

import logging
import os
import shutil
import tempfile

from msdet.engine.training.run_record import RESULTS_CSV, RESULTS_PNG

log = logging.getLogger("train")

# What a run writes into its folder (Hydra's .hydra/ and train.log appear before main runs).
RUN_OUTPUTS = ("checkpoints", RESULTS_CSV, RESULTS_PNG, "tensorboard", "eval", "metrics.json",
               "detections.json", "coco_summary.txt")  # fmt: skip


def prepare_run_folder(run_dir: str, resume: bool, overwrite: bool, is_main: bool) -> None:
    """Refuse to start a fresh run in a folder that holds another run (its checkpoints or
    results would mix with this one's), unless ``train.overwrite=true`` removes them; and
    refuse a folder this process cannot write into, before anything is computed.

    Only the main rank, the one writer of a run's artefacts, judges whether the folder is
    used: by the time another rank looks, rank 0 may already have begun this very run."""
    try:  # a real write: permission bits do not tell for root or read-only mounts
        fd, probe = tempfile.mkstemp(prefix=".msdet-write-test-", dir=run_dir)
        os.close(fd)
        os.remove(probe)
    except OSError as err:
        raise PermissionError(
            f"run folder {run_dir} is not writable ({err.strerror}): choose another with "
            "hydra.run.dir=..."
        ) from err
    if not is_main:
        return
    found = [name for name in RUN_OUTPUTS if os.path.exists(os.path.join(run_dir, name))]
    if not found or resume:
        return
    if not overwrite:
        raise ValueError(
            f"{run_dir} already holds a run ({', '.join(found)}): continue it with "
            "train.resume=auto, replace it with train.overwrite=true, or choose a new "
            "folder with hydra.run.dir=..."
        )
    log.warning("train.overwrite=true: removing %s from %s", ", ".join(found), run_dir)
    for name in found:
        path = os.path.join(run_dir, name)
        shutil.rmtree(path) if os.path.isdir(path) else os.remove(path)
