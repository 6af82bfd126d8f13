"""Evaluate a checkpoint with COCO mAP: ``python eval.py ckpt=PATH [data=...]``.

The network, its class count and input size come from the checkpoint's description (a
checkpoint written before msdet described them also needs ``model=...``). Uses the EMA
weights when present, letterboxed val images of the data config at ``eval.img_size``, and
writes detections.json and metrics.json into the run folder.
"""

from __future__ import annotations

import logging

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from msdet.engine.cli import apply_described_size, prepare_config, typed_overrides, user_errors
from msdet.engine.runtime.process import setup_runtime

log = logging.getLogger("eval")


@hydra.main(config_path="configs", config_name="config", version_base="1.3")
def main(cfg: DictConfig) -> None:
    with user_errors():
        prepare_config(cfg)
        if not cfg.ckpt:
            raise SystemExit("eval.py needs a checkpoint: python eval.py ckpt=PATH")
        rt = setup_runtime(cfg.runtime, HydraConfig.get().runtime.output_dir)
        # These import MindSpore, which must load after setup_runtime prepared the environment.
        from msdet.data.build import build_sources
        from msdet.data.pipeline import build_eval_dataset
        from msdet.engine.evaluation.loop import evaluate_on_dataset
        from msdet.models.inference import InferenceNet, build_nms
        from msdet.models.weights import load_described_detector

        typed = typed_overrides()
        _, val = build_sources(cfg.data)
        detector, used_ema, description = load_described_detector(
            cfg.ckpt, cfg.model, typed, val.num_classes, kernels=rt.kernels
        )
        apply_described_size(cfg, description, typed)
        log.info(
            "%s: %s%s weights, %d classes; %d val images at %s",
            cfg.ckpt,
            description.model["name"] + " " if description else "",
            "EMA" if used_ema else "raw",
            detector.num_classes,
            len(val),
            list(cfg.eval.img_size),
        )
        dataset = build_eval_dataset(cfg.data, val, cfg.eval.img_size, int(cfg.eval.batch_size))
        metrics, _ = evaluate_on_dataset(
            InferenceNet(detector),
            build_nms(cfg.eval, detector.num_classes, on_host=rt.host_nms, kernels=rt.kernels),
            dataset,
            val,
            rt.run_dir,
            plots=True,
        )
        log.info("mAP %.4f  mAP50 %.4f  (%s)", metrics["mAP"], metrics["mAP50"], rt.run_dir)


if __name__ == "__main__":
    main()
