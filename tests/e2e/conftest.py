"""Shared end-to-end fixtures: the dataset cache and one tiny training run."""

from __future__ import annotations

import pytest

from tests.e2e.tiny_run import run_entry


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("shapes_cache")


@pytest.fixture(scope="session")
def trained(tmp_path_factory, cache_dir):
    """One tiny training run with data sinking and O2 mixed precision requested on CPU."""
    run_dir = tmp_path_factory.mktemp("run")
    out = run_entry(
        "train.py",
        run_dir,
        cache_dir,
        "train.epochs=3",
        "train.no_aug_epochs=1",
        "train.lr_per_img=0.0025",
        "runtime.sink=true",
        "runtime.amp=O2",
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return run_dir, out
