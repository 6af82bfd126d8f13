"""Shared test set-up: the CPU runtime environment before MindSpore loads, graph mode from
the moment it does, and the ``graph_mode`` fixture.

MindSpore is not imported here: tests that never use it (tests/common, tests/test_layout.py,
tests/test_names.py) do not pay for loading it.
"""

import pytest

from msdet.engine.runtime.device import configure_process_env
from tests.support.modes import execution_mode, graph_mode_when_imported

# Before any test imports mindspore: oneDNN reads ONEDNN_MAX_CPU_ISA when it loads.
configure_process_env("CPU")
# msdet runs in graph mode by default (MindSpore's own default is PyNative).
graph_mode_when_imported()


@pytest.fixture(scope="module")
def graph_mode():
    """Graph mode for a whole module, as eval and export run (whatever ran before it)."""
    import mindspore as ms

    with execution_mode(ms.GRAPH_MODE):
        yield


# pytest-xdist hands each worker whole files (scripts/test.sh: --dist loadfile) in collection
# order (--no-loadscope-reorder; xdist's own reorder puts files with many tests first, which
# left the single-test files of several minutes for last, one worker waiting on them): the
# files that take minutes go first, longest first, so that both workers end together.
# Measured totals, Intel Xeon, 2 cores: 495 s (test_train) down to ~60 s. A scheduling hint
# only; a file not named here keeps its place after them.
SLOWEST_FILES = (
    "tests/e2e/test_train.py",
    "tests/tools/chip_check/test_main.py",
    "tests/e2e/test_distributed.py",
    "tests/tools/selftest/test_report.py",
    "tests/e2e/test_run_safety.py",
    "tests/tools/chip_check/test_backend.py",
    "tests/engine/training/test_pynative_training.py",
    "tests/engine/inference/test_exported.py",
    "tests/e2e/test_pretrained_start.py",
    "tests/engine/runtime/test_kernel_choice.py",
    "tests/engine/runtime/test_fusion.py",
    "tests/e2e/test_eval_predict.py",
    "tests/engine/training/test_accumulate.py",
    "tests/e2e/test_accumulate_train.py",
    "tests/engine/inference/test_export_command.py",
    "tests/models/test_loss.py",
    "tests/engine/training/test_recompute.py",
    "tests/e2e/test_multiscale_train.py",
)


def pytest_collection_modifyitems(config, items):
    """The files of :data:`SLOWEST_FILES` first, in its order (a stable sort: every file's
    tests stay together and in their order)."""
    rank = {path: i for i, path in enumerate(SLOWEST_FILES)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::", 1)[0], len(rank)))
