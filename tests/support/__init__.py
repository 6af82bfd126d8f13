"""What tests share, and only here (tests/test_layout.py holds every test to it): the
repository root and running code in a fresh Python process in this module; the rest in
its modules, each imported by the tests that need it (most of them load MindSpore):

- ``modes``: graph mode from MindSpore's first import, a block in another mode;
- ``torch_reference``: the PyTorch original, or a skip (a failure in CI);
- ``loss_cases``, ``nms``, ``evaluation``, ``inference``, ``media``, ``data``, ``training``,
  ``multiscale``: inputs and stand-ins for the tests of those parts;
- ``tiny_run``: the entry points run as a user runs them, on a tiny shapes set;
- ``web``: a local web server standing in for a download site;
- ``mindspore_surface``: every MindSpore name msdet's code reaches, read from the code;
- ``sgd``, ``branching_step``: the optimizer's small problem, and the step's skip as a branch
  (the form it had) for the branch-free step to be compared with;
- ``dp_tiny``, ``dp_step``, ``dp_overflow``, ``dp_accumulate``: the data-parallel jobs'
  problems and one-process references (tests/e2e/dp_*.py run their ranks).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping, Sequence

# The repository root: entry points, configs/ and scripts/ are found from it.
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# msdet's code packages, bottom to top (tests/test_layout.py holds the order).
PACKAGES = (
    "common",
    "data",
    "models",
    "ops",
    "engine",
    "tools",
    "porting",
    "commands",
    "bench",
    "dev",
)


def run_python(
    args: Sequence[str],
    cwd: str | os.PathLike = ROOT,
    env: Mapping[str, str] | None = None,
    timeout: float = 600,
) -> str:
    """``python ARGS`` in a fresh process (this interpreter); its stdout, after asserting
    that it exited 0 (the failure shows the end of its stderr). A fresh process keeps
    MindSpore's process-wide state (device, context, kernels) out of the test's own."""
    out = subprocess.run(
        [sys.executable, *args],
        cwd=cwd,
        env=None if env is None else dict(env),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout
