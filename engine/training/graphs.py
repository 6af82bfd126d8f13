"""Compiling the training graphs ahead of the steps that run them (graph mode).

MindSpore keys a compiled graph on the cell's phase and the shapes of its inputs: a batch
of another shape (a target bucket, ``data.buckets``) or another phase (a multi-scale size,
``engine.training.multiscale``) compiles a graph of its own on first use, inside the step
that meets it. Compiling it explicitly first logs how long it took and hands the compiler's
freed heap back before the step allocates (``engine.runtime.memory.release_free_heap``).
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np
from mindspore import Tensor

from msdet.engine.runtime.memory import release_free_heap


def input_shapes(inputs: Sequence) -> tuple[tuple[int, ...], ...]:
    """The shapes of a step's inputs: with the phase, what selects its graph."""
    return tuple(tuple(int(d) for d in x.shape) for x in inputs)


def target_rows(inputs: Sequence) -> int | None:
    """Rows per image of a training batch ``(images, targets, mask)``; None for others."""
    return int(inputs[1].shape[1]) if len(inputs) == 3 else None


def with_target_rows(inputs: Sequence, rows: int) -> tuple:
    """``(images, targets, mask)`` with all-padding targets and mask of ``rows`` rows: the
    input shapes of another target bucket's graph, for compiling it (values unused)."""
    images, targets, mask = inputs
    batch = int(targets.shape[0])
    return (
        images,
        Tensor(np.zeros((batch, rows, *targets.shape[2:]), np.float32), targets.dtype),
        Tensor(np.zeros((batch, rows), np.float32), mask.dtype),
    )


def compile_graph(network, inputs: Sequence) -> float:
    """Compile ``network``'s graph for ``inputs`` at its current phase; seconds taken."""
    started = time.perf_counter()
    network.compile(*inputs)
    seconds = time.perf_counter() - started
    release_free_heap()  # the compiler's garbage, before the step allocates
    return seconds
