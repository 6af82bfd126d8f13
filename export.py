"""Export a trained detector to MINDIR (or ONNX), with or without in-graph NMS.

    python export.py ckpt=PATH [export.format=MINDIR|ONNX] [export.with_nms=true|false]
                     [export.batch_size=1] [eval.img_size=[416,416]]

The network and its input size come from the checkpoint's description (a checkpoint
written before msdet described them also needs ``model=...`` and ``eval.img_size``).
The file lands in the run folder with ``export.json`` (input/output shapes, NMS settings,
the verified max difference between the file's outputs and the network's).
"""

from __future__ import annotations

import json
import logging
import os

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from msdet.engine.cli import apply_described_size, prepare_config, typed_overrides, user_errors
from msdet.engine.runtime.process import setup_runtime

log = logging.getLogger("export")


@hydra.main(config_path="configs", config_name="config", version_base="1.3")
def main(cfg: DictConfig) -> None:
    with user_errors():
        prepare_config(cfg)
        if not cfg.ckpt:
            raise SystemExit("export.py needs a checkpoint: python export.py ckpt=PATH")
        run_dir = HydraConfig.get().runtime.output_dir
        # The exported network is built on MindSpore's operators (the builders' default), so
        # msdet's CPU kernels are neither built nor measured here.
        OmegaConf.update(cfg, "runtime.cpu_kernels", "native")
        setup_runtime(cfg.runtime, run_dir)
        # These import MindSpore, which must load after setup_runtime prepared the environment.
        from msdet.engine.inference.export import (
            ExportError,
            check_export_format,
            export_and_verify,
            sample_images,
        )
        from msdet.models.inference import InferenceNet, build_nms
        from msdet.models.weights import load_described_detector

        fmt = check_export_format(cfg.export.format)
        typed = typed_overrides()
        detector, used_ema, description = load_described_detector(cfg.ckpt, cfg.model, typed)
        apply_described_size(cfg, description, typed)
        model_name = description.model["name"] if description else str(cfg.model.name)
        with_nms = bool(cfg.export.with_nms)
        net = InferenceNet(
            detector, build_nms(cfg.eval, detector.num_classes) if with_nms else None
        )
        h, w = (int(v) for v in cfg.eval.img_size)
        batch = int(cfg.export.batch_size)
        stem = os.path.join(
            run_dir, f"{model_name}_{h}x{w}_b{batch}" + ("_nms" if with_nms else "")
        )
        try:
            report = export_and_verify(net, sample_images(batch, (h, w)), stem, fmt)
        except ExportError as err:
            log.error("%s", err)
            if with_nms:
                log.error("the plain network may still export: add export.with_nms=false")
            raise SystemExit(1) from err

        report.update(
            checkpoint=os.path.abspath(cfg.ckpt),
            ema_weights=used_ema,
            model=model_name,
            class_names=description.class_names if description else None,
            num_classes=detector.num_classes,
            with_nms=with_nms,
            nms=OmegaConf.to_container(cfg.eval, resolve=True) if with_nms else None,
            outputs=(
                "dets [B, max_det, 6] (x1, y1, x2, y2 in input pixels, score, class index), counts [B]"
                if with_nms
                else "predictions [B, A, 5 + C] (cx, cy, w, h in input pixels, objectness, class probs)"
            ),
            input="BGR 0-255 float32 [B, 3, H, W], letterboxed (image top-left, pad 114)",
        )
        with open(os.path.join(run_dir, "export.json"), "w", encoding="utf-8") as f:
            json.dump(report, f, indent=2)
        diff = report["max_abs_diff"]
        log.info(
            "exported %s (%s, input %s, outputs %s); max abs diff vs the network: %s",
            report["file"],
            report["format"],
            report["input_shape"],
            report["output_shapes"],
            "not verified (no onnxruntime)" if diff is None else f"{diff:.3g}",
        )


if __name__ == "__main__":
    main()
