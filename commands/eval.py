"""Evaluate a checkpoint with COCO mAP: ``msdet eval ckpt=PATH [data=...]`` (``python eval.py
ckpt=PATH ...`` from a clone).

The network, its class count and input size come from the checkpoint's description (a
checkpoint written before msdet described them also needs ``model=...``); so does the
dataset, unless ``data=...`` names one: the val split of the data it trained on. Uses the EMA
weights when present, letterboxed val images of the data config at ``eval.img_size``, and
writes detections.json, metrics.json and the evaluation plots into its run folder
(``runs/eval/exp*``). ``ckpt=`` also takes a file export.py wrote (``.mindir``, ``.onnx``):
it runs as exported, at its own input size and batch (and with its NMS when inside).
``--help`` lists the main settings, ``--help all`` every one.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence

from msdet.engine.cli import Run, run_command

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
    from msdet.data.record import names_dataset, recorded_data_config
    from msdet.engine.evaluation.loop import evaluate_on_dataset
    from msdet.engine.inference.exported import load_inference_model, score_labels

    model = load_inference_model(cfg, run.typed, rt)
    data_cfg = cfg.data
    if model.data is not None and not names_dataset(run.typed):
        data_cfg, line = recorded_data_config(model.data, cfg.data, run.typed, cfg.ckpt)
        log.info("%s", line)
    val = build_val_source(data_cfg)
    labels = score_labels(
        model.class_names,
        model.num_classes,
        val.class_names,
        cfg.eval.class_map,
        cfg.ckpt,
        val.ann_file,
    )
    log.info(
        "%s: %s, %d classes; %d val images at %s",
        cfg.ckpt,
        model.summary,
        model.num_classes,
        len(val),
        list(model.img_size),
    )
    dataset = build_eval_dataset(data_cfg, val, model.img_size, model.batch_size)
    metrics, _ = evaluate_on_dataset(
        model.net, model.nms, dataset, val, run.dir, plots=True, labels=labels
    )
    log.info("mAP %.4f  mAP50 %.4f  (%s)", metrics["mAP"], metrics["mAP50"], run.dir)


def main(argv: Sequence[str] | None = None) -> int:
    """``msdet eval`` with ``argv`` (default: the process's arguments); 0 when the evaluation
    finished. A bad command line exits 2, a user's error exits 1."""
    run_command("eval", evaluate, argv)
    return 0


if __name__ == "__main__":
    sys.exit(main())
