"""engine.selftest on CPU: every check that means something without a card runs and passes
(graph mode against PyNative, the simulated chip profiles, the two NMS paths, an injected
overflow at O2, the MINDIR export), and every device-only check says it was skipped."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from msdet.engine.tools.selftest.cases import Check, compare, relative_error
from msdet.engine.tools.selftest.report import format_table
from tests.support import ROOT


def test_relative_error_and_compare_fail_on_what_they_should():
    ref = np.array([1.0, -4.0, 2.0])
    assert relative_error(ref, ref) == 0.0
    assert relative_error(ref + [0, 0.004, 0], ref) == pytest.approx(1e-3)
    assert relative_error(ref[:2], ref) == float("inf")  # another shape
    assert relative_error(np.array([1.0, np.nan, 2.0]), ref) == float("inf")
    assert compare("x", ref * (1 + 1e-5), ref, 1e-4).status == "passed"
    assert compare("x", ref * 1.01, ref, 1e-4).status == "failed"
    table = format_table(
        [Check("a check", "skipped", note="needs Ascend"), compare("b", ref, ref, 1e-4)]
    )
    assert "a check" in table and "needs Ascend" in table and "max_rel_error=0" in table


def run_selftest(tmp_path, size: int) -> tuple[subprocess.CompletedProcess, dict]:
    report = tmp_path / "selftest.json"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "msdet.engine.tools.selftest",
            "--size",
            str(size),
            "--report",
            str(report),
            "runtime.device=CPU",
        ],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": ROOT},
        capture_output=True,
        text=True,
        timeout=1800,
    )
    return done, (json.loads(report.read_text()) if report.is_file() else {})


def assert_cpu_report(done, report) -> None:
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    checks = {c["name"]: c for c in report["checks"]}
    status = {name: c["status"] for name, c in checks.items()}
    device_only = {"data sinking (sink_size > 1)", "collectives (2+ cards)"}
    assert {n for n, s in status.items() if s == "skipped"} == device_only
    assert all("needs" in checks[n]["note"] for n in device_only)
    assert {n for n, s in status.items() if s == "passed"} == set(status) - device_only
    # Figures, not only verdicts: the comparisons compared real values.
    assert checks["NMSWithMask on the device vs host NMS"]["figures"]["kept"] > 1000
    assert checks["injected overflow at O2"]["figures"]["weights_moved"] == []
    step = checks["training step O0: losses, update"]["figures"]
    assert step["update_norm"] > 0 and step["loss_terms"][0] > 0
    env = report["environment"]
    assert env["device"] == "CPU" and env["mindspore"] and report["summary"]["failed"] == 0


def test_tiny_selftest_on_cpu_passes_and_skips_what_needs_a_card(tmp_path):
    """The tiny variant (64 px): ~2 min on 2 cores, most of it compiling five graphs. The
    variant a card runs (320 px, the default) runs the same checks on bigger tensors; on CPU
    it passed the same way (7 passed, 2 skipped, 3.5 min loaded) and is not repeated here."""
    assert_cpu_report(*run_selftest(tmp_path, 64))
