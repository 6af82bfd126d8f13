"""SimOTA label assignment (YOLOX), batched, static shapes, graph mode.

YOLOX 0.3.0 assigns each image in a Python loop over images and ground truths, with
boolean indexing (dynamic shapes). Here the whole batch is assigned at once on
``[B, M, A]`` tensors (M = ground-truth slots padded to ``data.max_objects``, A = anchors),
with masks where the original selects:

1. candidates: anchors whose centre lies inside some ground-truth box or within
   ``center_radius`` strides of its centre (rule ``yolox-0.3.0``, radius 2.5); the later
   YOLOX rule ``yolox-latest`` keeps only the centre region (radius 1.5);
2. cost = class BCE (on sqrt(cls * obj)) + 3 * (-log IoU) + a large penalty where the
   anchor is not both in the box and in the centre region (``yolox-latest``: not in the
   centre region);
3. dynamic k per ground truth = max(1, int(sum of its 10 largest candidate IoUs));
   the k lowest-cost candidates are matched;
4. an anchor matched by several ground truths keeps the one with the lowest cost.

Non-candidates and padded ground truths get a cost no candidate reaches and zero IoU, which
removes them from every step exactly as the original's indexing does.

Every cost stays within float16's range (65,504): the Atlas training series (910A) has
float16-only TopK kernels, and MindSpore's precision mode there casts the costs to float16
before the selection: YOLOX's geometry penalties (1e5, 1e6), or any "infinite" cost for the
excluded pairs, would become inf there. Only the order of the costs matters, so the
class + IoU part is capped at :data:`COST_CAP` (never reached with up to 159 classes: each of
the class BCE's terms adds at most 100 per class, the IoU part at most 3 x 18.5), the geometry
penalty is :data:`GEOMETRY_PENALTY` (above the cap: every pair in both regions still ranks
before every pair that is not) and an excluded pair's cost is :data:`EXCLUDED_COST`, above
every candidate's. Float16's spacing is 16 at the penalty, so the k cheapest are not taken
from that cost: one TopK ranks the pairs in both regions, another the other candidates, each
by its class + IoU cost less its ground truth's smallest, where float16 is finest (measured
on 16 real batches: 745 of 745 matched anchors as in float32; with the penalty in the keys,
710 of 769). Step 4 picks an anchor's ground truth the same way: those with the anchor in
both regions first, then the other candidates, each by its class + IoU cost less the
anchor's smallest (an ArgMin over the penalised costs, as the 910A's float16 would see them,
tied ground truths 16 apart: 736 of 745 matched anchors as in float32 on the same batches,
745 of 745 now).

When ``ops.cpu_kernels`` has a library enabled for ``"assigner"``, three compiled operators
do most of the work: steps 1 and 2's pairwise terms (the geometry masks, the IoU and the two
penalties; ``kernels/simota_pairs.cc``: the same bits, one pass instead of ~60 operators),
step 2's class cost (``kernels/simota_class_cost.cc``: one pass instead of ~18 operators
over [B, A, C]; its sigmoid and logs are its own, so costs agree with the operators' to
~1e-6 relative, not bit for bit), and steps 3 and 4 (``kernels/simota_match.cc``: the same
results, except that a tie of costs at the k-th place goes to the lower anchor index, where
MindSpore's TopK orders ties its own way). The IoU cost and the sum stay on MindSpore's
operators.
"""

from __future__ import annotations

import mindspore as ms
import numpy as np
from mindspore import nn, ops

from msdet.ops.aot import aot_op
from msdet.ops.boxes import pairwise_iou_cxcywh

RULES = ("yolox-0.3.0", "yolox-latest")
DEFAULT_RADIUS = {"yolox-0.3.0": 2.5, "yolox-latest": 1.5}
# The costs' scale (module docstring): candidates' class + IoU cost capped at COST_CAP, the
# geometry penalty above it, the excluded pairs above any candidate, all within float16.
COST_CAP = 16000.0
GEOMETRY_PENALTY = {"yolox-0.3.0": 20000.0, "yolox-latest": 20000.0}
EXCLUDED_COST = 60000.0
FLOAT16_MAX = 65504.0
TOPK_CANDIDATES = 10
LOG_CLAMP = -100.0  # torch.nn.functional.binary_cross_entropy clamps log() at -100
# The smallest normal float32: the log of anything at least this large is finite everywhere.
TINY = float(np.finfo(np.float32).tiny)


def _clamped_log(x: ms.Tensor) -> ms.Tensor:
    """``max(log(x), -100)`` for probabilities, without ever forming ``log(0) = -inf``.

    On chips that flag fp16 overflow in a float-status register (the Atlas training series)
    an inf intermediate, even one clamped right after, marks the step as overflowed: steps
    would be skipped, or a float32 run stopped as non-finite, with nothing wrong. The log is
    therefore taken of ``max(x, TINY)`` only, and inputs below TINY give -100 directly.
    Equal to torch's clamp except for subnormal inputs in (3.7e-44, 1.2e-38), where torch
    gives log(x) in [-100, -87.3] and this -100 (devices flush such values to 0 anyway).
    """
    safe = ops.maximum(x, TINY)
    return ops.select(x >= TINY, ops.log(safe), ops.full_like(x, LOG_CLAMP))


class SimOTAAssigner(nn.Cell):
    """Batched SimOTA; see the module docstring for the rule it implements."""

    def __init__(
        self,
        num_classes: int,
        rule: str = "yolox-0.3.0",
        center_radius: float | None = None,
        library: str | None = None,
    ):
        super().__init__()
        if rule not in RULES:
            raise ValueError(f"train.assigner.rule must be one of {RULES}, got {rule!r}")
        self.num_classes = num_classes
        self.center_only = rule == "yolox-latest"
        self.radius = float(center_radius if center_radius is not None else DEFAULT_RADIUS[rule])
        self.penalty = GEOMETRY_PENALTY[rule]
        self.pairs_op = simota_pairs_op(library) if library else None
        self.class_cost_op = simota_class_cost_op(library) if library else None
        self.match_op = simota_match_op(library) if library else None
        # Tensors, not Python numbers, in the arithmetic: `x / 60000.0` is MindSpore 2.10's
        # Divs, which has no GE adapter (the 910A compiles whole graphs through GE).
        self.excluded = ms.Tensor(EXCLUDED_COST, ms.float32)
        self.half, self.zero_index = ms.Tensor(0.5, ms.float32), ms.Tensor(0, ms.int32)
        self.cost_cap = ms.Tensor(COST_CAP, ms.float32)
        self.pairs_hyper = ms.Tensor(
            [self.penalty, EXCLUDED_COST, float(self.center_only)], ms.float32
        )
        # onehot [B, M, C] x terms [B, A, C]^T without a Transpose: MindSpore's CPU
        # Transpose keeps an 8-byte index per element for the graph's life (~11 MiB here).
        self.bmm_transposed = ops.BatchMatMul(transpose_b=True)

    def construct(
        self, pred_boxes, obj_logits, cls_logits, grids, strides, gt_boxes, gt_classes, gt_mask
    ):
        """Assign anchors to ground truths.

        pred_boxes [B, A, 4] decoded (cx, cy, w, h); obj_logits [B, A]; cls_logits [B, A, C];
        grids [A, 2]; strides [A]; gt_boxes [B, M, 4] (cx, cy, w, h); gt_classes [B, M] int;
        gt_mask [B, M] float (1 = real box).

        Returns (fg [B, A] float 1/0, matched_gt [B, A] int32 index of the ground truth
        (0 for background), matched_iou [B, A] IoU of the prediction with it, num_fg []
        foreground anchors in the batch). A plain tuple: graph mode does not compile
        NamedTuples (it falls back to slow Python execution).
        """
        # Speed notes (CPU): work on [B, M, A] dominates. Masks are float (arithmetic
        # instead of bool ops and select), sums over M are batched matmuls (MindSpore's
        # reduce kernels are ~8x slower than its matmul here), and broadcasting max/min
        # is avoided (its CPU kernel is ~20x slower than the non-broadcasting one).
        # At B=8, M=120, A=2100 this runs in ~70 ms on 2 cores (first version: ~290 ms).
        # float32 throughout, whatever the caller's dtype: the costs span 0..EXCLUDED_COST
        # with fine steps near 0 (a float16 TopK, the 910A's, sees them cast).
        f32 = ms.float32
        pred_boxes = ops.stop_gradient(pred_boxes).astype(f32)
        obj_logits = ops.stop_gradient(obj_logits).astype(f32)
        cls_logits = ops.stop_gradient(cls_logits).astype(f32)
        grids, strides = grids.astype(f32), strides.astype(f32)
        gt_boxes, gt_mask = gt_boxes.astype(f32), gt_mask.astype(f32)
        b, m = gt_mask.shape
        valid = gt_mask.expand_dims(-1)  # [B, M, 1] float
        ones_m = ops.ones((b, 1, m), ms.float32)

        # 1. Geometry: anchor centres against boxes and centre regions (float masks);
        # 2. cost. IoU of every ground truth with every prediction (0 off the candidates).
        centers = (grids + 0.5) * strides.expand_dims(-1)  # [A, 2]
        if self.pairs_op is None:
            ious, geometry_cost, excluded_cost = self._pairs(
                centers, strides, gt_boxes, valid, pred_boxes, ones_m
            )
        else:
            ious, geometry_cost, excluded_cost = self.pairs_op(
                gt_boxes, gt_mask, pred_boxes, centers, strides * self.radius, self.pairs_hyper
            )
        iou_cost = -ops.log(ious + 1e-8)
        if self.class_cost_op is None:
            cls_cost = self._class_cost(cls_logits, obj_logits, gt_classes, m)
        else:
            cls_cost = self.class_cost_op(cls_logits, obj_logits, gt_classes.astype(ms.int32))
        # Pairs kept: the capped class + IoU cost plus the geometry penalty; excluded pairs:
        # EXCLUDED_COST alone (excluded_cost is 0 or EXCLUDED_COST, so `kept` is 1 or 0).
        kept = 1.0 - ops.div(excluded_cost, self.excluded)
        # min(raw, cap) as raw - relu(raw - cap): Minimum's gradient graph holds Divs, which
        # has no GE adapter (the assignment has no gradient, but its graph is still built).
        raw = cls_cost + 3.0 * iou_cost
        base = raw - ops.relu(raw - self.cost_cap)
        cost = (base + geometry_cost) * kept + excluded_cost

        # 3. and 4. Dynamic k, each ground truth's k cheapest anchors, one per anchor.
        if self.match_op is None:
            inside = (geometry_cost + excluded_cost) < self.half  # a candidate in both regions
            fg, matched_gt, matched_iou = self._match(cost, ious, valid, ones_m, base, inside,
                                                      excluded_cost)  # fmt: skip
        else:
            fg, matched_gt, matched_iou = self.match_op(cost, ious, gt_mask)
        # Constants of the loss, as in YOLOX (its assignment runs under torch.no_grad()): no
        # gradient graph is built through the assignment.
        fg, matched_iou = ops.stop_gradient(fg), ops.stop_gradient(matched_iou)
        return fg, ops.stop_gradient(matched_gt.astype(ms.int32)), matched_iou, fg.sum()

    def _class_cost(self, cls_logits, obj_logits, gt_classes, m):
        """Step 2's class cost [B, M, A] on MindSpore's operators: the class BCE of each
        anchor's score against the one-hot ground truth, summed over classes, as
        sum_c -log(1 - p_c)  +  (-log p_g) - (-log(1 - p_g)) for the true class g; what the
        compiled class-cost operator gives, to float rounding."""
        # Broadcast operands are tiled first (the same products): MindSpore's CPU
        # arithmetic kernels keep an 8-byte index per output element for a broadcast, for
        # the graph's life (~11 MiB for [8, 2100, 80]); a tiled copy is freed after use.
        obj_p = ops.tile(ops.sigmoid(obj_logits).expand_dims(-1), (1, 1, self.num_classes))
        p = ops.sqrt(ops.sigmoid(cls_logits) * obj_p)
        neg_log_q = -_clamped_log(1.0 - p)  # [B, A, C]
        neg_log_p = -_clamped_log(p)
        onehot = ops.one_hot(gt_classes.astype(ms.int32), self.num_classes, 1.0, 0.0)  # [B, M, C]
        return ops.tile(neg_log_q.sum(-1).expand_dims(1), (1, m, 1)) + self.bmm_transposed(
            onehot, neg_log_p - neg_log_q
        )

    def _match(self, cost, ious, valid, ones_m, base, inside, excluded_cost):
        """Steps 3 and 4 on MindSpore's operators: (fg [B, A] 1/0, matched_gt [B, A] as
        float, matched_iou [B, A]), what the compiled matching operator gives.

        The k cheapest anchors are chosen in two TopKs, the candidates in both regions by
        their ``base`` cost first, then the other candidates by theirs: the order of ``cost``
        (every candidate in both regions before every other one) without its geometry
        penalty, and each key less its ground truth's smallest (:func:`_ranking_key`). The
        910A runs TopK in float16, whose spacing is 16 at the penalty (20,000) and 1/32 at a
        cost of 60: the candidates outside the regions, or close costs, would tie there;
        near 0 float16 keeps float32's order of the cheapest candidates, which are the ones
        taken. (In float32 the penalty alone ties costs 0.002 apart.)"""
        b, m, a = cost.shape
        # 3. Dynamic k and the k cheapest anchors per ground truth.
        top_ious, _ = ops.topk(ious, TOPK_CANDIDATES, dim=2)
        dynamic_k = ops.maximum(top_ious.sum(-1).astype(ms.int32), 1)  # trunc like .int()
        other = ops.logical_and(ops.logical_not(inside), excluded_cost < self.half)
        _, first = ops.topk(-_ranking_key(base, inside), TOPK_CANDIDATES, dim=2)
        _, then = ops.topk(-_ranking_key(base, other), TOPK_CANDIDATES, dim=2)
        rank = ops.arange(TOPK_CANDIDATES, dtype=ms.int32).reshape(1, 1, -1)
        n_inside = ops.bmm(inside.astype(ms.float32), ops.ones((b, a, 1), ms.float32))
        n_inside = n_inside.astype(ms.int32)  # [B, M, 1], exact in float16 too (dozens)
        later = ops.gather_elements(then, 2, ops.maximum(rank - n_inside, self.zero_index))
        cheapest = ops.select(ops.broadcast_to(rank < n_inside, first.shape), first, later)
        take = (rank < dynamic_k.expand_dims(-1)).astype(ms.float32) * valid
        matching = ops.tensor_scatter_elements(ops.zeros_like(cost), cheapest, take, axis=2)

        # 4. Anchors claimed more than once go to their lowest-cost ground truth: the order
        # of `cost` (in both regions first) by keys float16 keeps, as step 3's.
        multiple = (ops.bmm(ones_m, matching) > 1.5).astype(ms.float32)  # [B, 1, A]
        inside_any = ops.bmm(ones_m, inside.astype(ms.float32)) > 0.5  # [B, 1, A]
        members = ops.select(ops.broadcast_to(inside_any, inside.shape), inside, other)
        best = ops.one_hot(ops.argmin(_ranking_key(base, members, 1), 1), m, 1.0, 0.0, axis=1)
        matching = matching + multiple * (best - matching)

        fg = ops.bmm(ones_m, matching).reshape(b, a)  # 0 or 1 now
        index_m = ops.tile(ops.arange(m, dtype=ms.float32).reshape(1, 1, m), (b, 1, 1))
        matched_gt = ops.bmm(index_m, matching).reshape(b, a)
        matched_iou = ops.bmm(ones_m, matching * ious).reshape(b, a)
        return fg, matched_gt, matched_iou

    def _pairs(self, centers, strides, gt_boxes, valid, pred_boxes, ones_m):
        """Steps 1 and 2's pairwise terms on MindSpore's operators: (IoU [B, M, A], 0 off
        the candidates; the geometry penalty; the exclusion cost), the values the compiled
        operator gives."""
        cx = centers[:, 0].reshape(1, 1, -1)
        cy = centers[:, 1].reshape(1, 1, -1)
        gx, gy = gt_boxes[..., 0:1], gt_boxes[..., 1:2]
        radius = strides.reshape(1, 1, -1) * self.radius
        in_center = _inside(cx, cy, gx, gy, radius, radius) * valid
        if self.center_only:
            geometry_ok = in_center
            candidate = ops.bmm(ones_m, in_center) > 0.5  # [B, 1, A]
        else:
            hw, hh = gt_boxes[..., 2:3] * 0.5, gt_boxes[..., 3:4] * 0.5
            in_box = _inside(cx, cy, gx, gy, hw, hh) * valid
            geometry_ok = in_box * in_center
            candidate = ops.bmm(ones_m, in_box + in_center) > 0.5
        pair_ok = candidate.astype(ms.float32) * valid  # [B, M, A]
        ious = pairwise_iou_cxcywh(gt_boxes, pred_boxes) * pair_ok
        geometry_cost = self.penalty * (1.0 - geometry_ok)
        return ious, geometry_cost, EXCLUDED_COST * (1.0 - pair_ok)


def _pairs_shapes(gt_boxes, gt_mask, pred_boxes, *_):
    shape = (gt_boxes[0], gt_boxes[1], pred_boxes[1])
    return shape, shape, shape


def _pairs_dtypes(gt_boxes, *_):
    return gt_boxes, gt_boxes, gt_boxes


def simota_pairs_op(library: str):
    """``(gt_boxes [B, M, 4], gt_mask [B, M], pred_boxes [B, A, 4], centers [A, 2],
    radius [A], hyper [3]) -> (ious, geometry_cost, excluded_cost)``, each [B, M, A]
    (``kernels/simota_pairs.cc``). Its inputs are the assigner's, all outside the gradient:
    the backward gives zeros."""

    def bprop(gt_boxes, gt_mask, pred_boxes, centers, radius, hyper, out, dout):
        zeros = ops.zeros_like
        return (
            zeros(gt_boxes),
            zeros(gt_mask),
            zeros(pred_boxes),
            zeros(centers),
            zeros(radius),
            zeros(hyper),
        )

    return aot_op(library, "SimotaPairs", _pairs_shapes, _pairs_dtypes, bprop=bprop)


def _class_cost_shape(cls_logits, obj_logits, gt_classes):
    return (cls_logits[0], gt_classes[1], cls_logits[1])


def _class_cost_dtype(cls_logits, *_):
    return cls_logits


def simota_class_cost_op(library: str):
    """``(cls_logits [B, A, C], obj_logits [B, A], gt_classes [B, M] int32) -> cls_cost
    [B, M, A]`` (``kernels/simota_class_cost.cc``). Outside the gradient like the
    pairwise operator: the backward gives zeros."""

    def bprop(cls_logits, obj_logits, gt_classes, out, dout):
        zeros = ops.zeros_like
        return zeros(cls_logits), zeros(obj_logits), zeros(gt_classes)

    return aot_op(library, "SimotaClassCost", _class_cost_shape, _class_cost_dtype, bprop=bprop)


def _match_shapes(cost, ious, gt_mask):
    shape = (cost[0], cost[2])
    return shape, shape, shape


def _match_dtypes(cost, *_):
    return cost, cost, cost


def simota_match_op(library: str):
    """``(cost [B, M, A], ious [B, M, A], gt_mask [B, M]) -> (fg, matched_gt, matched_iou)``,
    each [B, A] float32 (``kernels/simota_match.cc``; matched_gt holds small integers).
    Outside the gradient like the pairwise operator: the backward gives zeros."""

    def bprop(cost, ious, gt_mask, out, dout):
        return ops.zeros_like(cost), ops.zeros_like(ious), ops.zeros_like(gt_mask)

    return aot_op(library, "SimotaMatch", _match_shapes, _match_dtypes, bprop=bprop)


def _ranking_key(base, members, axis: int = -1):
    """``base`` less its smallest over the ``members`` along ``axis`` (each ground truth's
    anchors, or each anchor's ground truths: the cheapest member is 0), ``EXCLUDED_COST``
    elsewhere: the same order as ``base`` among the members (subtracting one value keeps
    float32's order) in the range where float16, the 910A's TopK and ArgMin dtype, is
    finest."""
    excluded = ops.full_like(base, EXCLUDED_COST)
    masked = ops.select(members, base, excluded)
    lowest = -(-masked).max(axis=axis, keepdims=True)  # ReduceMax: a kernel on every chip
    return ops.select(members, masked - lowest, excluded)


def _inside(cx, cy, gx, gy, half_w, half_h):
    """1.0 where the anchor centre lies strictly inside gx +- half_w, gy +- half_h [B, M, A]."""
    f32 = ms.float32
    inside_x = ((cx - (gx - half_w)) > 0).astype(f32) * ((gx + half_w - cx) > 0).astype(f32)
    inside_y = ((cy - (gy - half_h)) > 0).astype(f32) * ((gy + half_h - cy) > 0).astype(f32)
    return inside_x * inside_y
