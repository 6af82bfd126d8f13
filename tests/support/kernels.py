"""The compiled kernel library, built once per test session into a temporary cache: the
``library`` fixture of the tests that run msdet's CPU kernels (their conftest.py files take
it from here)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def library(tmp_path_factory):
    """msdet's compiled CPU kernel library (skips where there is no C++ compiler)."""
    from msdet.ops.cpu_kernels import build_kernel_library

    lib = build_kernel_library(str(tmp_path_factory.mktemp("kernels")))
    if lib is None:
        pytest.skip("no C++ compiler on this machine")
    return lib
