"""Target-count buckets: each training batch padded to the fewest target rows that hold it.

The pipeline pads every image's targets to ``data.max_objects`` rows (static shapes), and
SimOTA then assigns over all of them: its work on ``[B, M, A]`` tensors grows with the
padded ``M``, not with the real boxes. With ``data.target_buckets`` (ascending row counts
below ``data.max_objects``) each batch keeps only the rows of the smallest bucket that
holds its fullest image; ``data.max_objects`` itself is always the last bucket. The real
rows of every image come first (:meth:`data.pipeline.TrainSamples.pad_targets`), so the
rows dropped are padding only and the loss is the same (``tests/models/test_loss.py``).

Each bucket is its own static-shape graph, compiled once (``engine.training.graphs``): buckets
times multi-scale sizes is the number of training graphs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

# More graphs than this is refused: each one is a whole training graph to compile.
MAX_GRAPHS = 64


def target_buckets(data_cfg: Any) -> tuple[int, ...]:
    """The row counts a batch may be trimmed to, ascending, ending at ``data.max_objects``.

    ``data.target_buckets`` empty or null gives ``(max_objects,)``: no trimming.
    """
    max_objects = int(data_cfg.max_objects)
    if max_objects < 1:
        raise ValueError(f"data.max_objects must be at least 1, got {max_objects}")
    raw = data_cfg.target_buckets or []
    if isinstance(raw, str) or not isinstance(raw, Sequence):
        raise ValueError(
            f"data.target_buckets must be a list of row counts, e.g. [16,32], got {raw!r}"
        )
    buckets = []
    for value in raw:
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            raise ValueError(f"data.target_buckets holds {value!r}: row counts are integers")
        if not 1 <= int(value) < max_objects:
            raise ValueError(
                f"data.target_buckets holds {value}: each bucket must be in "
                f"[1, data.max_objects={max_objects}) (data.max_objects is always the last)"
            )
        buckets.append(int(value))
    if buckets != sorted(set(buckets)):
        raise ValueError(f"data.target_buckets must be ascending without repeats, got {buckets}")
    return (*buckets, max_objects)


def bucket_rows(mask: np.ndarray, buckets: Sequence[int]) -> int:
    """The smallest bucket that holds the fullest image of a ``[B, M]`` mask batch."""
    most = int(np.asarray(mask).sum(axis=1).max(initial=0))
    for rows in buckets:
        if most <= rows:
            return int(rows)
    raise ValueError(
        f"an image has {most} targets, more than the largest bucket ({buckets[-1]} rows)"
    )


class TrimToBucket:
    """Dataset map over a batch's ``(targets, mask)``: both cut to :func:`bucket_rows` rows.

    Refuses a batch whose real rows are not the first of each image (cutting it would drop
    real boxes): the pipeline writes them first, so this names a broken invariant.
    """

    def __init__(self, buckets: Sequence[int]):
        self.buckets = tuple(int(b) for b in buckets)

    def __call__(self, targets: np.ndarray, mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        rows = bucket_rows(mask, self.buckets)
        if rows == mask.shape[1]:
            return targets, mask
        if np.any(mask[:, rows:]):
            raise ValueError(
                "data.target_buckets: a batch's real targets are not the first rows of "
                "each image; trimming it would drop real boxes"
            )
        return np.ascontiguousarray(targets[:, :rows]), np.ascontiguousarray(mask[:, :rows])


def check_graph_count(sizes: int, buckets: Sequence[int]) -> int:
    """The number of training graphs (input sizes x target buckets), refused above
    :data:`MAX_GRAPHS` with both settings named."""
    graphs = int(sizes) * len(buckets)
    if graphs > MAX_GRAPHS:
        raise ValueError(
            f"{sizes} input sizes (train.multiscale_range) x {len(buckets)} target buckets "
            f"(data.target_buckets + data.max_objects) = {graphs} training graphs to compile, "
            f"more than {MAX_GRAPHS}: use fewer buckets or a smaller range"
        )
    return graphs
