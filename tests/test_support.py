"""The test process itself: the root conftest prepares MindSpore's environment and graph
mode without loading MindSpore, so tests that never use it do not pay for it, and a test
that imports it, wherever, finds the environment set and graph mode on."""

from __future__ import annotations

import json
import os

from tests.support import run_python

PROBE = """
import json, os, sys
import pytest
status = pytest.main(["-q", "-p", "no:xdist", "-p", "no:cacheprovider", "tests/common/test_progress.py"])
loaded_by_tests = "mindspore" in sys.modules
import mindspore as ms
print(json.dumps({
    "status": int(status),
    "loaded_by_tests": loaded_by_tests,
    "isa": os.environ.get("ONEDNN_MAX_CPU_ISA"),
    "graph_mode": ms.get_context("mode") == ms.GRAPH_MODE,
}))
"""


def test_pure_python_tests_never_load_mindspore_and_a_later_import_gets_graph_mode():
    # The child's own conftest must set the environment: none of it inherited from this one.
    prepared = ("ONEDNN_MAX_CPU_ISA", "OMP_WAIT_POLICY", "GOMP_SPINCOUNT")
    env = {k: v for k, v in os.environ.items() if k not in prepared}
    out = json.loads(run_python(["-c", PROBE], env=env).strip().splitlines()[-1])
    assert out == {"status": 0, "loaded_by_tests": False, "isa": "AVX2", "graph_mode": True}
