"""Train a YOLOX detector: ``msdet train [model=yolox_s] [data=coco] [key=value ...]``
(``python train.py ...`` from a clone).

With no arguments: YOLOX-nano on the built-in synthetic ``shapes`` dataset, on Ascend when
present, else on CPU, into the next free ``runs/train/exp*`` folder. ``--help`` lists the main
settings, ``--help all`` every one.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence

from msdet.engine.cli import Run, run_command
from msdet.engine.training.run_folder import accept_train_folder, locate_resumed_run

log = logging.getLogger("train")


def train(run: Run) -> None:
    from msdet.engine.runtime.process import setup_runtime

    rt = setup_runtime(run.cfg.runtime, run.dir)
    # Imports MindSpore: only after setup_runtime prepared the process environment.
    from msdet.engine.training.interruption import RunInterrupted
    from msdet.engine.training.trainer import TrainingFailedError, run_training

    try:
        metrics = run_training(run.cfg, rt, run.write_record)
    except TrainingFailedError as err:
        log.error("training stopped: %s", err)
        sys.exit(1)
    except RunInterrupted as err:  # reported where it stopped: exit as the signal would
        sys.exit(128 + err.signum)
    if metrics:
        log.info(
            "done: mAP %.4f, mAP50 %.4f; run folder %s", metrics["mAP"], metrics["mAP50"], run.dir
        )


def main(argv: Sequence[str] | None = None) -> int:
    """``msdet train`` with ``argv`` (default: the process's arguments); 0 when the run
    finished. A bad command line exits 2, a user's error or a stopped run exits 1."""
    run_command(
        "train",
        train,
        argv,
        accept=accept_train_folder,
        locate=locate_resumed_run,
        defer_record=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
