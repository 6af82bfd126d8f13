"""The training loss on the val split, from the evaluation's own outputs.

Evaluation runs the inference network: decoded boxes (centre and size in input pixels) and
sigmoid scores per anchor. Both decodings invert exactly (offset ``x / stride - grid``, log
size ``log(w / stride)``, logit ``log(p / (1 - p))``), so :class:`PredictionLoss` hands
:class:`~msdet.models.loss.YOLOXLoss` the raw outputs it takes during training, and the val
split gets the training's loss terms without another pass of the network: only the loss's
target assignment runs (one more compiled graph, once per run).

The figures are those of the network's evaluation mode (BatchNorm's running statistics,
the EMA weights when training keeps them) on unaugmented val images, without the L1 term
(a training aid YOLOX adds in its last epochs): ``total = iou + obj + cls``. Each batch is
normalised by its foreground anchors, as a training step is; only whole batches of
readable images count (a padded last batch would add the padding's objectness).
"""

from __future__ import annotations

from typing import Any

import mindspore as ms
import numpy as np
from mindspore import nn, ops

from msdet.data.pipeline import pad_targets
from msdet.data.transforms import filter_boxes
from msdet.models.head import make_grid
from msdet.models.loss import YOLOXLoss

VAL_LOSS_TERMS = ("total", "iou", "obj", "cls")
# Scores of exactly 0 or 1 (a saturated float32 sigmoid) have no finite logit: clipped to
# this distance, they give the loss of a logit of about +-16, where BCE is ~1e-7 or ~16.
SCORE_EPS = 1e-7
# exp overflows float32 above ~88.7: no finite decoded size has a larger log.
MAX_LOG_SIZE = 88.0


def anchor_grid(img_hw: tuple[int, int], strides: tuple[int, ...]) -> tuple[ms.Tensor, ms.Tensor]:
    """The head's anchor points at input size ``img_hw``: grid ``[A, 2]`` and strides ``[A]``,
    in the head's order (levels by stride, rows, x fastest)."""
    grids, steps = [], []
    for stride in strides:
        grid, step = make_grid(img_hw[0] // stride, img_hw[1] // stride, stride)
        grids.append(grid)
        steps.append(step)
    return ops.concat(grids, 0), ops.concat(steps, 0)


def raw_outputs(preds: ms.Tensor, grids: ms.Tensor, strides: ms.Tensor) -> ms.Tensor:
    """The head's raw outputs ``[B, A, 5 + C]`` (box regression, objectness and class logits)
    of its decoded predictions (cx, cy, w, h in input pixels, sigmoid scores)."""
    s = strides.reshape(-1, 1)
    xy = preds[..., :2] / s - grids
    # A size float32's exp overflowed to inf (a diverged network) gets the largest finite
    # log size instead, so that the loss says how wrong it is rather than NaN.
    wh = ops.clamp(ops.log(ops.maximum(preds[..., 2:4], 1e-30) / s), -MAX_LOG_SIZE, MAX_LOG_SIZE)
    scores = ops.clamp(preds[..., 4:], SCORE_EPS, 1.0 - SCORE_EPS)
    logits = ops.log(scores) - ops.log(1.0 - scores)
    return ops.concat((xy, wh, logits), -1)


class PredictionLoss(nn.Cell):
    """``loss`` (a :class:`YOLOXLoss`) of decoded predictions at one input size:
    ``construct(preds [B, A, 5 + C], targets [B, M, 5], mask [B, M])`` returns the loss's
    tuple (total, iou, obj, cls, l1, num_fg)."""

    def __init__(self, loss: YOLOXLoss, img_hw: tuple[int, int], strides: tuple[int, ...]):
        super().__init__()
        self.loss = loss
        self.grids, self.strides = anchor_grid(img_hw, strides)

    def construct(self, preds, targets, mask):
        preds = preds.astype(ms.float32)
        raw = raw_outputs(preds, self.grids, self.strides)
        return self.loss(raw, self.grids, self.strides, targets, mask)


class ValidationLoss:
    """The loss terms of the evaluation's batches, averaged over an evaluation.

    ``add(preds, index, scale)`` after each batch's inference (``preds``: the decoded
    predictions; ``index`` and ``scale``: the eval dataset's source positions and letterbox
    ratios); ``means()`` at the end; ``reset()`` before the next evaluation. The targets
    are the source's training boxes at the letterbox's scale, as training pads them
    (``data.max_objects``, boxes of 1 px or less left out).
    """

    def __init__(
        self,
        source: Any,
        num_classes: int,
        img_hw: tuple[int, int],
        strides: tuple[int, ...],
        max_objects: int,
        train_cfg: Any,
        kernels: Any,
    ):
        self.source = source
        self.max_objects = int(max_objects)
        loss = YOLOXLoss(
            num_classes,
            iou_weight=float(train_cfg.loss.iou_weight),
            assigner_rule=str(train_cfg.assigner.rule),
            center_radius=train_cfg.assigner.center_radius,
            kernels=kernels,
        )
        self.net = PredictionLoss(loss, (int(img_hw[0]), int(img_hw[1])), tuple(strides))
        self.reset()

    def reset(self) -> None:
        """Forget the sums of the previous evaluation."""
        self.sums = np.zeros(len(VAL_LOSS_TERMS), dtype=np.float64)
        self.batches = 0

    def targets(self, index: np.ndarray, scale: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Padded targets ``[B, M, 5]`` and mask ``[B, M]`` of a batch's source images."""
        rows = []
        for i, ratio in zip(index, scale):
            boxes, labels = self.source.annotations(int(i))
            boxes, labels = filter_boxes(boxes * np.float32(ratio), labels)
            rows.append(pad_targets(boxes, labels, self.max_objects))
        return np.stack([t for t, _ in rows]), np.stack([m for _, m in rows])

    def add(self, preds: ms.Tensor, index: np.ndarray, scale: np.ndarray) -> None:
        """Add one batch's loss; a batch holding padding or an unreadable image is left out."""
        if (np.asarray(index) < 0).any():
            return
        targets, mask = self.targets(index, scale)
        out = self.net(preds, ms.Tensor(targets), ms.Tensor(mask))
        iou, obj, cls = (float(out[k].asnumpy()) for k in (1, 2, 3))
        # The total of the three terms: the loss's own total adds L1 x 0, NaN for an inf L1.
        self.sums += [iou + obj + cls, iou, obj, cls]
        self.batches += 1

    def means(self) -> dict[str, float] | None:
        """The mean of each term over the batches added; None when none was."""
        if not self.batches:
            return None
        return {k: float(v / self.batches) for k, v in zip(VAL_LOSS_TERMS, self.sums)}
