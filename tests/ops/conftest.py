"""The compiled kernel library, built once per test session into a temporary cache."""

from __future__ import annotations

import pytest

from msdet.ops.cpu_kernels import build_kernel_library


@pytest.fixture(scope="session")
def library(tmp_path_factory):
    lib = build_kernel_library(str(tmp_path_factory.mktemp("kernels")))
    if lib is None:
        pytest.skip("no C++ compiler on this machine")
    return lib
