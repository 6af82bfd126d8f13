"""Shared test set-up: CPU runtime environment before MindSpore loads, tiny fixtures."""

import pytest

from msdet.engine.runtime.device import configure_process_env

# Must run before any test module imports mindspore (oneDNN reads it at load time).
configure_process_env("CPU")

import mindspore as ms  # noqa: E402  (after the environment is prepared)

from tests.modes import execution_mode  # noqa: E402

# msdet runs in graph mode by default (MindSpore's own default is PyNative).
ms.set_context(mode=ms.GRAPH_MODE)


@pytest.fixture(scope="module")
def graph_mode():
    """Graph mode for a whole module, as eval and export run (whatever ran before it)."""
    with execution_mode(ms.GRAPH_MODE):
        yield
