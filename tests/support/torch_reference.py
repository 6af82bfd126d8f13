"""Access to PyTorch and the PyTorch original for tests: skip locally without them, fail in
CI (``MSDET_REQUIRE_TORCH=1``, which ``dev/test.sh`` sets)."""

from __future__ import annotations

import os
import types

import pytest

from msdet.porting.reference import ReferenceMissingError, import_yolox

REQUIRE_VAR = "MSDET_REQUIRE_TORCH"


def _missing(reason: str):
    if os.environ.get(REQUIRE_VAR) == "1":
        pytest.fail(f"PyTorch reference required ({REQUIRE_VAR}=1) but unavailable: {reason}")
    pytest.skip(reason)


def require_torch() -> types.ModuleType:
    """``import torch``, or skip; with MSDET_REQUIRE_TORCH=1 a missing torch fails."""
    try:
        import torch
    except ImportError as err:
        _missing(f"torch is not installed ({err})")
    return torch


def require_yolox():
    """Import yolox or skip; with MSDET_REQUIRE_TORCH=1 (CI) a missing reference fails."""
    try:
        return import_yolox()
    except ReferenceMissingError as err:
        _missing(str(err))
