"""How many steps a run makes and at which learning rates: the optimizer steps per epoch
(with accumulation and ``train.max_steps_per_epoch``), the sinks, and the multi-scale settings.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import numpy as np

from msdet.engine.runtime.process import Runtime
from msdet.engine.training.multiscale import (
    DEFAULT_INTERVAL,
    sink_steps,
)
from msdet.engine.training.optim import scaled_lr, yolox_lr_schedule

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


def multiscale_settings(tcfg: Any) -> tuple[int, int]:
    """(train.multiscale_range, train.multiscale_interval); range 0 is off."""
    ms_range = int(tcfg.multiscale_range)
    interval = int(tcfg.multiscale_interval)
    if ms_range < 0:
        raise ValueError(f"train.multiscale_range must be >= 0 (0 = off), got {ms_range}")
    if interval < 1:
        raise ValueError(f"train.multiscale_interval must be >= 1, got {interval}")
    return ms_range, interval


def sink_plan(
    rt: Runtime,
    steps_per_epoch: int,
    multiscale: tuple[int, int] = (0, DEFAULT_INTERVAL),
    *,
    profiling: bool = False,
) -> tuple[int, int]:
    """(steps per sink, sinks per epoch). Without real sinking one 'sink' is one epoch.

    ``profiling``: one step per sink, so that the profiler's step boundaries are steps,
    not whole sinks (a profiling run is a diagnostic run; its speed is not the point).
    With multi-scale training a sink runs one size: it must fit in one size window.
    """
    size = int(rt.sink_size)
    if rt.sink_effective and profiling:
        log.info("runtime.profile_steps: one step per sink while profiling")
        return 1, steps_per_epoch
    if rt.sink_effective and multiscale[0] > 0:
        if rt.loop == "jit":
            raise ValueError(
                "train.multiscale_range with runtime.sink under runtime.loop=jit: the data "
                "sink's device queue (mindspore.data_sink) holds one input shape; set "
                "runtime.sink=false or runtime.loop=model"
            )
        size = sink_steps(multiscale[1], steps_per_epoch, size)
        return size, steps_per_epoch // size
    if not rt.sink_effective or size in (-1, 0, steps_per_epoch):
        return steps_per_epoch, 1
    if size < 0 or steps_per_epoch % size:
        raise ValueError(
            f"runtime.sink_size={size} must be -1 or divide the {steps_per_epoch} steps of an epoch"
        )
    return size, steps_per_epoch // size
