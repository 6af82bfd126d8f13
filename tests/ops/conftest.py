"""The compiled kernel library fixture (tests/support/kernels.py)."""

from tests.support.kernels import library  # noqa: F401  (a fixture)
