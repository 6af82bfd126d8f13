"""Multi-scale training as YOLOX 0.3.0 does it, with one static-shape graph per size.

The original (``yolox/core/trainer.py`` ``after_iter``, ``yolox/exp/yolox_base.py``
``random_resize``/``preprocess``): every 10 iterations a new input size
``32 * randint(h/32 - r, h/32 + r)`` (inclusive; the width follows the base aspect ratio),
and each batch, built at the base size by the data pipeline, is resized on the device
with bilinear interpolation (``align_corners=False``) and its boxes scaled to match. The
first 10 iterations run at the base size.

Here:

- :func:`scheduled_size` is a pure function of (seed, global step): every rank draws the
  same size without communication and a resumed run continues the same sequence.
- :class:`MultiScaleResize` wraps the network-with-loss: it resizes images and scales
  targets before the forward pass, inside the training graph. The target size is a Python
  attribute, i.e. a compile-time constant.
- :class:`MultiScaleSchedule` (a callback) sets that attribute before each step and gives
  the compiled cell a phase name per size. MindSpore keys its graph cache on the phase, so
  each size compiles once, on first use, and switching back to a seen size reuses its graph
  while every size updates the same Parameters. It compiles a new size explicitly to log
  how long that took.

MindSpore's persistent compile cache (``MS_COMPILER_CACHE_ENABLE=1``,
``MS_COMPILER_CACHE_PATH``) stores graphs as ``compile_cache_<n>.mindir`` by compile
order, and the graphs of two sizes take the same inputs: a run that met its sizes in
another order would load another size's graph. With the cache on, the schedule therefore
compiles every size up front, in one fixed order (:func:`all_sizes`).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence

import mindspore as ms
from mindspore import nn, ops
from mindspore.train import Callback

from msdet.engine.training.graphs import compile_graph, target_rows, with_target_rows
from msdet.engine.training.schedule import DEFAULT_INTERVAL, all_sizes, scheduled_size, size_range

log = logging.getLogger("train")


def compile_cache_enabled() -> bool:
    """Whether MindSpore's persistent compile cache is on (context or environment)."""
    enabled = ms.get_context("enable_compile_cache")
    if enabled is None or enabled is False:
        enabled = os.environ.get("MS_COMPILER_CACHE_ENABLE") == "1"
    return bool(enabled)


class MultiScaleResize(nn.Cell):
    """(images, targets, mask) -> ``net_with_loss`` on the batch resized to :attr:`size`.

    Images ``[B, C, H, W]`` at ``base_hw`` are resized bilinearly with half-pixel centres
    and no antialiasing, which is PyTorch's ``interpolate(mode="bilinear",
    align_corners=False)``; target rows (class, cx, cy, w, h) are scaled by the same
    factors. At the base size nothing is resized, as in the original. ``size`` is read at
    compile time: change it only together with the compiled cell's phase
    (:class:`MultiScaleSchedule` does both).
    """

    def __init__(self, net_with_loss: nn.Cell, base_hw: Sequence[int]):
        super().__init__(auto_prefix=False)  # keep the parameter names of the network
        self.net_with_loss = net_with_loss
        self.base = (int(base_hw[0]), int(base_hw[1]))
        self.size = self.base
        self.resize = ops.ResizeBilinearV2(align_corners=False, half_pixel_centers=True)

    def construct(self, images, targets, mask):
        if self.size != self.base:
            images, targets = self.rescale(images, targets)
        return self.net_with_loss(images, targets, mask)

    def rescale(self, images, targets):
        """The batch at :attr:`size`: resized images, scaled targets (the original's
        ``preprocess``)."""
        sy = self.size[0] / self.base[0]
        sx = self.size[1] / self.base[1]
        scale = ops.tuple_to_array((1.0, sx, sy, sx, sy)).astype(targets.dtype)
        resized = self.resize(images, self.size)
        return resized, targets * scale


class MultiScaleSchedule(Callback):
    """Before each step (each sink in sink mode): the scheduled size and its graph.

    ``steps_per_sink``: the steps of one MindSpore epoch (one sink, or the whole epoch
    without sinking). ``steps_per_call``: steps one call of the training cell runs (the
    sink size when MindSpore really sinks, else 1). ``compile_graphs``: compile a new
    size explicitly (and log its time) before the step runs it; graph mode only.
    ``compile_all_first``: compile every size, in :func:`all_sizes` order, before the
    first step (default: when the persistent compile cache is on, see the module note).
    ``buckets``: the target buckets (``data.buckets``); each size has a graph per bucket,
    compiled when a batch first needs it, or all of them first with ``compile_all_first``.
    """

    def __init__(
        self,
        resize: MultiScaleResize,
        multiscale_range: int,
        seed: int,
        steps_per_sink: int,
        interval: int = DEFAULT_INTERVAL,
        steps_per_call: int = 1,
        compile_graphs: bool = True,
        compile_all_first: bool | None = None,
        buckets: Sequence[int] = (),
    ):
        super().__init__()
        size_range(resize.base, multiscale_range)  # fail at build time, not at step 11
        if interval % steps_per_call:
            raise ValueError(
                f"{steps_per_call} steps per call do not divide "
                f"train.multiscale_interval={interval}"
            )
        self.resize = resize
        self.range = int(multiscale_range)
        self.seed = int(seed)
        self.interval = int(interval)
        self.steps_per_sink = int(steps_per_sink)
        self.steps_per_call = int(steps_per_call)
        self.compile_graphs = compile_graphs
        if compile_all_first is None:
            compile_all_first = compile_graphs and compile_cache_enabled()
        self.buckets = tuple(int(b) for b in buckets)
        self.pending = (
            [
                (size, rows)
                for size in all_sizes(resize.base, self.range)
                for rows in self.buckets or (None,)
            ]
            if compile_all_first
            else []
        )
        self.compiled: dict[tuple, float] = {}
        self.sizes_used: dict[tuple[int, int], int] = {}
        self._next_step = 0

    @property
    def compile_seconds(self) -> float:
        """Total time spent compiling training graphs so far."""
        return sum(self.compiled.values())

    def on_train_epoch_begin(self, run_context):
        # MindSpore's epoch is one sink (or one real epoch without sinking); its number
        # counts from the resumed epoch on, which makes the global step exact on resume.
        cb = run_context.original_args()
        self._next_step = (cb.cur_epoch_num - 1) * self.steps_per_sink

    def on_train_step_begin(self, run_context):
        cb = run_context.original_args()
        step = self._next_step
        self._next_step += self.steps_per_call
        size = scheduled_size(self.resize.base, self.range, self.seed, step, self.interval)
        self.sizes_used[size] = self.sizes_used.get(size, 0) + self.steps_per_call
        network = cb.train_network
        inputs = cb.train_dataset_element or ()
        while self.pending:
            first, rows = self.pending.pop(0)
            self._use(
                network, first, inputs if rows is None else with_target_rows(inputs, rows), step
            )
        self._use(network, size, inputs, step)

    def _use(self, network, size: tuple[int, int], inputs, step: int) -> None:
        self.resize.size = size
        network.phase = f"train.{size[0]}x{size[1]}"
        rows = target_rows(inputs) if len(self.buckets) > 1 else None
        key = (str(id(network)), size, rows)
        if key in self.compiled:
            return
        seconds = compile_graph(network, inputs) if self.compile_graphs else 0.0
        self.compiled[key] = seconds
        if not self.compile_graphs:  # compiled by the step that first runs it, if at all
            log.info(
                "training at %dx%d%s from step %d (%d size%s so far)",
                size[0],
                size[1],
                "" if rows is None else f", {rows} target rows",
                step + 1,
                len(self.compiled),
                "" if len(self.compiled) == 1 else "s",
            )
            return
        log.info(
            "training graph for %dx%d%s compiled in %.1f s (step %d; %d graph%s, %.1f s in all)",
            size[0],
            size[1],
            "" if rows is None else f", {rows} target rows",
            seconds,
            step + 1,
            len(self.compiled),
            "" if len(self.compiled) == 1 else "s",
            self.compile_seconds,
        )

    def on_train_end(self, run_context):
        per_size = ", ".join(f"{h}x{w}: {n}" for (h, w), n in sorted(self.sizes_used.items()))
        if not self.compile_graphs:
            log.info("training sizes: %d; steps per size: %s", len(self.compiled), per_size)
            return
        log.info(
            "training graphs: %d compiled in %.1f s; steps per size: %s",
            len(self.compiled),
            self.compile_seconds,
            per_size,
        )
