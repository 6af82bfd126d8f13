"""Several ranks: the launcher check, collective communication set-up (HCCL on Ascend, NCCL
on GPU, mccl on CPU), the world group, a flag agreed over the ranks, per-rank logging and
SyncBatchNorm. Nothing here imports MindSpore at import time.
"""

from __future__ import annotations

import logging
import os
from typing import Any

log = logging.getLogger(__name__)


def check_launcher(distributed: bool) -> None:
    """Refuse a single-process set-up under msrun: without ``init()`` every worker (and the
    scheduler) would train alone and all would write into the same run folder."""
    role = os.environ.get("MS_ROLE")
    if role and not distributed:
        raise ValueError(
            f"launched by msrun (MS_ROLE={role}) but runtime.distributed=false: "
            "use scripts/run_distributed_train.sh, which sets runtime.distributed=true"
        )


def init_distributed(ms: Any, device: str, parallel_context: bool = True) -> tuple[int, int]:
    """Initialise collectives (HCCL on Ascend, NCCL on GPU, mccl on CPU) for data parallel.

    Must run under a launcher (msrun, or a rank table on Ascend); MindSpore's own error
    is replaced by one that names the launch scripts. Ranks other than 0 stop writing the
    run folder's log file (their console output is the launcher's per-rank log).
    ``parallel_context``: also set the static-graph auto-parallel context (data parallel,
    gradient mean) that ``Model.train`` compiles under; msdet's jit loop does without it
    (its training step all-reduces the gradients itself, ``engine.training.step``).
    """
    from mindspore.communication import get_group_size, get_rank, init

    try:
        init()
    except RuntimeError as err:
        raise RuntimeError(
            "runtime.distributed=true needs a launcher: use "
            "scripts/run_distributed_train.sh NUM_CARDS (msrun) or set RANK_TABLE_FILE. "
            f"MindSpore said: {err}"
        ) from err
    rank, world = get_rank(), get_group_size()
    if parallel_context:
        ms.reset_auto_parallel_context()
        ms.set_auto_parallel_context(
            parallel_mode=ms.ParallelMode.DATA_PARALLEL,
            gradients_mean=True,
            device_num=world,
        )
    if rank != 0:
        close_file_logs()
    log.info("data parallel: rank %d of %d (pid %d, %s)", rank, world, os.getpid(), device)
    return rank, world


def set_data_parallel_context(ms: Any, world: int) -> None:
    """The static-graph data-parallel context ``Model.train`` compiles a step of several ranks
    under (data parallel, the gradients' mean over ``world`` ranks): set by its training loop
    (``engine.training.loops.ModelLoop``); msdet's jit loop does without it."""
    ms.reset_auto_parallel_context()
    ms.set_auto_parallel_context(
        parallel_mode=ms.ParallelMode.DATA_PARALLEL, gradients_mean=True, device_num=world
    )


def world_group() -> str:
    """The collective group of all ranks (:func:`init_distributed` set it up): the group
    msdet's jit loop all-reduces gradients over."""
    from mindspore.communication import GlobalComm

    return GlobalComm.WORLD_COMM_GROUP


def any_rank(flag: bool) -> bool:
    """True when ``flag`` is True on any rank (an all-reduce; every rank must call it)."""
    import mindspore as ms
    import numpy as np
    from mindspore import nn, ops

    class _Sum(nn.Cell):
        def __init__(self):
            super().__init__()
            self.reduce = ops.AllReduce()

        def construct(self, x):
            return self.reduce(x)

    total = _Sum()(ms.Tensor(np.array([float(flag)], np.float32)))
    return bool(total.asnumpy()[0] > 0.5)


def close_file_logs() -> None:
    """Detach the root logger's file handlers (the run folder's <command>.log): rank 0 owns it."""
    root = logging.getLogger()
    for handler in list(root.handlers):
        if isinstance(handler, logging.FileHandler):
            root.removeHandler(handler)
            handler.close()


def resolve_sync_bn(requested: bool, device: str, world: int) -> bool:
    """SyncBatchNorm only where MindSpore has it (Ascend) and only when there are ranks."""
    if not requested:
        return False
    if device != "Ascend":
        log.warning("runtime.sync_bn is only supported on Ascend; using per-rank BatchNorm")
        return False
    if world < 2:
        log.info("runtime.sync_bn: a single rank has nothing to sync; using BatchNorm")
        return False
    return True
