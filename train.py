"""Train a YOLOX detector: ``python train.py [model=yolox_s] [data=coco] [key=value ...]``.

With no arguments: YOLOX-nano on the built-in synthetic ``shapes`` dataset, on Ascend when
present, else on CPU. Everything of a run lands in its run folder (``hydra.run.dir``).
"""

from __future__ import annotations

import logging
import sys

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from msdet.engine.cli import prepare_config, user_errors
from msdet.engine.runtime.process import setup_runtime

log = logging.getLogger("train")


@hydra.main(config_path="configs", config_name="config", version_base="1.3")
def main(cfg: DictConfig) -> None:
    with user_errors():
        prepare_config(cfg)
        rt = setup_runtime(cfg.runtime, HydraConfig.get().runtime.output_dir)
        # Imports MindSpore: only after setup_runtime prepared the process environment.
        from msdet.engine.training.trainer import TrainingFailedError, run_training

        try:
            metrics = run_training(cfg, rt)
        except TrainingFailedError as err:
            log.error("training stopped: %s", err)
            sys.exit(1)
        if metrics:
            log.info(
                "done: mAP %.4f, mAP50 %.4f; run folder %s",
                metrics["mAP"],
                metrics["mAP50"],
                rt.run_dir,
            )


if __name__ == "__main__":
    main()
