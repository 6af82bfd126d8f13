"""The device process: a check that raises is recorded and the next one runs; what it
recorded is read back."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from msdet.tools.selftest.cases import Check
from msdet.tools.selftest.device import (
    ALL_CHECKS,
    CHECKS,
    GRAPHS,
    RESULTS_FILE,
    Recorder,
    error_note,
    read_results,
    runners,
)
from tests.support import ROOT


@pytest.mark.slow
def test_a_check_that_raises_is_recorded_and_the_next_one_runs(tmp_path):
    """The chip query raising inside a check: a failed line with the error; the next check
    (here the same one again, the query working again) still runs. In a fresh process, as
    the self-test runs it: MindSpore's runtime is set up once per process."""
    code = (
        "import sys\n"
        "from msdet.engine.runtime import ascend\n"
        "real, calls = ascend.chip_profile, []\n"
        "def broken_once(*args):\n"
        "    calls.append(args)\n"
        "    if len(calls) == 1:\n"
        "        raise RuntimeError('the chip query failed')\n"
        "    return real(*args)\n"
        "ascend.chip_profile = broken_once\n"
        "from msdet.tools.selftest.device import run_device_checks\n"
        "run_device_checks(['runtime.device=CPU'], ['chip', 'chip'], sys.argv[1])\n"
    )
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path)], cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": ROOT}, capture_output=True, text=True,
                          timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    env, lines, started = read_results(str(tmp_path / RESULTS_FILE))
    assert env["device"] == "CPU" and started == ["chip", "chip"]
    (_, first), (_, second) = lines
    assert first.status == "failed" and first.note == "RuntimeError: the chip query failed"
    assert second.status == "passed" and second.name == "chip profile (simulated)"


def test_what_the_device_process_records_reads_back_line_by_line(tmp_path):
    path = str(tmp_path / RESULTS_FILE)
    record = Recorder(path)
    record.write("environment", device="CPU", chip=None)
    record.write("start", key="chip")
    record.check("chip", Check("chip profile (simulated)", "passed", {"profiles": {}}, note="n"))
    record.write("start", key="nms")
    env, lines, started = read_results(path)
    assert env == {"device": "CPU", "chip": None} and started == ["chip", "nms"]
    assert lines == [("chip", Check("chip profile (simulated)", "passed", {"profiles": {}},
                                    note="n"))]  # fmt: skip
    assert read_results(str(tmp_path / "none.jsonl")) == ({}, [], [])


def test_an_error_becomes_one_line_naming_its_type():
    assert error_note(RuntimeError("compile failed\nat line 3")) == "RuntimeError: compile failed"
    assert error_note(KeyboardInterrupt()) == "KeyboardInterrupt"
    assert error_note(ValueError("x" * 400)) == "ValueError: " + "x" * 300


def test_every_single_card_check_has_a_runner_and_a_graph_count():
    assert sorted(runners()) == sorted(CHECKS) and set(GRAPHS) == set(CHECKS)
    assert ALL_CHECKS == (*CHECKS, "distributed")
