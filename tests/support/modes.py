"""MindSpore's execution mode in the test process: graph mode as msdet's default from the
moment MindSpore is imported, and a block of test code in another mode.

Nothing here imports MindSpore at import time: the root conftest uses this module, and a
test that never needs MindSpore must not pay for loading it.
"""

from __future__ import annotations

import contextlib
import importlib.abc
import importlib.util
import sys
from collections.abc import Iterator
from types import ModuleType


class _GraphModeOnImport(importlib.abc.MetaPathFinder):
    """An import finder that finds nothing itself: asked for ``mindspore``, it takes the
    spec the other finders give and has the loader switch to graph mode as soon as the
    package has loaded, before anyone can use it."""

    def find_spec(self, name, path=None, target=None):
        """``mindspore``'s spec with the graph-mode loader; None for every other module."""
        if name != "mindspore":
            return None
        sys.meta_path.remove(self)  # once, and out of the search below
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            return spec
        load = spec.loader.exec_module

        def exec_module(module: ModuleType) -> None:
            load(module)
            module.set_context(mode=module.GRAPH_MODE)

        spec.loader.exec_module = exec_module
        return spec


def graph_mode_when_imported() -> None:
    """Make graph mode MindSpore's mode in this process (msdet's default; MindSpore's own
    is PyNative): now if MindSpore is loaded, else the moment it is first imported, wherever
    that happens (a test module, a test body, a fixture)."""
    if "mindspore" in sys.modules:
        ms = sys.modules["mindspore"]
        ms.set_context(mode=ms.GRAPH_MODE)
    elif not any(isinstance(f, _GraphModeOnImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _GraphModeOnImport())


@contextlib.contextmanager
def execution_mode(mode: int) -> Iterator[None]:
    """Run the block in ``mode`` (``ms.GRAPH_MODE`` or ``ms.PYNATIVE_MODE``), then restore
    the mode that was set before, also when the block raises."""
    import mindspore as ms

    previous = ms.get_context("mode")
    ms.set_context(mode=mode)
    try:
        yield
    finally:
        ms.set_context(mode=previous)
