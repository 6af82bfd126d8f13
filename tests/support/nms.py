"""NMS inputs for the tests of msdet.ops.nms and its kernels: random decoded predictions,
and a BatchedNMS run on them."""

from __future__ import annotations

import mindspore as ms
import numpy as np

from msdet.ops.nms import BatchedNMS


def random_predictions(
    rng: np.random.Generator, batch: int, anchors: int, num_classes: int, size: float = 320.0
) -> np.ndarray:
    """Decoded predictions [B, A, 5 + C] with many overlapping boxes of several classes."""
    preds = np.empty((batch, anchors, 5 + num_classes), np.float32)
    preds[..., 0:2] = rng.uniform(0, size, (batch, anchors, 2))
    preds[..., 2:4] = rng.uniform(4, size / 4, (batch, anchors, 2))
    preds[..., 4] = rng.uniform(0, 1, (batch, anchors))
    preds[..., 5:] = rng.uniform(0, 1, (batch, anchors, num_classes))
    return preds


def run_nms(nms: BatchedNMS, preds: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``nms`` on ``preds``: (detections [B, max_det, 6], counts [B]) as numpy arrays."""
    dets, counts = nms(ms.Tensor(preds))
    return dets.asnumpy(), counts.asnumpy()
