"""Shared test set-up: the CPU runtime environment before MindSpore loads, graph mode from
the moment it does, the ``graph_mode`` fixture, the files' order (longest first) and
reports pytest-xdist can send whatever file names they show.

MindSpore is not imported here: tests that never use it (tests/common, tests/test_layout.py,
tests/test_names.py) do not pay for loading it.
"""

import pytest

from msdet.engine.runtime.cpu import configure_process_env
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


# What a slow test without a ``long`` mark counts for when files are ordered: their mean,
# 6.4 s, measured over the whole suite on a 2-core AMD EPYC (Zen 5); the tests of a minute
# or more carry their own measured seconds (``@pytest.mark.long(seconds)``).
SLOW_TEST_SECONDS = 6


def pytest_collection_modifyitems(config, items):
    """The longest files first (a stable sort: every file's tests stay together and in their
    order), a file's length being its long tests' measured seconds plus SLOW_TEST_SECONDS for
    each other slow test. dev/test.sh's two workers take whole files in this order
    (--dist loadfile --no-loadscope-reorder): the files of minutes start first, so both
    workers end together; a file of quick tests waits for a free worker at the end."""
    seconds: dict[str, float] = {}
    for item in items:
        path = item.nodeid.split("::", 1)[0]
        long = item.get_closest_marker("long")
        slow = item.get_closest_marker("slow") is not None
        cost = float(long.args[0]) if long else SLOW_TEST_SECONDS * slow
        seconds[path] = seconds.get(path, 0.0) + cost
    items.sort(key=lambda item: -seconds[item.nodeid.split("::", 1)[0]])


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Every report's text made UTF-8: a failure or a captured log line that shows a file
    name that is not UTF-8 (Python holds its bytes as surrogates) would otherwise stop the
    whole run, as pytest-xdist cannot send such a report from its worker ("strings must be
    utf-8 encodable")."""
    outcome = yield
    report = outcome.get_result()
    if report.longrepr is not None and not _utf8(str(report.longrepr)):
        report.longrepr = _escaped(str(report.longrepr))
    report.sections = [(name, _escaped(text)) for name, text in report.sections]


def _utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _escaped(text: str) -> str:
    return text.encode("utf-8", "backslashreplace").decode("utf-8")
