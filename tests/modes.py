"""MindSpore's execution mode for a block of test code, restored afterwards."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import mindspore as ms


@contextlib.contextmanager
def execution_mode(mode: int) -> Iterator[None]:
    """Run the block in ``mode`` (``ms.GRAPH_MODE`` or ``ms.PYNATIVE_MODE``), then restore
    the mode that was set before, also when the block raises."""
    previous = ms.get_context("mode")
    ms.set_context(mode=mode)
    try:
        yield
    finally:
        ms.set_context(mode=previous)
