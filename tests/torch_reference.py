"""Access to the PyTorch original for tests: skip locally without it, fail in CI."""

from __future__ import annotations

import os

import pytest

from models.reference import ReferenceMissingError, import_yolox


def require_yolox():
    """Import yolox or skip; with MSDET_REQUIRE_TORCH=1 (CI) a missing reference fails."""
    try:
        return import_yolox()
    except ReferenceMissingError as err:
        if os.environ.get("MSDET_REQUIRE_TORCH") == "1":
            pytest.fail(f"PyTorch reference required but unavailable: {err}")
        pytest.skip(str(err))
