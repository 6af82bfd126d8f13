"""train.py's rules for its run folder, decided before anything is written into it.

- A fresh run is refused in a folder that holds another run's results (a checkpoint,
  ``results.csv``, ``metrics.json``), unless ``train.overwrite=true`` removes them. What a run
  killed before its first checkpoint left (partial files, an empty ``checkpoints/``, its
  first plots) is no run: a fresh run clears it, with one log line.
- ``train.resume=auto`` continues the run of its folder (without a named folder: the latest
  run under ``<run.root>/train``). When that run wrote no checkpoint there is nothing to
  resume, and the message says that a fresh run may start there; when no run was ever
  there, the message says so and gives the command that starts it (:func:`fresh_command`).
- ``train.resume=PATH`` to one of the folder's own checkpoints is the same as ``auto``;
  a checkpoint of another run continues that run in this folder only when the folder holds
  no run of its own (or with ``train.overwrite=true``).

Whether the checkpoint fits the config is decided later, once the data is read
(:mod:`~msdet.engine.training.resume`).
"""

from __future__ import annotations

import logging
import os
import shutil
from collections.abc import Sequence
from typing import Any

from msdet.common.runs import latest_run, resolve_run_folder
from msdet.data.labels_plot import LABELS_FILE
from msdet.engine.runtime.amp import AMP_FOLDER
from msdet.engine.training.checkpoint_files import (
    CHECKPOINTS,
    checkpoint_dir,
    inside_run,
    partial_files,
    resume_candidates,
    saved_checkpoints,
)
from msdet.engine.training.run_record import RESULTS_CSV, RESULTS_PNG

log = logging.getLogger("train")

# What makes a folder hold a run: losing any of these loses work.
RESULTS = (RESULTS_CSV, "metrics.json")
# Everything a training run writes into its folder besides its lock and its config record:
# what train.overwrite=true removes. tests/e2e/test_train.py holds it against a real run.
RUN_OUTPUTS = (
    CHECKPOINTS, RESULTS_CSV, RESULTS_PNG, "tensorboard", "eval", "profiler", "metrics.json",
    "detections.json", "coco_summary.txt", "val_predictions.jpg", "confusion_matrix.png",
    "confusion_matrix_normalized.png", "PR_curve.png", "P_curve.png", "R_curve.png",
    "F1_curve.png", "train.log", AMP_FOLDER, LABELS_FILE,
)  # fmt: skip


def locate_resumed_run(cfg: Any) -> None:
    """``train.resume=auto`` without ``run.name``/``run.dir`` continues the latest run under
    ``<run.root>/train`` that wrote a checkpoint: its folder becomes ``run.dir``."""
    if str(cfg.train.resume) != "auto" or cfg.run.dir or cfg.run.name:
        return
    parent, _ = resolve_run_folder(cfg.run, "train")
    latest = latest_run(parent, holds=lambda folder: bool(resume_candidates(folder)))
    if latest is None:
        raise ValueError(
            f"train.resume=auto: no run with a checkpoint under {parent}; name one with "
            "run.name=... or run.dir=..., or start a fresh run without train.resume"
        )
    cfg.run.dir = latest


def run_results(run_dir: str) -> list[str]:
    """What of another run's work ``run_dir`` holds: its checkpoints and result files."""
    found = [os.path.relpath(p, run_dir) for p in saved_checkpoints(run_dir)]
    return found + [n for n in RESULTS if os.path.isfile(os.path.join(run_dir, n))]


def accept_train_folder(run: Any) -> None:
    """Apply the rules of the module docstring to ``run``'s claimed folder (main rank only:
    the one writer of a run's artefacts; by the time another rank looks, rank 0 may already
    have begun this very run)."""
    if run.folder.lock is None:
        return
    tcfg = run.cfg.train
    resume = str(tcfg.resume) if tcfg.resume else ""
    if resume == "auto" or (resume and inside_run(resume, run.dir)):
        traces = [n for n in (*RUN_OUTPUTS, *RESULTS) if os.path.exists(os.path.join(run.dir, n))]
        if resume == "auto" and not traces:
            was = "was created now" if getattr(run.folder, "created", False) else "is empty"
            raise ValueError(
                f"train.resume=auto: no run to continue in {run.dir} (the folder {was}): "
                f"start one there with: {fresh_command(getattr(run, 'argv', []))}"
            )
        if resume == "auto" and not resume_candidates(run.dir):
            raise ValueError(
                f"train.resume=auto: nothing to resume in {run.dir}: its run wrote no "
                "checkpoint (it stopped before its first epoch ended); a fresh run may start "
                "there: the same command without train.resume"
            )
        return
    held = run_results(run.dir)
    if held and not tcfg.overwrite:
        shown = ", ".join(held[:4]) + (f" and {len(held) - 4} more" if len(held) > 4 else "")
        if resume:
            raise ValueError(
                f"{run.dir} already holds a run ({shown}); train.resume={resume} would continue "
                "another run over it: continue this folder's own run with train.resume=auto, "
                "replace it with train.overwrite=true, or resume into a new folder (another "
                "run.name=..., or no run.dir/run.name)"
            )
        raise ValueError(
            f"{run.dir} already holds a run ({shown}): continue it with train.resume=auto, "
            "replace it with train.overwrite=true, or choose a new folder with run.dir=... "
            "(or run.name=...)"
        )
    found = [n for n in RUN_OUTPUTS if os.path.exists(os.path.join(run.dir, n))]
    if not held:  # a dead run's log may tell why it died: this run appends to it
        found = [n for n in found if n != "train.log"]
    if held:
        log.warning("train.overwrite=true: removing %s from %s", ", ".join(found), run.dir)
    elif found:
        log.info(
            "%s: removing what a run stopped before its first checkpoint left (%s)",
            run.dir,
            ", ".join(
                found + [os.path.basename(p) for p in partial_files(checkpoint_dir(run.dir))]
            ),
        )
    for name in found:
        path = os.path.join(run.dir, name)
        shutil.rmtree(path) if os.path.isdir(path) else os.remove(path)


# What a command line says about where a run goes and whether it continues one.
_RUN_KEYS = ("train.resume", "train.overwrite", "run.dir", "run.name", "run.root")


def fresh_command(argv: Sequence[str]) -> str:
    """The ``msdet train`` command line of ``argv`` without ``train.resume``: the run it
    asked to continue, started."""
    kept = [a for a in argv if _key(a) != "train.resume"]
    return " ".join(["msdet train", *kept])


def resume_command(argv: Sequence[str], run_dir: str) -> str:
    """The ``msdet train`` command line that continues the run of ``run_dir`` started with
    ``argv``: its settings (a resume refuses another model) with ``run.dir=`` that folder
    and ``train.resume=auto``."""
    kept = [a for a in argv if _key(a) not in _RUN_KEYS]
    return " ".join(["msdet train", *kept, f"run.dir={run_dir}", "train.resume=auto"])


def _key(setting: str) -> str:
    return setting.partition("=")[0].lstrip("+")
