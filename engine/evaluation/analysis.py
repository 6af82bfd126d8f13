"""Evaluation analysis from COCO ground truth and COCO-format detections (numpy only).

Everything here reads the two things :class:`engine.evaluation.coco.CocoEvaluator` already has:
the ground truth as a COCO dataset dict (``coco_gt.dataset``) and the detections as COCO
result records ``{image_id, category_id, bbox [x, y, w, h], score}`` (``evaluator.results``
or ``detections.json``). It never imports MindSpore, so eval.py can call it either side of
the runtime set-up and the tests run in milliseconds.

- :func:`match_by_class`: every detection marked true positive, false positive or ignored
  at one IoU, exactly as pycocotools' ``COCOeval`` does (area "all", 100 detections).
- :func:`pr_curves`: per-class precision at COCO's 101 recall points, equal to
  ``COCOeval.eval["precision"][T, :, k, 0, 2]`` (its mean over recall is the class's AP50).
- :func:`confidence_curves` / :func:`best_f1`: precision, recall and F1 against the score
  threshold, and the threshold with the best mean F1.
- :func:`confusion_matrix`: class-agnostic one-to-one matching at one IoU and score.
- :func:`analyse_detections`: all of the above in one call.

The one deliberate difference from pycocotools: it records a match by storing the ground
truth's annotation id and tests it for truth, so a detection matched to an annotation with
id 0 counts as a false positive there. Here it counts as a true positive (msdet's own
datasets number annotations from 1, where both agree).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

# COCO's 101 recall points, built as pycocotools builds them (np.arange drifts).
RECALL_THRESHOLDS = np.linspace(0.0, 1.0, 101)
# Score thresholds of the P/R/F1 curves: 0.000, 0.001, ..., 1.000 (rounded, so that the
# best-F1 threshold reads 0.119, not 0.11900000000000001).
CONF_THRESHOLDS = np.round(np.linspace(0.0, 1.0, 1001), 3)
PR_IOU = 0.5  # the PR and P/R/F1 curves describe AP50
# The confusion matrix matches at the same IoU as the curves (Ultralytics uses 0.45): at
# 0.45 a box with IoU 0.47 would be "correct" in the matrix but a false positive in AP50
# and in the P/R/F1 figures written beside it.
MATRIX_IOU = 0.5
# Used for the matrix when no best-F1 threshold exists (nothing was ever detected right):
# Ultralytics' fixed default.
FALLBACK_CONF = 0.25
MAX_DETS = 100  # per image and class, as COCOeval's maxDets[-1]
# COCOeval's "all" area range: a box outside it is ignored (only absurd areas are).
AREA_ALL = (0.0, 1e5**2)


@dataclass(frozen=True)
class ClassMatches:
    """One class's detections in pycocotools' accumulation order (score descending,
    ties in image-id order, then in the order the detections were given).

    ``tp``/``fp`` are exclusive; a detection that is neither matched a crowd region and is
    ignored. ``num_gt`` counts the non-crowd ground truth boxes.
    """

    scores: np.ndarray  # [D] float64
    tp: np.ndarray  # [D] bool
    fp: np.ndarray  # [D] bool
    num_gt: int

    @property
    def has_detections(self) -> bool:
        """Whether any detection of the class counts (as a TP or an FP)."""
        return bool(self.tp.any() or self.fp.any())


@dataclass(frozen=True)
class ConfidenceCurves:
    """Per-class precision, recall and F1 at each score threshold in ``conf``.

    Rows of classes without ground truth are NaN and ``valid`` is False for them; the
    ``mean_*`` curves average the valid classes.
    """

    conf: np.ndarray  # [N]
    precision: np.ndarray  # [K, N]
    recall: np.ndarray  # [K, N]
    f1: np.ndarray  # [K, N]
    valid: np.ndarray  # [K] bool

    def mean(self, name: str) -> np.ndarray:
        """The mean over valid classes of ``precision``, ``recall`` or ``f1`` ([N]; NaN
        when no class has ground truth)."""
        values = getattr(self, name)[self.valid]
        return values.mean(0) if len(values) else np.full(len(self.conf), np.nan)


@dataclass(frozen=True)
class EvaluationAnalysis:
    """What :func:`analyse_detections` computes; :meth:`summary` is its JSON part."""

    class_names: list[str]
    pr: np.ndarray  # [K, 101] precision at RECALL_THRESHOLDS, -1 without ground truth
    curves: ConfidenceCurves
    best: dict[str, Any]
    matrix: np.ndarray  # [K + 1, K + 1] int64, rows predicted, columns true
    matrix_iou: float
    matrix_conf: float
    matrix_conf_rule: str  # "best_f1", "fixed" or "fallback"

    def mean_pr(self) -> np.ndarray:
        """The mean PR curve over classes with ground truth (its mean is mAP50)."""
        valid = self.pr[:, 0] > -1
        return self.pr[valid].mean(0) if valid.any() else np.zeros(len(RECALL_THRESHOLDS))

    def ap50(self) -> np.ndarray:
        """AP at IoU 0.5 per class (-1 without ground truth), as pycocotools reports it."""
        return np.where(self.pr[:, 0] > -1, self.pr.mean(1), -1.0)

    def summary(self) -> dict[str, Any]:
        """Plain numbers for ``metrics.json``: the best-F1 figures and the thresholds used."""
        return {
            **self.best,
            "curves_iou": PR_IOU,
            "confusion_matrix_iou": self.matrix_iou,
            "confusion_matrix_conf": self.matrix_conf,
            "confusion_matrix_conf_rule": self.matrix_conf_rule,
            "confusion_matrix_orientation": "rows predicted, columns true; last is background",
        }


def coco_iou(dt: np.ndarray, gt: np.ndarray, gt_crowd: np.ndarray) -> np.ndarray:
    """IoU ``[D, G]`` of xywh boxes as pycocotools computes it (``maskUtils.iou``).

    Against a crowd box the overlap is divided by the detection's own area (intersection
    over detection), so any part of a crowd region can absorb a detection.
    """
    dt = np.asarray(dt, dtype=np.float64).reshape(-1, 4)
    gt = np.asarray(gt, dtype=np.float64).reshape(-1, 4)
    crowd = np.asarray(gt_crowd, dtype=bool).reshape(-1)
    # The same operations in the same order as maskApi.c's bbIou, so results are bit-equal.
    w = np.minimum(dt[:, None, 2] + dt[:, None, 0], gt[None, :, 2] + gt[None, :, 0])
    w = w - np.maximum(dt[:, None, 0], gt[None, :, 0])
    h = np.minimum(dt[:, None, 3] + dt[:, None, 1], gt[None, :, 3] + gt[None, :, 1])
    h = h - np.maximum(dt[:, None, 1], gt[None, :, 1])
    overlap = (w > 0) & (h > 0)
    inter = np.where(overlap, w * h, 0.0)
    dt_area = (dt[:, 2] * dt[:, 3])[:, None]
    gt_area = (gt[:, 2] * gt[:, 3])[None, :]
    union = np.where(crowd[None, :], dt_area, dt_area + gt_area - inter)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(overlap, inter / np.where(overlap, union, 1.0), 0.0)


class _Split:
    """Ground truth and detections grouped by (image id, category id), in COCOeval's order."""

    def __init__(
        self,
        gt_dataset: Mapping[str, Any],
        detections: Sequence[Mapping[str, Any]],
        category_ids: Sequence[int],
        image_ids: Sequence[int] | None,
    ):
        known_images = {int(img["id"]) for img in gt_dataset.get("images", [])}
        if image_ids is None:
            image_ids = known_images
        self.image_ids = sorted({int(i) for i in image_ids})
        self.category_ids = [int(c) for c in category_ids]
        wanted_images, wanted_cats = set(self.image_ids), set(self.category_ids)
        self.gts: dict[tuple[int, int], list[Mapping[str, Any]]] = {}
        self.dts: dict[tuple[int, int], list[Mapping[str, Any]]] = {}
        for ann in gt_dataset.get("annotations", []):
            key = (int(ann["image_id"]), int(ann["category_id"]))
            if key[0] in wanted_images and key[1] in wanted_cats:
                self.gts.setdefault(key, []).append(ann)
        unknown = {int(d["image_id"]) for d in detections} - known_images
        if unknown:
            raise ValueError(
                f"detections refer to image ids not in the ground truth: {sorted(unknown)[:10]}"
            )
        for det in detections:
            key = (int(det["image_id"]), int(det["category_id"]))
            if key[0] in wanted_images and key[1] in wanted_cats:
                self.dts.setdefault(key, []).append(det)


def _gt_arrays(anns: Sequence[Mapping[str, Any]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Boxes [G, 4], crowd flags and COCOeval's ignore flags (crowd, or area outside "all")."""
    boxes = np.array([a["bbox"] for a in anns], dtype=np.float64).reshape(-1, 4)
    crowd = np.array([bool(a.get("iscrowd", 0)) for a in anns], dtype=bool)
    area = np.array([float(a.get("area", a["bbox"][2] * a["bbox"][3])) for a in anns])
    ignore = crowd | (area < AREA_ALL[0]) | (area > AREA_ALL[1])
    return boxes, crowd, ignore.reshape(-1)


def _match_image_class(
    dts: Sequence[Mapping[str, Any]],
    gts: Sequence[Mapping[str, Any]],
    iou_threshold: float,
    max_det: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Scores, TP and FP flags of one image's detections of one class (COCOeval.evaluateImg)."""
    order = np.argsort([-float(d["score"]) for d in dts], kind="mergesort")[:max_det]
    dts = [dts[i] for i in order]
    scores = np.array([float(d["score"]) for d in dts], dtype=np.float64)
    dt_boxes = np.array([d["bbox"] for d in dts], dtype=np.float64).reshape(-1, 4)
    area = dt_boxes[:, 2] * dt_boxes[:, 3]
    outside_area = (area < AREA_ALL[0]) | (area > AREA_ALL[1])
    if not gts:  # most (image, class) pairs of a real evaluation: all false positives
        return scores, np.zeros(len(dts), dtype=bool), ~outside_area
    gt_boxes, crowd, ignore = _gt_arrays(gts)
    gt_order = np.argsort(ignore, kind="mergesort")  # ignored ground truth last
    gt_boxes, crowd, ignore = gt_boxes[gt_order], crowd[gt_order], ignore[gt_order]
    matched = np.zeros(len(dts), dtype=bool)
    dt_ignored = np.zeros(len(dts), dtype=bool)
    ious = coco_iou(dt_boxes, gt_boxes, crowd).tolist()
    crowd_l, ignore_l = crowd.tolist(), ignore.tolist()
    taken = [False] * len(gts)
    for d, row in enumerate(ious):
        # Greedy in score order: the best still-free box, a regular one before an
        # ignored one; ties go to the later box, as COCOeval's `<` comparison does.
        best, m = min(iou_threshold, 1 - 1e-10), -1
        for g, iou in enumerate(row):
            if taken[g] and not crowd_l[g]:
                continue
            if m > -1 and not ignore_l[m] and ignore_l[g]:
                break
            if iou < best:
                continue
            best, m = iou, g
        if m > -1:
            matched[d], dt_ignored[d], taken[m] = True, ignore_l[m], True
    dt_ignored |= ~matched & outside_area
    return scores, matched & ~dt_ignored, ~matched & ~dt_ignored


def match_by_class(
    gt_dataset: Mapping[str, Any],
    detections: Sequence[Mapping[str, Any]],
    category_ids: Sequence[int],
    image_ids: Sequence[int] | None = None,
    iou_threshold: float = PR_IOU,
    max_det: int = MAX_DETS,
) -> list[ClassMatches]:
    """Each class's detections marked TP / FP / ignored at ``iou_threshold``, as COCOeval.

    ``gt_dataset``: a COCO dataset dict (e.g. ``coco_gt.dataset``); ``detections``: COCO
    result records; ``category_ids``: the classes, in training-index order; ``image_ids``:
    the images evaluated (default all of ``gt_dataset``; detections on other images are
    left out, as ``COCOeval.params.imgIds`` does). Crowd ground truth never counts as a
    miss, and detections it absorbs are ignored. At most ``max_det`` detections per image
    and class count, the highest scoring. Returns one :class:`ClassMatches` per category.
    """
    split = _Split(gt_dataset, detections, category_ids, image_ids)
    images_of: dict[int, set[int]] = {cat: set() for cat in split.category_ids}
    for img, cat in (*split.gts, *split.dts):
        images_of[cat].add(img)
    out = []
    for cat in split.category_ids:
        scores, tps, fps, num_gt = [], [], [], 0
        for img in sorted(images_of[cat]):  # COCOeval's order: image ids ascending
            gts = split.gts.get((img, cat), [])
            num_gt += int((~_gt_arrays(gts)[2]).sum()) if gts else 0
            dts = split.dts.get((img, cat), [])
            if dts:
                s, tp, fp = _match_image_class(dts, gts, iou_threshold, max_det)
                scores.append(s)
                tps.append(tp)
                fps.append(fp)
        if scores:
            s, tp, fp = np.concatenate(scores), np.concatenate(tps), np.concatenate(fps)
            order = np.argsort(-s, kind="mergesort")  # stable: ties stay in image order
            out.append(ClassMatches(s[order], tp[order], fp[order], num_gt))
        else:
            empty = np.zeros(0, dtype=bool)
            out.append(ClassMatches(np.zeros(0), empty, empty, num_gt))
    return out


def pr_curves(matches: Sequence[ClassMatches]) -> np.ndarray:
    """Precision ``[K, 101]`` at :data:`RECALL_THRESHOLDS`, as COCOeval accumulates it.

    Precision is made monotone (each point is the best precision at that recall or
    higher) and is 0 past the highest recall reached; -1 for a class without ground truth.
    """
    out = -np.ones((len(matches), len(RECALL_THRESHOLDS)))
    for k, m in enumerate(matches):
        if m.num_gt == 0:
            continue
        tp = np.cumsum(m.tp).astype(float)
        fp = np.cumsum(m.fp).astype(float)
        recall = tp / m.num_gt
        precision = tp / (fp + tp + np.spacing(1))
        precision = np.maximum.accumulate(precision[::-1])[::-1]
        idx = np.searchsorted(recall, RECALL_THRESHOLDS, side="left")
        reached = idx < len(precision)
        out[k] = 0.0
        out[k, reached] = precision[idx[reached]]
    return out


def confidence_curves(
    matches: Sequence[ClassMatches], conf: np.ndarray = CONF_THRESHOLDS
) -> ConfidenceCurves:
    """Precision, recall and F1 of the detections scoring >= each threshold in ``conf``.

    Exact counts, no interpolation: the matching is greedy in score order, so the
    detections above a threshold are matched as if the others did not exist. Where no
    detection of a class passes a threshold its precision is 1 if the class has any
    detection at all (the curve continued from its highest score, as Ultralytics) and 0
    if it has none; F1 is 0 where precision + recall is 0.
    """
    conf = np.asarray(conf, dtype=np.float64)
    shape = (len(matches), len(conf))
    precision, recall, f1 = np.full(shape, np.nan), np.full(shape, np.nan), np.full(shape, np.nan)
    valid = np.array([m.num_gt > 0 for m in matches], dtype=bool)
    for k, m in enumerate(matches):
        if not valid[k]:
            continue
        # Detections at or above each threshold: a prefix of the score-sorted list.
        n = np.searchsorted(-m.scores, -conf, side="right")
        tp = np.concatenate(([0], np.cumsum(m.tp)))[n].astype(float)
        fp = np.concatenate(([0], np.cumsum(m.fp)))[n].astype(float)
        none_passed = 1.0 if m.has_detections else 0.0
        with np.errstate(divide="ignore", invalid="ignore"):
            p = np.where(tp + fp > 0, tp / (tp + fp), none_passed)
            r = tp / m.num_gt
            f = np.where(p + r > 0, 2 * p * r / (p + r), 0.0)
        precision[k], recall[k], f1[k] = p, r, f
    return ConfidenceCurves(conf, precision, recall, f1, valid)


def best_f1(curves: ConfidenceCurves, class_names: Sequence[str]) -> dict[str, Any]:
    """The threshold with the highest mean F1 (the lowest such, on ties) and the mean and
    per-class P, R, F1 there.

    Returns ``{"best_f1", "best_f1_conf", "precision_at_best_f1", "recall_at_best_f1",
    "per_class_at_best_f1": {name: {"precision", "recall", "f1"}}}``; the means are over
    classes with ground truth. Values are None when no class has ground truth.
    """
    mean_f1 = curves.mean("f1")
    if not curves.valid.any():
        return {
            "best_f1": None,
            "best_f1_conf": None,
            "precision_at_best_f1": None,
            "recall_at_best_f1": None,
            "per_class_at_best_f1": {},
        }
    i = int(np.argmax(mean_f1))
    per_class = {
        str(name): {
            "precision": float(curves.precision[k, i]),
            "recall": float(curves.recall[k, i]),
            "f1": float(curves.f1[k, i]),
        }
        for k, name in enumerate(class_names)
        if curves.valid[k]
    }
    return {
        "best_f1": float(mean_f1[i]),
        "best_f1_conf": float(curves.conf[i]),
        "precision_at_best_f1": float(curves.mean("precision")[i]),
        "recall_at_best_f1": float(curves.mean("recall")[i]),
        "per_class_at_best_f1": per_class,
    }


def confusion_matrix(
    gt_dataset: Mapping[str, Any],
    detections: Sequence[Mapping[str, Any]],
    category_ids: Sequence[int],
    conf: float,
    iou_threshold: float = MATRIX_IOU,
    image_ids: Sequence[int] | None = None,
) -> np.ndarray:
    """Counts ``[K + 1, K + 1]`` (int64): row = predicted class, column = true class,
    index K = background.

    Per image, detections scoring >= ``conf`` are matched to ground truth of any class,
    one-to-one, greedily by IoU (highest first, pairs with IoU >= ``iou_threshold``). A
    matched pair counts at [predicted, true] (off the diagonal: right place, wrong class);
    an unmatched ground truth box at [K, true] (missed); an unmatched detection at
    [predicted, K] (a false alarm). Crowd boxes are not ground truth here, and an
    unmatched detection lying inside a crowd region (intersection over its own area >=
    ``iou_threshold``) is not counted at all, as COCOeval ignores it.
    """
    split = _Split(gt_dataset, detections, category_ids, image_ids)
    label_of = {c: k for k, c in enumerate(split.category_ids)}
    bg = len(label_of)
    matrix = np.zeros((bg + 1, bg + 1), dtype=np.int64)
    gt_by_image: dict[int, list[Mapping[str, Any]]] = {}
    dt_by_image: dict[int, list[Mapping[str, Any]]] = {}
    for (img, _), anns in split.gts.items():
        gt_by_image.setdefault(img, []).extend(anns)
    for (img, _), dets in split.dts.items():
        dt_by_image.setdefault(img, []).extend(d for d in dets if float(d["score"]) >= conf)
    for img in split.image_ids:
        anns = gt_by_image.get(img, [])
        regular = [a for a in anns if not a.get("iscrowd", 0)]
        crowd = [a for a in anns if a.get("iscrowd", 0)]
        dets = dt_by_image.get(img, [])
        gt_labels = np.array([label_of[int(a["category_id"])] for a in regular], dtype=np.int64)
        dt_labels = np.array([label_of[int(d["category_id"])] for d in dets], dtype=np.int64)
        gt_boxes = np.array([a["bbox"] for a in regular], dtype=np.float64).reshape(-1, 4)
        dt_boxes = np.array([d["bbox"] for d in dets], dtype=np.float64).reshape(-1, 4)
        iou = coco_iou(dt_boxes, gt_boxes, np.zeros(len(regular), dtype=bool))  # [D, G]
        dt_used = np.zeros(len(dets), dtype=bool)
        gt_used = np.zeros(len(regular), dtype=bool)
        pairs = np.argwhere(iou >= iou_threshold)
        order = np.argsort(-iou[pairs[:, 0], pairs[:, 1]], kind="stable")
        for d, g in pairs[order]:
            if not dt_used[d] and not gt_used[g]:
                dt_used[d] = gt_used[g] = True
                matrix[dt_labels[d], gt_labels[g]] += 1
        np.add.at(matrix, (bg, gt_labels[~gt_used]), 1)
        false_alarm = ~dt_used
        if crowd and false_alarm.any():
            crowd_boxes = np.array([a["bbox"] for a in crowd], dtype=np.float64).reshape(-1, 4)
            ioa = coco_iou(dt_boxes, crowd_boxes, np.ones(len(crowd), dtype=bool))
            false_alarm &= ~(ioa >= iou_threshold).any(1)
        np.add.at(matrix, (dt_labels[false_alarm], bg), 1)
    return matrix


def normalize_confusion(matrix: np.ndarray, axis: int = 0) -> np.ndarray:
    """``matrix`` as fractions: ``axis=0`` divides each column by its sum (where each true
    class's boxes went; Ultralytics' normalised plot), ``axis=1`` each row (what each
    prediction was). Empty rows/columns stay 0."""
    matrix = np.asarray(matrix, dtype=np.float64)
    sums = matrix.sum(axis=axis, keepdims=True)
    return np.divide(matrix, sums, out=np.zeros_like(matrix), where=sums > 0)


def analyse_detections(
    gt_dataset: Mapping[str, Any],
    detections: Sequence[Mapping[str, Any]],
    category_ids: Sequence[int],
    class_names: Sequence[str],
    image_ids: Sequence[int] | None = None,
    matrix_conf: float | None = None,
    matrix_iou: float = MATRIX_IOU,
) -> EvaluationAnalysis:
    """PR curves, P/R/F1 against confidence, the best-F1 threshold and the confusion matrix.

    The matrix is taken at ``matrix_conf`` when given, else at the best-F1 threshold (the
    operating point the P/R/F1 figures describe; YOLOX scores are objectness x class
    probability and run lower than the scores Ultralytics' fixed 0.25 was chosen for),
    else, when nothing was ever detected correctly, at :data:`FALLBACK_CONF`.
    """
    if len(class_names) != len(category_ids):
        raise ValueError(f"{len(class_names)} class names for {len(category_ids)} category ids")
    matches = match_by_class(gt_dataset, detections, category_ids, image_ids)
    curves = confidence_curves(matches)
    best = best_f1(curves, class_names)
    if matrix_conf is not None:
        conf, rule = float(matrix_conf), "fixed"
    elif best["best_f1"]:
        conf, rule = best["best_f1_conf"], "best_f1"
    else:
        conf, rule = FALLBACK_CONF, "fallback"
    matrix = confusion_matrix(gt_dataset, detections, category_ids, conf, matrix_iou, image_ids)
    return EvaluationAnalysis(
        class_names=[str(n) for n in class_names],
        pr=pr_curves(matches),
        curves=curves,
        best=best,
        matrix=matrix,
        matrix_iou=float(matrix_iou),
        matrix_conf=conf,
        matrix_conf_rule=rule,
    )
