"""The data pipeline tests' shapes set and config: its size, the data config at a small
input, and a dataset's batches per epoch."""

from __future__ import annotations

import os

import numpy as np
from omegaconf import DictConfig, OmegaConf


def make_cfg(root: str, **overrides) -> DictConfig:
    cfg = OmegaConf.load(CONFIG)
    cfg.root = root
    cfg.img_size = list(SIZE)
    cfg.max_objects = 24
    cfg.num_workers = 1
    cfg.python_multiprocessing = False
    for key, value in overrides.items():
        OmegaConf.update(cfg, key, value)
    return cfg


def epochs_of(dataset, num_epochs: int) -> list[list[tuple[np.ndarray, ...]]]:
    iterator = dataset.create_tuple_iterator(num_epochs=num_epochs, output_numpy=True)
    return [[tuple(batch) for batch in iterator] for _ in range(num_epochs)]


NUM_TRAIN, NUM_VAL = 24, 6
CONFIG = os.path.join(os.path.dirname(__file__), "..", "..", "configs", "data", "shapes.yaml")
SIZE = (128, 160)
