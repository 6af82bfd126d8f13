"""A tiny generated shapes set shared by the pipeline tests (tests/support/data.py holds
their config helpers)."""

from __future__ import annotations

import pytest

from msdet.data.coco import CocoSource
from msdet.data.synthetic import ANN_FILES, generate_shapes
from tests.support.data import NUM_TRAIN, NUM_VAL


@pytest.fixture(scope="module")
def shapes_root(tmp_path_factory) -> str:
    root = str(tmp_path_factory.mktemp("shapes"))
    generate_shapes(root, NUM_TRAIN, NUM_VAL, seed=0)
    return root


@pytest.fixture(scope="module")
def train_source(shapes_root) -> CocoSource:
    return CocoSource(shapes_root, ANN_FILES["train"], "train")


@pytest.fixture(scope="module")
def val_source(shapes_root) -> CocoSource:
    return CocoSource(shapes_root, ANN_FILES["val"], "val")
