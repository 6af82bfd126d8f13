"""The host a process runs on: the cores it may use and the ranks that share them."""

from __future__ import annotations

import os

# Set by scripts/run_distributed_train.sh: how many ranks run on this host (msrun does not
# export its --local_worker_num to the workers).
LOCAL_RANKS_VAR = "MSDET_LOCAL_RANKS"


def available_cores() -> int:
    """CPU cores this process may run on (its affinity mask where the OS has one)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


def ranks_on_this_host(world_size: int) -> int:
    """Ranks sharing this host's cores: the launcher's count, else all ``world_size``."""
    try:
        local = int(os.environ.get(LOCAL_RANKS_VAR, "0"))
    except ValueError:
        local = 0
    return max(1, local if local > 0 else int(world_size))
