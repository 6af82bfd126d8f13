"""Evaluate a checkpoint with COCO mAP: ``python eval.py ckpt=PATH [data=...]``.

The network, its class count and input size come from the checkpoint's description (a
checkpoint written before msdet described them also needs ``model=...``). Uses the EMA
weights when present, letterboxed val images of the data config at ``eval.img_size``, and
writes detections.json, metrics.json and the evaluation plots into its run folder
(``runs/eval/exp*``). ``--help`` lists every setting.
"""

from __future__ import annotations

import logging

from msdet.engine.cli import Run, apply_described_size, run_command

log = logging.getLogger("eval")


def evaluate(run: Run) -> None:
    cfg = run.cfg
    if not cfg.ckpt:
        raise ValueError("eval.py needs a checkpoint: python eval.py ckpt=PATH")
    from msdet.engine.runtime.process import setup_runtime

    rt = setup_runtime(cfg.runtime, run.dir)
    # These import MindSpore, which must load after setup_runtime prepared the environment.
    from msdet.data.build import build_val_source
    from msdet.data.pipeline import build_eval_dataset
    from msdet.engine.evaluation.loop import evaluate_on_dataset
    from msdet.models.inference import InferenceNet, build_nms
    from msdet.models.weights import load_described_detector

    val = build_val_source(cfg.data)
    detector, used_ema, description = load_described_detector(
        cfg.ckpt, cfg.model, run.typed, val.num_classes, kernels=rt.kernels
    )
    apply_described_size(cfg, description, run.typed)
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
        build_nms(
            cfg.eval,
            detector.num_classes,
            on_host=rt.host_nms,
            kernels=rt.kernels,
            max_boxes=rt.nms_max_boxes,
        ),
        dataset,
        val,
        run.dir,
        plots=True,
    )
    log.info("mAP %.4f  mAP50 %.4f  (%s)", metrics["mAP"], metrics["mAP50"], run.dir)


if __name__ == "__main__":
    run_command("eval", evaluate)
