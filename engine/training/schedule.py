"""How many steps a run makes, at which learning rates and at which input sizes: the optimizer
steps per epoch (with accumulation and ``train.max_steps_per_epoch``), the LR of each step
(YOLOX's ``yoloxwarmcos``) and the multi-scale sizes (YOLOX 0.3.0's draw,
``engine.training.multiscale`` resizes the batches to them). Pure functions: no MindSpore.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

log = logging.getLogger("train")


@dataclass(frozen=True)
class Schedule:
    """How many steps a run makes and at which learning rates.

    Steps are optimizer steps of the total batch (``batch x ranks x accumulate``): the LR
    schedule, the sinks, the size windows and ``log_interval`` count them; MindSpore counts
    calls of the training step (micro-batches), ``accumulate`` of them per step.
    """

    batch: int
    ranks: int
    accumulate: int
    batches_per_epoch: int  # per rank, from the data
    steps_per_epoch: int
    epochs: int
    base_lr: float
    lrs: np.ndarray

    @property
    def total_batch(self) -> int:
        return self.batch * self.ranks * self.accumulate

    @property
    def calls_per_epoch(self) -> int:
        return self.steps_per_epoch * self.accumulate

    @classmethod
    def from_config(cls, tcfg: Any, ranks: int, images: int) -> Schedule:
        batch, accumulate = int(tcfg.batch_size), accumulation(tcfg)
        batches = images // ranks // batch
        steps = optimizer_steps_per_epoch(batches, accumulate, tcfg.max_steps_per_epoch)
        if steps < 1:
            raise ValueError(
                f"{images} images are fewer than one batch of {batch} per rank"
                + (f" x train.accumulate={accumulate}" if accumulate > 1 else "")
            )
        epochs = int(tcfg.epochs)
        base_lr = scaled_lr(float(tcfg.lr_per_img), batch * ranks * accumulate)
        lrs = yolox_lr_schedule(
            base_lr,
            steps,
            epochs,
            float(tcfg.warmup_epochs),
            int(tcfg.no_aug_epochs),
            float(tcfg.min_lr_ratio),
            float(tcfg.warmup_lr),
        )
        return cls(batch, ranks, accumulate, batches, steps, epochs, base_lr, lrs)


def accumulation(tcfg: Any) -> int:
    """``train.accumulate``: micro-batches per optimizer step (1 = no accumulation)."""
    value = tcfg.accumulate
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"train.accumulate must be an integer >= 1, got {value!r}")
    return int(value)


def optimizer_steps_per_epoch(
    batches_per_epoch: int, accumulate: int = 1, max_steps: int | None = None
) -> int:
    """Optimizer steps in an epoch of ``batches_per_epoch`` micro-batches (per rank).

    A window of ``accumulate`` micro-batches never crosses an epoch's end: an epoch holds
    ``batches_per_epoch // accumulate`` whole windows and its last ``batches_per_epoch %
    accumulate`` micro-batches are not drawn, as a batch of the total size (batch x ranks x
    accumulate) would drop the same images (``drop_remainder``). ``max_steps``
    (``train.max_steps_per_epoch``) caps the optimizer steps.
    """
    steps = int(batches_per_epoch) // int(accumulate)
    if max_steps:
        steps = min(steps, int(max_steps))
    return steps


def yolox_lr_schedule(
    base_lr: float,
    steps_per_epoch: int,
    epochs: int,
    warmup_epochs: float,
    no_aug_epochs: int,
    min_lr_ratio: float = 0.05,
    warmup_lr: float = 0.0,
) -> np.ndarray:
    """Per-step learning rates of YOLOX's ``yoloxwarmcos`` schedule, as its Trainer uses them.

    Quadratic warm-up from ``warmup_lr`` over ``warmup_epochs``, cosine down to
    ``min_lr_ratio * base_lr`` at the start of the no-augmentation epochs, then flat. YOLOX's
    Trainer sets the rate *after* each step (``update_lr(progress_in_iter + 1)`` in
    ``train_one_iter``), so step ``i`` runs at the schedule's value for iteration ``i``, and
    the first step at the optimizer's initial rate: ``warmup_lr`` with a warm-up,
    ``base_lr`` without (``Exp.get_optimizer``).
    """
    total = epochs * steps_per_epoch
    warm = warmup_epochs * steps_per_epoch
    no_aug = no_aug_epochs * steps_per_epoch
    min_lr = base_lr * min_lr_ratio
    lrs = np.empty(total, dtype=np.float32)
    for it in range(total):
        if it == 0:
            lr = warmup_lr if warm > 0 else base_lr
        elif it <= warm:
            lr = (base_lr - warmup_lr) * (it / float(warm)) ** 2 + warmup_lr
        elif it >= total - no_aug:
            lr = min_lr
        else:
            progress = (it - warm) / float(total - warm - no_aug)
            lr = min_lr + 0.5 * (base_lr - min_lr) * (1.0 + math.cos(math.pi * progress))
        lrs[it] = lr
    return lrs


def scaled_lr(lr_per_img: float, total_batch: int) -> float:
    """YOLOX scales the learning rate with the total batch: 0.01 per 64 images."""
    return lr_per_img * total_batch


STRIDE = 32  # sizes are multiples of the largest feature stride, as in the original


DEFAULT_INTERVAL = 10  # steps per size, as the original's after_iter


def size_range(base_hw: Sequence[int], multiscale_range: int) -> tuple[int, int]:
    """(lowest, highest) size factor k (size = 32 k) of the original's ``random_size``."""
    r = int(multiscale_range)
    if r < 0:
        raise ValueError(f"train.multiscale_range must be >= 0, got {multiscale_range}")
    base = int(base_hw[0]) // STRIDE
    if base - r < 1:
        raise ValueError(
            f"train.multiscale_range={r} is too large for the training size {list(base_hw)}: "
            f"the smallest size would be {STRIDE * (base - r)} px (at most {base - 1})"
        )
    return base - r, base + r


def size_for_factor(base_hw: Sequence[int], k: int) -> tuple[int, int]:
    """Input size (h, w) of factor ``k``: height 32 k, width keeping the base aspect ratio
    the way the original does (``32 * int(k * w / h)``)."""
    factor = int(base_hw[1]) / int(base_hw[0])
    return STRIDE * int(k), STRIDE * int(k * factor)


def all_sizes(base_hw: Sequence[int], multiscale_range: int) -> list[tuple[int, int]]:
    """Every size the schedule can draw, smallest first."""
    lo, hi = size_range(base_hw, multiscale_range)
    return [size_for_factor(base_hw, k) for k in range(lo, hi + 1)]


def scheduled_size(
    base_hw: Sequence[int],
    multiscale_range: int,
    seed: int,
    step: int,
    interval: int = DEFAULT_INTERVAL,
) -> tuple[int, int]:
    """Input size (h, w) of global step ``step`` (0-based, counted over the whole run).

    Steps ``[0, interval)`` run at the base size, as in the original; every later window
    of ``interval`` steps draws a factor uniformly from :func:`size_range`, from a random
    generator seeded by (seed, window) alone. ``multiscale_range`` 0 always gives the base.
    """
    base = (int(base_hw[0]), int(base_hw[1]))
    if int(interval) < 1:
        raise ValueError(f"train.multiscale_interval must be >= 1, got {interval}")
    lo, hi = size_range(base, multiscale_range)
    window = int(step) // int(interval)
    if window == 0 or lo == hi:
        return base
    rng = np.random.default_rng((int(seed) & 0xFFFFFFFF, window))
    return size_for_factor(base, int(rng.integers(lo, hi + 1)))


def sink_steps(interval: int, steps_per_epoch: int, requested: int) -> int:
    """Steps per data sink that keep the size schedule when sizes change only at sinks.

    A sink runs one graph, hence one size: its steps must lie in one size window, so the
    sink size must divide ``interval`` (and, as any sink size, the steps of an epoch).
    ``requested`` -1 or 0 picks the largest such size, gcd(interval, steps_per_epoch).
    """
    largest = math.gcd(int(interval), int(steps_per_epoch))
    if requested in (-1, 0):
        return largest
    if requested < 0 or interval % requested or steps_per_epoch % requested:
        raise ValueError(
            f"runtime.sink_size={requested}: with multi-scale training a sink must stay in one "
            f"size window, so the sink size must divide train.multiscale_interval={interval} "
            f"and the {steps_per_epoch} steps of an epoch (largest: {largest}; -1 picks it)"
        )
    return int(requested)
