"""Train a YOLOX detector: ``python train.py [model=yolox_s] [data=coco] [key=value ...]``.

With no arguments: YOLOX-nano on the built-in synthetic ``shapes`` dataset, on Ascend when
present, else on CPU, into the next free ``runs/train/exp*`` folder. ``--help`` lists every
setting.
"""

from __future__ import annotations

import logging
import sys

from msdet.engine.cli import Run, run_command
from msdet.engine.training.run_folder import accept_train_folder, locate_resumed_run

log = logging.getLogger("train")


def train(run: Run) -> None:
    from msdet.engine.runtime.process import setup_runtime

    rt = setup_runtime(run.cfg.runtime, run.dir)
    # Imports MindSpore: only after setup_runtime prepared the process environment.
    from msdet.engine.training.trainer import TrainingFailedError, run_training

    try:
        metrics = run_training(run.cfg, rt, run.write_record)
    except TrainingFailedError as err:
        log.error("training stopped: %s", err)
        sys.exit(1)
    if metrics:
        log.info(
            "done: mAP %.4f, mAP50 %.4f; run folder %s", metrics["mAP"], metrics["mAP50"], run.dir
        )


if __name__ == "__main__":
    run_command(
        "train", train, accept=accept_train_folder, locate=locate_resumed_run, defer_record=True
    )
