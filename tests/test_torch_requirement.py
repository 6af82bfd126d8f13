"""Tests that need PyTorch fail, not skip, where dev/test.sh runs them (MSDET_REQUIRE_TORCH=1),
as README says: a CI machine without torch must not pass by skipping every parity test."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from tests.support import ROOT

# Every test here takes seconds: it compiles, trains or starts a process.
pytestmark = pytest.mark.slow

# One test of each kind: torch alone (the pickle reader), and the YOLOX original.
TESTS = (
    "tests/models/test_torch_pickle.py::test_payload_saved_by_torch_is_refused",
    "tests/engine/training/test_optim.py::test_each_step_runs_at_the_rate_yolox_trainer_gives_it[2]",
)


def _outcomes(tmp_path, require: bool) -> dict[str, int]:
    blocked = tmp_path / "blocked"
    (blocked / "torch").mkdir(parents=True, exist_ok=True)
    (blocked / "torch" / "__init__.py").write_text(
        'raise ImportError("torch blocked by the test")\n'
    )
    env = {**os.environ, "PYTHONPATH": f"{blocked}{os.pathsep}{ROOT}"}
    env.pop("MSDET_REQUIRE_TORCH", None)
    if require:
        env["MSDET_REQUIRE_TORCH"] = "1"
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *TESTS],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    summary = out.stdout.strip().splitlines()[-1]
    return {word: int(n) for n, word in re.findall(r"(\d+) (passed|failed|skipped)", summary)}


def test_torch_tests_fail_without_torch_when_required(tmp_path):
    assert _outcomes(tmp_path, require=True) == {"failed": len(TESTS)}
    assert _outcomes(tmp_path, require=False) == {"skipped": len(TESTS)}
