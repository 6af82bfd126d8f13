"""The self-test's COCO evaluation on one card against the host's.

The host (the CPU reference process) runs msdet's evaluation of the reference weights over a
small generated val set and keeps its best detections, :data:`GT_PER_IMAGE` per image, as
that set's ground truth (``eval_gt.json``), so its own mAP is high and every detection a
device finds differently lowers the device's. The device then runs the same evaluation (its
network, its NMS path: the device's ``NMSWithMask`` or, where the chip profile says so, the
host's) against that ground truth, and the two evaluations are compared: mAP, mAP50 and the
number of detections.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

from msdet.tools.selftest.cases import (
    EVAL_DATA,
    NUM_CLASSES,
    Check,
    as_called,
    compose_config,
    nano,
    runs_fp16,
)

GT_FILE, IMAGES_FILE = "eval_gt.json", "eval_images.json"
GT_PER_IMAGE = 5
EVAL_BATCH = 2
# float32 on both sides: the same detections, so the same scores up to rounding; an fp16
# network (a 910A's cube) moves scores and boxes a little, and a detection near another's
# IoU threshold may be kept on one side only (each such change moves mAP by ~1/35 here).
TOL_MAP_FP32, TOL_MAP_FP16 = 1e-3, 5e-2  # absolute, in mAP (fp16: not measured on a card)
TOL_COUNT_FP16 = 0.05  # detections, relative


def eval_config() -> Any:
    """The evaluation's config: YOLOX-nano on the small generated val set."""
    return compose_config([*EVAL_DATA, f"eval.batch_size={EVAL_BATCH}"])


def write_annotations(path: str, source: Any, annotations: list[dict]) -> None:
    """A COCO annotation file of ``source``'s images, YOLOX's 80 class slots as categories
    1..80 and ``annotations``."""
    categories = [{"id": i + 1, "name": f"class{i}"} for i in range(NUM_CLASSES)]
    data = {"images": source.coco.dataset["images"], "categories": categories,
            "annotations": annotations}  # fmt: skip
    with open(path, "w", encoding="utf-8") as f:
        json.dump(data, f)


def ground_truth(detections: list[dict], per_image: int = GT_PER_IMAGE) -> list[dict]:
    """COCO annotations from COCO results: each image's ``per_image`` best-scored boxes."""
    by_image: dict[int, list[dict]] = {}
    for det in detections:
        by_image.setdefault(int(det["image_id"]), []).append(det)
    out = []
    for image_id in sorted(by_image):
        best = sorted(by_image[image_id], key=lambda d: -d["score"])[:per_image]
        for det in best:
            x, y, w, h = (float(v) for v in det["bbox"])
            out.append({"id": len(out) + 1, "image_id": image_id, "category_id": det["category_id"],
                        "bbox": [x, y, w, h], "area": w * h, "iscrowd": 0})  # fmt: skip
    return out


def evaluate(
    cfg: Any, source: Any, weights: str, nms: Any, out_dir: str, rt: Any = None
) -> tuple[dict, int]:
    """msdet's evaluation of the reference weights over ``source``: (metrics, detections);
    the networks called as a run with ``rt`` calls them (:func:`.cases.as_called`)."""
    from msdet.data.pipeline import build_eval_dataset
    from msdet.engine.evaluation.loop import evaluate_on_dataset
    from msdet.models.inference import InferenceNet

    detector = InferenceNet(nano(cfg, weights))
    detector.set_train(False)
    detector, nms = as_called(detector, rt), as_called(nms, rt)
    dataset = build_eval_dataset(cfg.data, source, cfg.eval.img_size, EVAL_BATCH)
    metrics, _ = evaluate_on_dataset(detector, nms, dataset, source, out_dir, verbose=False)
    with open(os.path.join(out_dir, "detections.json"), encoding="utf-8") as f:
        count = len(json.load(f))
    return metrics, count


def host_evaluation(weights: str, work: str) -> dict[str, Any]:
    """In the CPU reference process: the ground truth file from the host's detections, and
    the host's evaluation against it (figures for ``reference.npz``)."""
    from msdet.data.build import build_sources
    from msdet.data.coco import CocoSource
    from msdet.models.inference import build_nms

    cfg = eval_config()
    _, val = build_sources(cfg.data)
    nms = build_nms(cfg.eval, NUM_CLASSES, on_host=True)
    write_annotations(os.path.join(work, IMAGES_FILE), val, [])
    blank = CocoSource(work, IMAGES_FILE, val.img_dir)
    first = os.path.join(work, "eval_host_detections")
    evaluate(cfg, blank, weights, nms, first)
    with open(os.path.join(first, "detections.json"), encoding="utf-8") as f:
        write_annotations(os.path.join(work, GT_FILE), val, ground_truth(json.load(f)))
    truth = CocoSource(work, GT_FILE, val.img_dir)
    metrics, count = evaluate(cfg, truth, weights, nms, os.path.join(work, "eval_host"))
    return {"eval_mAP": metrics["mAP"], "eval_mAP50": metrics["mAP50"], "eval_detections": count,
            "eval_img_dir": val.img_dir, "eval_ground_truth": len(truth.coco.dataset["annotations"])}  # fmt: skip


def check_evaluation(rt: Any, ref: dict, weights: str, work: str) -> Check:
    """The same evaluation on this device against the host's ground truth: mAP, mAP50 and
    the number of detections equal to the host's (within the fp16 tolerances where the
    evaluation network runs in fp16: on a chip without a float32 cube)."""
    from msdet.data.coco import CocoSource
    from msdet.models.inference import build_nms

    cfg = eval_config()
    truth = CocoSource(work, GT_FILE, str(ref["eval_img_dir"]))
    nms = build_nms(cfg.eval, NUM_CLASSES, on_host=rt.host_nms, kernels=rt.kernels,
                    max_boxes=rt.nms_max_boxes)  # fmt: skip
    started = time.perf_counter()
    metrics, count = evaluate(cfg, truth, weights, nms, os.path.join(work, "eval_device"), rt)
    seconds = time.perf_counter() - started
    fp16 = runs_fp16(rt, "O0")  # the evaluation network is float32
    tol = TOL_MAP_FP16 if fp16 else TOL_MAP_FP32
    host = {k: float(ref[f"eval_{k}"]) for k in ("mAP", "mAP50")}
    errors = {k: abs(float(metrics[k]) - host[k]) for k in host}
    host_count = int(ref["eval_detections"])
    count_err = abs(count - host_count) / max(host_count, 1)
    ok = max(errors.values()) <= tol and (
        count_err <= TOL_COUNT_FP16 if fp16 else count == host_count
    )
    return Check(
        "COCO evaluation vs the host's",
        "passed" if ok else "failed",
        {
            "mAP": float(metrics["mAP"]),
            "host_mAP": host["mAP"],
            "mAP50": float(metrics["mAP50"]),
            "host_mAP50": host["mAP50"],
            "detections": count,
            "host_detections": host_count,
            "ground_truth_boxes": int(ref["eval_ground_truth"]),
            "nms": "host" if rt.host_nms else "device",
            "tolerance_map": tol,
            "tolerance_detections": TOL_COUNT_FP16 if fp16 else 0.0,
        },
        tol,
        seconds,
        "ground truth: the host's best detections; fp16 tolerances" if fp16 else "",
    )
