"""Evaluation cases worked out by hand: four images with one object each for CocoEvaluator
(non-contiguous category ids, as COCO's), and a COCO set with COCOeval's edge cases (crowd
regions, duplicates, tied scores) for the PR curves, the confusion matrix and the plots."""

from __future__ import annotations

import contextlib
import io

import numpy as np
from pycocotools.coco import COCO

from msdet.engine.evaluation.coco import CocoEvaluator

# Non-contiguous category ids, as in COCO (1..90 with gaps).
CATEGORIES = [{"id": 1, "name": "disc"}, {"id": 3, "name": "box"}, {"id": 7, "name": "triangle"}]
CATEGORY_IDS = [1, 3, 7]
CLASS_NAMES = ["disc", "box", "triangle"]
SCALE = 0.5  # letterbox scale: the model sees every image at half size


def ground_truth() -> tuple[COCO, dict[int, list[tuple[list[float], int]]]]:
    """Four 400x300 images, each with one large 100x100 object of a known category."""
    objects = {
        1: [([20.0, 30.0, 100.0, 100.0], 1)],
        2: [([150.0, 100.0, 100.0, 100.0], 3)],
        3: [([200.0, 150.0, 100.0, 100.0], 7)],
        4: [([50.0, 50.0, 100.0, 100.0], 3)],
    }
    dataset = {
        "images": [
            {"id": i, "width": 400, "height": 300, "file_name": f"{i}.jpg"} for i in objects
        ],
        "categories": CATEGORIES,
        "annotations": [
            {
                "id": 10 * img + k,
                "image_id": img,
                "category_id": cat,
                "bbox": box,
                "area": box[2] * box[3],
                "iscrowd": 0,
            }
            for img, objs in objects.items()
            for k, (box, cat) in enumerate(objs)
        ],
    }
    gt = COCO()
    gt.dataset = dataset
    with contextlib.redirect_stdout(io.StringIO()):
        gt.createIndex()
    return gt, objects


def model_detections(objects, shift: float = 0.0, score: float = 0.9, max_det: int = 5):
    """What the detector would output for each object: letterboxed xyxy, score, class index."""
    ids = sorted(objects)
    dets = np.zeros((len(ids), max_det, 6), np.float32)
    counts = np.zeros(len(ids), np.int32)
    for i, img in enumerate(ids):
        for k, (box, cat) in enumerate(objects[img]):
            x, y, w, h = box
            dets[i, k] = [
                (x + shift) * SCALE,
                y * SCALE,
                (x + shift + w) * SCALE,
                (y + h) * SCALE,
                score,
                CATEGORY_IDS.index(cat),
            ]
            counts[i] += 1
    scales = np.full(len(ids), SCALE)
    sizes = np.tile([300, 400], (len(ids), 1))
    return dets, counts, ids, scales, sizes


def evaluate(tmp_path, dets, counts, ids, scales, sizes, **kwargs):
    gt, _ = ground_truth()
    ev = CocoEvaluator(gt, CATEGORY_IDS, CLASS_NAMES, out_dir=str(tmp_path))
    ev.update(dets, counts, ids, scales, sizes)
    return ev.evaluate(**kwargs)


def dataset(images, anns, cats):
    """A COCO dataset dict; annotation ids from 1, area and iscrowd filled in."""
    annotations = []
    for k, ann in enumerate(anns, start=1):
        x, y, w, h = ann["bbox"]
        annotations.append({"id": k, "area": w * h, "iscrowd": 0, **ann})
    return {
        "images": [{"id": i, "file_name": f"{i}.jpg", "width": 320, "height": 240} for i in images],
        "annotations": annotations,
        "categories": [{"id": c, "name": f"c{c}"} for c in cats],
    }


def det(image_id, category_id, bbox, score):
    return {"image_id": image_id, "category_id": category_id, "bbox": bbox, "score": score}


# cat 1, dog 2, bird 5 (ground truth, never detected), fish 9 (detected, no ground truth),
# tie 11 (COCOeval's edge cases, image 4); image ids out of order; a crowd cat region in
# image 1; duplicates and tied scores.
HAND_GT = dataset(
    [3, 1, 2, 4],
    [
        {"image_id": 1, "category_id": 1, "bbox": [10, 10, 40, 40]},
        {"image_id": 1, "category_id": 2, "bbox": [100, 100, 50, 30]},
        {"image_id": 1, "category_id": 1, "bbox": [150, 0, 80, 80], "iscrowd": 1},
        {"image_id": 2, "category_id": 1, "bbox": [0, 0, 20, 20]},
        {"image_id": 2, "category_id": 1, "bbox": [25, 0, 20, 20]},
        {"image_id": 2, "category_id": 5, "bbox": [50, 50, 10, 10]},
        {"image_id": 3, "category_id": 2, "bbox": [30, 30, 60, 60]},
        {"image_id": 3, "category_id": 5, "bbox": [0, 0, 5, 5]},
        {"image_id": 4, "category_id": 11, "bbox": [0, 0, 30, 10]},
        {"image_id": 4, "category_id": 11, "bbox": [10, 0, 30, 10]},
        {"image_id": 4, "category_id": 11, "bbox": [100, 0, 20, 10]},
    ],
    [1, 2, 5, 9, 11],
)


HAND_DETS = [
    det(1, 1, [12, 11, 40, 38], 0.9),
    det(1, 1, [160, 10, 30, 30], 0.85),  # inside the crowd region: ignored
    det(1, 2, [100, 100, 50, 30], 0.6),
    det(1, 1, [100, 100, 50, 30], 0.6),  # the dog called a cat
    det(1, 2, [300, 200, 10, 10], 0.6),
    det(2, 1, [0, 0, 20, 20], 0.7),
    det(2, 1, [1, 0, 20, 20], 0.65),  # duplicate
    det(2, 1, [25, 0, 20, 20], 0.3),
    det(2, 9, [50, 50, 10, 10], 0.5),
    det(3, 2, [32, 28, 58, 62], 0.95),
    det(3, 2, [30, 30, 60, 60], 0.2),  # duplicate
    det(4, 11, [5, 0, 30, 10], 0.9),  # IoU 0.714 with both boxes: takes the later one
    det(4, 11, [0, 0, 25, 10], 0.8),  # so this one (IoU 0.833 / 0.375) finds the first
    det(4, 11, [100, 0, 10, 10], 0.7),  # IoU exactly 0.5: a hit
]
