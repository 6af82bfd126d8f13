"""An exported file scored beside the checkpoint it came from: COCO mAP of both on the val
split of the data config, the way eval.py scores each, so that a file that computes
something else (the most frequent report about deployed MINDIR files) is caught at export.
"""

from __future__ import annotations

import logging
import os
from typing import Any

log = logging.getLogger("export")

# The largest mAP (and mAP50) difference taken as agreement. The same network run by another
# runtime (onnxruntime's kernels, another summation order) moves scores by ~1e-6, which can
# reorder near-tied detections; a wrong export moves mAP by far more.
MAP_TOLERANCE = 0.002
# Settings that name a dataset: the model's, as the user says; the default data is not.
DATA_KEYS = ("data", "data.root", "data.classes")


def compare_on_val(
    cfg: Any,
    detector: Any,
    path: str,
    typed: dict[str, str],
    rt: Any,
    run_dir: str,
    data_named: bool | None = None,
) -> dict[str, Any]:
    """Score ``detector`` (the checkpoint's network, with NMS from ``cfg.eval``) and the
    exported file ``path`` (as eval.py runs it) on the val split of ``cfg.data``, at the
    file's input size and batch. Each evaluation's files go to ``<run_dir>/val_checkpoint``
    and ``<run_dir>/val_exported``.

    Returns the report's ``val`` entry: the split, its image count, each side's mAP and
    mAP50, their difference, ``agrees`` (within :data:`MAP_TOLERANCE`) and the ``verdict``
    line; or ``{"skipped": reason}`` when the data config's split cannot be scored (it does
    not exist, or has other classes than the model: an error when the dataset is named,
    since it is then the model's). ``data_named``: whether ``cfg.data`` is the model's
    dataset (named on the command line, or the one its checkpoint recorded); default:
    whether ``typed`` names one."""
    from msdet.data.build import build_val_source, dataset_classes
    from msdet.data.pipeline import build_eval_dataset
    from msdet.engine.evaluation.loop import evaluate_on_dataset
    from msdet.engine.inference.exported import ExportedModel, exported_nms, score_labels
    from msdet.engine.runtime.ascend import nms_on_host
    from msdet.models.description import ClassMismatchError
    from msdet.models.inference import InferenceNet, build_nms
    from msdet.ops.cpu_kernels import NATIVE

    model = ExportedModel(path)
    info = model.info
    try:
        names, _ = dataset_classes(cfg.data)
        labels = score_labels(
            info.class_names,
            info.num_classes,
            names,
            cfg.eval.class_map,
            cfg.ckpt,
            f"data={cfg.data.name}",
        )
        val = build_val_source(cfg.data)
    except (ValueError, OSError) as err:
        named = any(k in typed for k in DATA_KEYS) if data_named is None else data_named
        if isinstance(err, ClassMismatchError) and named:
            raise ClassMismatchError(
                f"{err}: {path} is written but cannot be scored on this val split "
                "(export.val=false leaves the check out)"
            ) from err
        log.warning(
            "the export was not scored on a val split (%s): name the model's dataset "
            "(data=...), or export.val=false",
            err,
        )
        return {"skipped": str(err)}
    nms_args = {
        "on_host": rt is not None
        and nms_on_host(rt, cfg.eval, detector.num_classes, cfg.eval.img_size),
        "kernels": rt.kernels if rt is not None else NATIVE,
        "max_boxes": rt.nms_max_boxes if rt is not None else None,
    }
    checkpoint_nms = build_nms(cfg.eval, detector.num_classes, **nms_args)
    sides = {
        "checkpoint": (InferenceNet(detector), checkpoint_nms),
        "exported file": (
            model,
            exported_nms(info, path, cfg.eval, typed, None)
            or build_nms(cfg.eval, info.num_classes, **nms_args),
        ),
    }
    scores: dict[str, dict[str, float]] = {}
    for side, (net, nms) in sides.items():
        log.info("scoring the %s on %d val images (%s)", side, len(val), val.ann_file)
        dataset = build_eval_dataset(cfg.data, val, info.img_size, info.batch_size)
        out_dir = os.path.join(run_dir, f"val_{side.split()[0]}")
        metrics, _ = evaluate_on_dataset(
            net, nms, dataset, val, out_dir, verbose=False, labels=labels
        )
        scores[side.split()[0]] = {"mAP": float(metrics["mAP"]), "mAP50": float(metrics["mAP50"])}
    diff = {k: scores["exported"][k] - scores["checkpoint"][k] for k in ("mAP", "mAP50")}
    agrees = all(abs(v) <= MAP_TOLERANCE for v in diff.values())
    verdict = (
        f"val mAP / mAP50 on {len(val)} images of {val.ann_file}: exported {info.format} "
        f"{scores['exported']['mAP']:.4f} / {scores['exported']['mAP50']:.4f}, checkpoint "
        f"{scores['checkpoint']['mAP']:.4f} / {scores['checkpoint']['mAP50']:.4f}"
        + (
            ""
            if agrees
            else f": the exported file scores differently (more than {MAP_TOLERANCE} apart); "
            f"{path} computes something else than its checkpoint"
        )
    )
    (log.info if agrees else log.error)("%s", verdict)
    return {
        "split": val.ann_file,
        "images": len(val),
        "checkpoint": scores["checkpoint"],
        "exported": scores["exported"],
        "difference": diff,
        "tolerance": MAP_TOLERANCE,
        "agrees": agrees,
        "verdict": verdict,
    }
