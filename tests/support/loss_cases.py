"""Batches for loss tests: random boxes, crowded images, empty images (shared helpers)."""

from __future__ import annotations

import numpy as np


def random_targets(
    rng: np.random.Generator, counts: list[int], img: int, num_classes: int, max_objects: int
) -> tuple[np.ndarray, np.ndarray]:
    """YOLOX-style padded targets [B, M, 5] (class, cx, cy, w, h) and mask [B, M]."""
    targets = np.zeros((len(counts), max_objects, 5), np.float32)
    mask = np.zeros((len(counts), max_objects), np.float32)
    for b, n in enumerate(counts):
        w = rng.uniform(8, img / 2, n)
        h = np.clip(w * rng.uniform(0.5, 2.0, n), 8, img * 0.9)
        cx = rng.uniform(w / 2, img - w / 2)
        cy = rng.uniform(h / 2, img - h / 2)
        cls = rng.integers(0, num_classes, n)
        targets[b, :n] = np.stack([cls, cx, cy, w, h], 1)
        mask[b, :n] = 1
    return targets, mask


def random_raw_outputs(rng: np.random.Generator, batch: int, anchors: int, num_classes: int):
    """Plausible raw head outputs: box offsets ~0.5, log-sizes ~1, logits around -3."""
    raw = np.empty((batch, anchors, 5 + num_classes), np.float32)
    raw[..., :2] = rng.normal(0.5, 0.5, (batch, anchors, 2))
    raw[..., 2:4] = rng.normal(1.0, 0.8, (batch, anchors, 2))
    raw[..., 4:] = rng.normal(-3.0, 2.0, (batch, anchors, 1 + num_classes))
    return raw


def anchor_grid(img: int, strides=(8, 16, 32)) -> tuple[np.ndarray, np.ndarray]:
    """YOLOX anchor points for a square image: grid xy [A, 2] (x fastest) and strides [A]."""
    grids, s = [], []
    for st in strides:
        n = img // st
        ys, xs = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")
        grids.append(np.stack([xs.ravel(), ys.ravel()], 1))
        s.append(np.full(n * n, st))
    return np.concatenate(grids).astype(np.float32), np.concatenate(s).astype(np.float32)


def loss_with_and_without(library: str, kernels: tuple[str, ...], num_classes: int, use_l1=0.0):
    """YOLOXLoss built with ``kernels`` of ``library`` enabled and on MindSpore's operators,
    on one batch of four images (6, 0, 3 and 9 boxes at 128 px): ``(with, without)``, each
    ``(loss, [the six outputs as floats], the gradient of the total w.r.t. the raw outputs)``."""
    import mindspore as ms

    from msdet.models.loss import YOLOXLoss
    from msdet.ops import cpu_kernels

    rng = np.random.default_rng(3)
    grids, strides = anchor_grid(128)
    counts = [6, 0, 3, 9]
    raw = random_raw_outputs(rng, len(counts), len(strides), num_classes)
    targets, mask = random_targets(rng, counts, 128, num_classes, 20)
    raw, *rest = (ms.Tensor(a) for a in (raw, grids, strides, targets, mask))
    on_kernel = YOLOXLoss(num_classes, kernels=cpu_kernels.CpuKernels(library, kernels))
    results = []
    for loss in (on_kernel, YOLOXLoss(num_classes)):
        loss.use_l1.set_data(ms.Tensor(use_l1, ms.float32))
        values = [float(v.asnumpy()) for v in loss(raw, *rest)]
        _, grad = ms.value_and_grad(_total_of(loss, rest))(raw)
        results.append((loss, values, grad.asnumpy()))
    return tuple(results)


def _total_of(loss, rest):
    def total(raw):
        return loss(raw, *rest)[0]

    return total
