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


def padded_to_rows(inputs: Sequence, rows: int) -> tuple:
    """``(images, targets, mask)`` with targets and mask padded by empty rows to ``rows``:
    a larger target bucket's shapes, the same targets (padding rows change no loss term,
    ``data.buckets``)."""
    images, targets, mask = inputs
    t, m = targets.asnumpy(), mask.asnumpy()
    extra = int(rows) - t.shape[1]
    if extra < 0:
        raise ValueError(f"cannot pad {t.shape[1]} target rows down to {rows}")
    t = np.concatenate([t, np.zeros((t.shape[0], extra, *t.shape[2:]), t.dtype)], axis=1)
    m = np.concatenate([m, np.zeros((m.shape[0], extra), m.dtype)], axis=1)
    return images, Tensor(t), Tensor(m)


# MindYOLO's published graph compile times of YOLOX training graphs at jit level O2 (GE's
# whole-graph compile; the README of MindYOLO's YOLOX configs, MindSpore 2.5): 202 s (nano 416 px and
# s 640 px, 910A), 305 s (s 640 px, 910B), and 170-341 s per scale on the 910 in its logs.
GE_TRAIN_GRAPH_SECONDS = (170, 341)


def compile_budget(train_sizes: int, buckets: int, device_nms: bool, backend: str) -> dict:
    """The graphs a training run compiles, by kind, and what they cost at jit level O2.

    ``train``: one per input size (multi-scale) and target bucket, each compiled on first
    use; ``eval``: the evaluation network and its NMS (or the NMS's candidate stage where
    NMS runs on the host); ``nms_check``: the device NMS and the host NMS's candidates of
    the first-use check (``engine.runtime.ascend.nms_on_host``), where NMS may run on the
    device. ``seconds``: (low, high) for the training graphs at O2 from MindYOLO's figures
    (:data:`GE_TRAIN_GRAPH_SECONDS`); None kernel by kernel, where nobody published one
    (operators compile or load on first launch instead)."""
    counts = {"train": int(train_sizes) * max(1, int(buckets)), "eval": 2,
              "nms_check": 2 if device_nms else 0}  # fmt: skip
    seconds = None
    if backend == "GE graph sink":
        seconds = tuple(counts["train"] * s for s in GE_TRAIN_GRAPH_SECONDS)
    return {**counts, "total": sum(counts.values()), "train_seconds": seconds}


def describe_budget(budget: dict) -> str:
    """One log line for :func:`compile_budget`."""
    text = (
        f"graphs to compile: {budget['train']} training (input sizes x target buckets, each "
        f"on first use), {budget['eval']} evaluation"
        + (f", {budget['nms_check']} for the NMS check" if budget["nms_check"] else "")
    )
    if budget["train_seconds"]:
        low, high = budget["train_seconds"]
        text += (
            f"; at jit level O2 YOLOX training graphs took {GE_TRAIN_GRAPH_SECONDS[0]}-"
            f"{GE_TRAIN_GRAPH_SECONDS[1]} s each in MindYOLO's runs: {low / 60:.0f}-"
            f"{high / 60:.0f} min over the run"
        )
    return text
