"""Compiling the training graph before the first step that runs it, timed and logged."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from mindspore.train import Callback

from msdet.engine.training.callbacks.base import MEASURE
from msdet.engine.training.graphs import compile_graph, input_shapes, target_rows, with_target_rows

log = logging.getLogger("train")


class CompileTrainingGraph(Callback):
    """Compiles each training graph before the first step that runs it (graph mode, one
    input size; ``engine.training.multiscale`` does the same per size) and logs how long it took
    (``engine.training.graphs``). One graph per input shape: one in all, or one per target bucket
    (``data.target_buckets``), compiled when a batch first needs it. ``buckets`` with
    ``compile_all_first``: every bucket's graph before the first step, in bucket order
    (MindSpore's persistent compile cache finds graphs by compile order; with several
    ranks, none waits in a collective while another compiles)."""

    phase = MEASURE

    def __init__(self, buckets: Sequence[int] = (), compile_all_first: bool = False) -> None:
        self.buckets = tuple(buckets)
        self.pending = list(self.buckets) if compile_all_first and len(self.buckets) > 1 else []
        self.compiled: dict[tuple, float] = {}
        self.steps_per_rows: dict[int, int] = {}

    def on_train_step_begin(self, run_context):
        cb = run_context.original_args()
        inputs = tuple(cb.train_dataset_element or ())
        while self.pending:
            self._compile(cb.train_network, with_target_rows(inputs, self.pending.pop(0)))
        self._compile(cb.train_network, inputs)
        if len(self.buckets) > 1:
            rows = target_rows(inputs)
            self.steps_per_rows[rows] = self.steps_per_rows.get(rows, 0) + 1

    def on_train_end(self, run_context):
        if len(self.buckets) > 1:
            log.info(
                "target buckets: %d graphs compiled in %.1f s; steps per bucket: %s",
                len(self.compiled),
                sum(self.compiled.values()),
                ", ".join(
                    f"{rows} rows: {self.steps_per_rows.get(rows, 0)}" for rows in self.buckets
                ),
            )

    def _compile(self, network, inputs) -> None:
        key = input_shapes(inputs)
        if key in self.compiled:
            return
        self.compiled[key] = seconds = compile_graph(network, inputs)
        if len(self.buckets) > 1:
            log.info(
                "training graph for %d target rows compiled in %.1f s (%d of %d buckets)",
                target_rows(inputs),
                seconds,
                len(self.compiled),
                len(self.buckets),
            )
        else:
            log.info("training graph compiled in %.1f s", seconds)
