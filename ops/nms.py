"""Batched, class-aware non-maximum suppression on ``ops.NMSWithMask`` (graph mode, static shapes).

:class:`BatchedNMS` turns decoded YOLOX predictions ``[B, A, 5 + C]`` into a fixed number of
detections per image, following YOLOX's ``postprocess``: score = objectness x best class
probability (one label per anchor), keep ``score >= conf_thresh``, NMS per class. Every
shape is static: the result is zero-padded to ``max_det`` rows with a valid count per image.
On CPU the suppression runs on msdet's compiled greedy operator where ``engine.runtime.kernel_choice``
measured it faster (``kernels/greedy_nms.cc``: the same masks, at the cost of the candidates
that passed the threshold rather than of every slot).

:class:`HostNMS` runs the suppression on the host instead (chips whose ``NMSWithMask`` is
float16 only). :func:`greedy_nms` and :func:`postprocess_numpy` are a plain numpy
implementation of the same pipeline, used as the reference in tests and benchmarks.
"""

from __future__ import annotations

import mindspore as ms
import numpy as np
from mindspore import nn, ops

from msdet.ops.aot import aot_op

# Ascend's NMSWithMask accepts at most this many boxes per call (MindSpore docs).
ASCEND_MAX_NMS_BOXES = 2864

# Fill score for candidates that fail the threshold or are not finite: below any valid
# score, because valid scores are products of probabilities and thresholds are >= 0.
INVALID_SCORE = -1.0
FLOAT32_MAX = float(np.finfo(np.float32).max)


class Candidates(nn.Cell):
    """The first half of YOLOX's post-processing, on the device: score = objectness x best
    class probability, keep ``score >= conf_thresh``, the ``k`` best per image.

    ``construct(predictions [B, A, 5 + C])`` returns ``(boxes [B, k, 4]`` x1, y1, x2, y2,
    ``scores [B, k]`` sorted, ``labels [B, k]`` float32 class indices, ``valid [B, k]``);
    rows that are not valid hold zero boxes. Candidates with a NaN/inf score or box are
    never valid. ``k = min(pre_nms_topk, A)``.
    """

    def __init__(self, num_classes: int, conf_thresh: float, pre_nms_topk: int):
        super().__init__()
        self.num_classes = int(num_classes)
        self.conf_thresh = float(conf_thresh)
        self.pre_nms_topk = int(pre_nms_topk)
        self.topk = ops.TopK(sorted=True)
        self.best_class = ops.ArgMaxWithValue(axis=-1)

    def construct(self, predictions):
        # Always float32: class offsets of the device NMS reach C x image size (> 65504, the
        # float16 maximum, for 80 classes at 832 px) and float16 spacing at 50000 is 32 px.
        preds = predictions.astype(ms.float32)
        k = min(self.pre_nms_topk, preds.shape[1])
        centers = preds[:, :, 0:2]
        half = preds[:, :, 2:4] * 0.5
        boxes = ops.concat((centers - half, centers + half), -1)
        labels, class_prob = self.best_class(preds[:, :, 5 : 5 + self.num_classes])
        scores = preds[:, :, 4] * class_prob

        # An anchor with any NaN/inf in its row is never kept, as in YOLOX where torch.max
        # propagates NaN; ArgMaxWithValue skips a NaN class probability unless it comes first.
        # NaN and inf propagate through the sum; written out because MindSpore cannot export
        # IsFinite or ReduceAll to ONNX.
        # (The whole row when it has no further columns: MindSpore's CPU StridedSlice
        # copying all 85 columns took 61 of Candidates' 103 ms at 416 px, batch 8.)
        columns = 5 + self.num_classes
        rows = preds if preds.shape[2] == columns else preds[:, :, :columns]
        finite = ops.abs(rows.sum(-1)) <= FLOAT32_MAX
        valid = ops.logical_and(finite, scores >= self.conf_thresh)
        masked = ops.where(valid, scores, ops.full_like(scores, INVALID_SCORE))
        # Ascend's NMSWithMask ignores the score column, so the input must be pre-sorted.
        top_scores, top_idx = self.topk(masked, k)
        cand_valid = top_scores >= self.conf_thresh
        cand_boxes = ops.gather_elements(boxes, 1, ops.tile(top_idx.expand_dims(-1), (1, 1, 4)))
        cand_labels = ops.gather_elements(labels, 1, top_idx).astype(ms.float32)
        cand_boxes = ops.where(cand_valid.expand_dims(-1), cand_boxes, ops.zeros_like(cand_boxes))
        return cand_boxes, top_scores, cand_labels, cand_valid


class BatchedNMS(nn.Cell):
    """YOLOX post-processing: score threshold, top-k, class-aware NMS, fixed-size output.

    Args:
        num_classes: number of class columns after objectness (predictions use
            columns ``5 : 5 + num_classes``).
        conf_thresh: keep candidates with ``objectness * class_prob >= conf_thresh``.
        iou_thresh: a box is suppressed when its IoU with a higher-scoring kept box of the
            same class is ``> iou_thresh`` (no +1 pixel convention).
        pre_nms_topk: candidates per image that enter NMS, highest scores first; at most
            2864, the Ascend limit of one ``NMSWithMask`` call.
        max_det: detections returned per image.
        class_agnostic: suppress across classes (YOLOX's ``class_agnostic``).
        library: msdet's compiled CPU kernel library for the suppression
            (``kernels/greedy_nms.cc``: the same masks as ``NMSWithMask``, at the cost of the
            valid candidates only), or None for ``NMSWithMask`` (``CpuKernels.library_for("nms")``).

    ``construct(predictions)`` takes decoded predictions ``[B, A, 5 + C]`` (cx, cy, w, h in
    input pixels, objectness and class probabilities; float32 or float16) and returns
    ``(dets, counts)``: ``dets [B, max_det, 6]`` float32 rows (x1, y1, x2, y2, score,
    class index) sorted by score, zero rows after the first ``counts[b]``; ``counts [B]``
    int32. Candidates with a NaN/inf score or box are never kept. :class:`HostNMS`
    computes the same with the suppression on the host (chips whose ``NMSWithMask`` is
    float16 only).
    """

    def __init__(
        self,
        num_classes: int,
        conf_thresh: float = 0.01,
        iou_thresh: float = 0.65,
        pre_nms_topk: int = 1000,
        max_det: int = 100,
        class_agnostic: bool = False,
        library: str | None = None,
    ):
        super().__init__()
        check_nms_settings(num_classes, conf_thresh, iou_thresh, pre_nms_topk, max_det)
        self.num_classes = int(num_classes)
        self.conf_thresh = float(conf_thresh)
        self.iou_thresh = float(iou_thresh)
        self.pre_nms_topk = int(pre_nms_topk)
        self.max_det = int(max_det)
        self.class_agnostic = bool(class_agnostic)
        self.candidates = Candidates(num_classes, conf_thresh, pre_nms_topk)
        self.nms = ops.NMSWithMask(self.iou_thresh)
        self.greedy_op = greedy_nms_op(library) if library else None
        self.nms_hyper = ms.Tensor([self.iou_thresh], ms.float32)
        self.topk = ops.TopK(sorted=True)

    def construct(self, predictions):
        cand_boxes, top_scores, cand_labels, cand_valid = self.candidates(predictions)
        batch, k = top_scores.shape
        m = min(self.max_det, k)

        if self.class_agnostic:
            nms_boxes = cand_boxes
        else:
            # torchvision's batched_nms trick: move each class to its own region so boxes of
            # different classes never overlap. Shifting by the minimum coordinate first keeps
            # the regions apart also for boxes that stick out left/above the image (x < -1),
            # where torchvision's class * (max + 1) can overlap; with non-negative
            # coordinates lo is 0 and the offsets are exactly torchvision's.
            lo = ops.minimum(-(-cand_boxes).max(axis=(1, 2), keepdims=True), 0.0)
            hi = ops.maximum(cand_boxes.max(axis=(1, 2), keepdims=True), 0.0)
            span = hi - lo + 1.0
            nms_boxes = cand_boxes - lo + cand_labels.expand_dims(-1) * span

        rank = ops.arange(k, 0, -1).astype(ms.float32)
        if self.greedy_op is None:
            kept = ops.logical_and(self._nms_with_mask(nms_boxes, rank), cand_valid)
        else:
            kept = self.greedy_op(nms_boxes, cand_valid.astype(ms.float32), self.nms_hyper) > 0.5

        # Kept candidates keep their score order: pick the m highest ranks among them.
        order_key = ops.where(kept, ops.broadcast_to(rank, kept.shape), ops.zeros_like(top_scores))
        key, sel = self.topk(order_key, m)
        selected = key > 0
        rows = ops.concat((cand_boxes, top_scores.expand_dims(-1), cand_labels.expand_dims(-1)), -1)
        dets = ops.gather_elements(rows, 1, ops.tile(sel.expand_dims(-1), (1, 1, 6)))
        dets = ops.where(selected.expand_dims(-1), dets, ops.zeros_like(dets))
        if m < self.max_det:
            dets = ops.concat((dets, ops.zeros((batch, self.max_det - m, 6), ms.float32)), 1)
        counts = selected.astype(ms.int32).sum(axis=1).astype(ms.int32)
        return dets, counts

    def _nms_with_mask(self, nms_boxes, rank):
        """Each image's mask from ``NMSWithMask`` [B, k] (True: not suppressed)."""
        # The rank (k .. 1) as the score column: distinct and in input order, so CPU/GPU,
        # which sort by score (unstable for ties), return the mask in our order, as Ascend.
        rank_col = rank.reshape(-1, 1)
        masks = ()  # a tuple, not a list: ONNX export has no make_list
        for i in range(nms_boxes.shape[0]):
            # Index the one output used: unpacking all three leaves unused getitem nodes of a
            # side-effect op, which MindSpore's auto-monad pass warns about at every compile.
            masks = masks + (self.nms(ops.concat((nms_boxes[i], rank_col), -1))[2],)
        return ops.stack(masks)


def _like_valid(_boxes, valid, _hyper):
    return valid


def greedy_nms_op(library: str):
    """``(boxes [B, k, 4], valid [B, k], hyper [1] = (iou threshold,)) -> kept [B, k]``,
    float32 (``kernels/greedy_nms.cc``). Inference only: it has no gradient."""
    return aot_op(library, "GreedyNms", _like_valid, _like_valid)


class HostNMS:
    """:class:`BatchedNMS` with the suppression on the host: :class:`Candidates` runs on the
    device (vector operators only), greedy NMS per class runs in numpy on its output.

    For chips whose ``NMSWithMask`` takes float16 only (the Atlas training series, see
    ``engine.runtime.ascend.ChipProfile``): float32 suppression there is only possible off the
    device. The result equals :class:`BatchedNMS`'s (tested at 80 classes and 2,864
    candidates); the 2,864-candidate cap is kept for the same settings on every chip, though
    the host has no such limit. Called like the Cell: ``nms(predictions) -> (dets, counts)``,
    as numpy arrays.
    """

    def __init__(
        self,
        num_classes: int,
        conf_thresh: float = 0.01,
        iou_thresh: float = 0.65,
        pre_nms_topk: int = 1000,
        max_det: int = 100,
        class_agnostic: bool = False,
    ):
        check_nms_settings(num_classes, conf_thresh, iou_thresh, pre_nms_topk, max_det)
        self.iou_thresh = float(iou_thresh)
        self.max_det = int(max_det)
        self.class_agnostic = bool(class_agnostic)
        self.candidates = Candidates(num_classes, conf_thresh, pre_nms_topk)

    def __call__(self, predictions) -> tuple[np.ndarray, np.ndarray]:
        boxes, scores, labels, valid = (t.asnumpy() for t in self.candidates(predictions))
        dets = np.zeros((len(scores), self.max_det, 6), np.float32)
        counts = np.zeros(len(scores), np.int32)
        for b in range(len(scores)):
            idx = np.flatnonzero(valid[b])  # already in score order
            keep = suppress(boxes[b], labels[b], idx, self.iou_thresh, self.class_agnostic)
            keep = keep[: self.max_det]
            n = len(keep)
            dets[b, :n, :4] = boxes[b, keep]
            dets[b, :n, 4] = scores[b, keep]
            dets[b, :n, 5] = labels[b, keep]
            counts[b] = n
        return dets, counts


def suppress(
    boxes: np.ndarray, labels: np.ndarray, order: np.ndarray, iou_thresh: float, agnostic: bool
) -> np.ndarray:
    """Greedy NMS over the candidates ``order`` (indices, best first), per class unless
    ``agnostic``; returns the kept indices, best first."""
    if agnostic:
        return order[_greedy_in_order(boxes[order], iou_thresh)]
    kept = np.zeros(len(order), bool)
    for c in np.unique(labels[order]):
        members = np.flatnonzero(labels[order] == c)
        kept[members[_greedy_in_order(boxes[order[members]], iou_thresh)]] = True
    return order[kept]


def _greedy_in_order(boxes: np.ndarray, iou_thresh: float) -> np.ndarray:
    """Positions greedy NMS keeps among ``boxes``, which are already best first."""
    suppressed = np.zeros(len(boxes), dtype=bool)
    keep = []
    for i in range(len(boxes)):
        if suppressed[i]:
            continue
        keep.append(i)
        suppressed[i + 1 :] |= box_iou_one_to_many(boxes[i], boxes[i + 1 :]) > iou_thresh
    return np.asarray(keep, dtype=np.int64)


def check_nms_settings(
    num_classes: int, conf_thresh: float, iou_thresh: float, pre_nms_topk: int, max_det: int
) -> None:
    """Raise ``ValueError`` naming the ``eval.*`` setting that :class:`BatchedNMS` cannot use."""
    if int(num_classes) < 1:
        raise ValueError(f"num_classes must be >= 1, got {num_classes}")
    if not 0.0 <= float(conf_thresh) <= 1.0:
        raise ValueError(f"eval.conf_thresh must be in [0, 1], got {conf_thresh}")
    if not 0.0 < float(iou_thresh) <= 1.0:
        raise ValueError(f"eval.nms_iou must be in (0, 1], got {iou_thresh}")
    if not 1 <= int(pre_nms_topk) <= ASCEND_MAX_NMS_BOXES:
        raise ValueError(
            f"eval.pre_nms_topk must be in [1, {ASCEND_MAX_NMS_BOXES}], got {pre_nms_topk}: "
            f"one NMSWithMask call takes at most {ASCEND_MAX_NMS_BOXES} boxes on Ascend"
        )
    if int(max_det) < 1:
        raise ValueError(f"eval.max_det must be >= 1, got {max_det}")


def box_iou_one_to_many(box: np.ndarray, boxes: np.ndarray) -> np.ndarray:
    """IoU of one xyxy box with each of ``boxes [N, 4]`` (no +1 pixel convention)."""
    w = np.clip(np.minimum(box[2], boxes[:, 2]) - np.maximum(box[0], boxes[:, 0]), 0, None)
    h = np.clip(np.minimum(box[3], boxes[:, 3]) - np.maximum(box[1], boxes[:, 1]), 0, None)
    inter = w * h
    area = (box[2] - box[0]) * (box[3] - box[1])
    areas = (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])
    with np.errstate(divide="ignore", invalid="ignore"):
        return inter / (area + areas - inter)


def greedy_nms(boxes: np.ndarray, scores: np.ndarray, iou_thresh: float) -> np.ndarray:
    """Indices of the boxes greedy NMS keeps, highest score first.

    A box is suppressed when its IoU with a kept, higher-scoring box is ``> iou_thresh``.
    Ties in score keep the input order.
    """
    order = np.argsort(-scores, kind="stable")
    return order[_greedy_in_order(boxes[order], iou_thresh)]


def postprocess_numpy(
    predictions: np.ndarray,
    num_classes: int,
    conf_thresh: float = 0.01,
    iou_thresh: float = 0.65,
    pre_nms_topk: int = 1000,
    max_det: int = 100,
    class_agnostic: bool = False,
) -> list[np.ndarray]:
    """The :class:`BatchedNMS` pipeline in numpy: per image an ``[n, 6]`` array, score-sorted.

    Class-aware NMS runs class by class here (no coordinate offsets), so it checks the
    offset trick of :class:`BatchedNMS` instead of repeating it.
    """
    out = []
    for pred in np.asarray(predictions, dtype=np.float32):
        boxes = np.concatenate(
            (pred[:, :2] - pred[:, 2:4] * 0.5, pred[:, :2] + pred[:, 2:4] * 0.5), 1
        )
        cls = pred[:, 5 : 5 + num_classes]
        labels = cls.argmax(1)
        scores = pred[:, 4] * cls[np.arange(len(cls)), labels]
        with np.errstate(invalid="ignore"):
            valid = np.isfinite(pred[:, : 5 + num_classes]).all(1) & (scores >= conf_thresh)
        idx = np.flatnonzero(valid)
        idx = idx[np.argsort(-scores[idx], kind="stable")][:pre_nms_topk]
        if class_agnostic:
            keep = idx[greedy_nms(boxes[idx], scores[idx], iou_thresh)]
        else:
            parts = []
            for c in np.unique(labels[idx]):
                members = idx[labels[idx] == c]
                parts.append(members[greedy_nms(boxes[members], scores[members], iou_thresh)])
            keep = np.concatenate(parts) if parts else np.zeros(0, np.int64)
            keep = keep[np.argsort(-scores[keep], kind="stable")]
        keep = keep[:max_det]
        out.append(
            np.concatenate(
                (boxes[keep], scores[keep, None], labels[keep, None].astype(np.float32)), 1
            )
        )
    return out


def sample_predictions(num_boxes: int, num_classes: int = 80, seed: int = 0) -> np.ndarray:
    """Decoded predictions ``[1, num_boxes, 5 + num_classes]`` (cx, cy, w, h in a 640-px
    image, objectness, class probabilities) that overlap in clusters, so that NMS suppresses
    many and keeps many: what a check of an NMS implementation runs on."""
    rng = np.random.default_rng(seed)
    centres = rng.uniform(40, 600, (num_boxes // 8 + 1, 2))
    cluster = rng.integers(0, len(centres), num_boxes)
    preds = np.zeros((1, num_boxes, 5 + num_classes), np.float32)
    preds[0, :, 0:2] = centres[cluster] + rng.normal(0, 6, (num_boxes, 2))
    preds[0, :, 2:4] = rng.uniform(20, 120, (num_boxes, 2))
    preds[0, :, 4] = rng.uniform(0.2, 1.0, num_boxes)
    preds[0, :, 5:] = rng.uniform(0, 0.2, (num_boxes, num_classes))
    preds[0, np.arange(num_boxes), 5 + rng.integers(0, num_classes, num_boxes)] = rng.uniform(
        0.3, 1.0, num_boxes
    )
    return preds
