"""Data settings as users type them: worker counts. (Input sizes are checked and resolved
by the config loader, ``msdet.common.config``.)

Free of MindSpore imports: entry points validate their config with these before the
runtime set-up loads MindSpore.
"""

from __future__ import annotations

import logging
from typing import Any

from msdet.common.host import available_cores, ranks_on_this_host

log = logging.getLogger(__name__)

# Data workers per rank chosen by `auto`: half the rank's cores (the training step's own
# operators use the rest), at most this many.
AUTO_MAX_WORKERS = 8

_reported: set[tuple[str, Any, int]] = set()


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


def first_no_aug_epoch(epochs: int, no_aug_epochs: int) -> int:
    """The 0-based epoch from which mosaic/mixup are off and the L1 loss is on.

    As YOLOX's trainer, which switches before epoch ``e`` when ``e + 1 == epochs -
    no_aug_epochs``: ``no_aug_epochs + 1`` epochs without mosaic (16 for 15). ``0`` turns
    the switch off (YOLOX would still switch before the last epoch).
    """
    if int(no_aug_epochs) <= 0:
        return int(epochs)
    return max(int(epochs) - int(no_aug_epochs) - 1, 0)
