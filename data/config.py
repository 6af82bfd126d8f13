"""Data settings as users type them: input sizes and worker counts.

Free of MindSpore imports: entry points validate their config with these before the
runtime set-up loads MindSpore.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from typing import Any

from msdet.common.host import available_cores, ranks_on_this_host

log = logging.getLogger(__name__)

STRIDE = 32  # the detector's largest stride: input sides must be multiples of it
# Data workers per rank chosen by `auto`: half the rank's cores (the training step's own
# operators use the rest), at most this many.
AUTO_MAX_WORKERS = 8

_reported: set[tuple[str, Any, int]] = set()


def input_size(value: Any, key: str = "data.img_size") -> tuple[int, int]:
    """``(h, w)`` from one number (a square, as YOLOX's ``--tsize 640``) or ``[h, w]``.

    Raises ``ValueError`` naming ``key`` unless both sides are positive multiples of 32.
    """
    if isinstance(value, (int, float, str)) and not isinstance(value, bool):
        sides: Sequence[Any] = (value, value)
    else:
        try:
            sides = list(value)
        except TypeError:
            raise ValueError(f"{key} must be a number or [h, w], got {value!r}") from None
    try:
        size = tuple(int(v) for v in sides)
        exact = all(float(v) == int(v) for v in sides)
    except (TypeError, ValueError):
        raise ValueError(f"{key} must be a number or [h, w] of integers, got {value!r}") from None
    if len(size) != 2 or not exact or any(v <= 0 or v % STRIDE for v in size):
        raise ValueError(
            f"{key} must be a positive multiple of {STRIDE} or [h, w] of such "
            f"(e.g. {key}=320 or {key}=[320,416]); got {value!r}"
        )
    return size[0], size[1]


def scaled_size(size: Sequence[int], scale: float) -> tuple[int, int]:
    """``(h, w)`` of ``size`` times ``scale``, each side rounded to the nearest multiple of
    32 (at least 32): ``train.img_scale`` 0.8 of 320 is 256, of 416 is 320."""
    return tuple(max(1, math.floor(int(v) * scale / STRIDE + 0.5)) * STRIDE for v in size)


def resolve_num_workers(
    value: Any, world_size: int = 1, key: str = "data.num_workers", cores: int | None = None
) -> int:
    """Data workers for one rank: ``auto`` or a number, never more than the rank's cores.

    ``auto``: half the cores available per rank on this host, between 1 and
    ``AUTO_MAX_WORKERS``. An explicit number above the cores per rank (MindSpore refuses
    more workers than cores) is lowered to fit, with one log line.
    """
    cores = available_cores() if cores is None else int(cores)
    per_rank = max(1, cores // ranks_on_this_host(world_size))
    if value is None or str(value).lower() == "auto":
        return max(1, min(AUTO_MAX_WORKERS, per_rank // 2))
    try:
        requested = int(value)
    except (TypeError, ValueError):
        raise ValueError(f"{key} must be 'auto' or a positive integer, got {value!r}") from None
    if requested < 1 or float(value) != requested:
        raise ValueError(f"{key} must be 'auto' or a positive integer, got {value!r}")
    if requested > per_rank:
        if (key, value, per_rank) not in _reported:
            _reported.add((key, value, per_rank))
            log.info(
                "%s=%d: only %d CPU cores per rank here, using %d workers",
                key,
                requested,
                per_rank,
                per_rank,
            )
        return per_rank
    return requested
