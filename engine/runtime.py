"""The one place that knows about devices: CPU, GPU, Ascend, modes and distribution.

Everything else asks the :class:`Runtime` returned by :func:`setup_runtime`. This module
must not import MindSpore at import time: the oneDNN ISA setting has to reach the process
environment *before* MindSpore loads its CPU kernels (see :func:`configure_process_env`).
"""

from __future__ import annotations

import glob
import logging
import os
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)

DEVICES = ("auto", "CPU", "GPU", "Ascend")
MODES = ("graph", "pynative")
AMP_LEVELS = ("auto", "O0", "O1", "O2", "O3")

# On AVX-512 AMD CPUs MindSpore's oneDNN picks a reference convolution kernel that is
# 25-80x slower than its AVX2 JIT kernel; capping the ISA at AVX2 gives identical results.
ONEDNN_ISA_VAR = "ONEDNN_MAX_CPU_ISA"
ONEDNN_ISA_VALUE = "AVX2"

ASCEND_DEVICE_FILES = ("/dev/davinci_manager", "/dev/davinci0")


@dataclass(frozen=True)
class Runtime:
    """What the rest of msdet needs to know about where it runs."""

    device: str  # "CPU" | "GPU" | "Ascend"
    mode: str  # "graph" | "pynative"
    amp_level: str  # "O0" .. "O3", resolved from "auto"
    sink: bool  # dataset sink mode requested (real only on Ascend/GPU)
    sink_size: int
    loss_scale: float = 1.0  # initial (dynamic) or fixed loss scale when amp_level != O0
    rank: int = 0
    world_size: int = 1
    device_id: int = 0
    run_dir: str = "."

    @property
    def is_main(self) -> bool:
        """True on the process that writes logs, checkpoints and metrics."""
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1

    @property
    def sink_effective(self) -> bool:
        """Whether MindSpore will really sink data (it silently falls back on CPU)."""
        return self.sink and self.device != "CPU"

    @property
    def uses_dynamic_loss_scale(self) -> bool:
        """Dynamic loss scaling (overflowed steps skipped) whenever fp16 is in play.

        MindSpore's Model-level DynamicLossScaleManager is refused on CPU, but msdet's own
        training step (``ms.amp.all_finite`` + a skipped update) runs on every device, so
        the Ascend code path is the one exercised on CPU too.
        """
        return self.amp_level != "O0"


def ascend_present() -> bool:
    """Ascend NPU device files exist on this host (no MindSpore import needed)."""
    return any(os.path.exists(p) for p in ASCEND_DEVICE_FILES) or bool(
        glob.glob("/dev/davinci[0-9]*")
    )


def resolve_device(requested: str) -> str:
    """Turn ``runtime.device`` into a concrete target; ``auto`` prefers Ascend over CPU."""
    if requested not in DEVICES:
        raise ValueError(f"runtime.device must be one of {DEVICES}, got {requested!r}")
    if requested == "auto":
        return "Ascend" if ascend_present() else "CPU"
    return requested


def configure_process_env(device: str, save_graphs_dir: str | None = None) -> dict[str, str]:
    """Set environment variables that MindSpore reads when it loads.

    On CPU, cap oneDNN at AVX2 unless the user already chose a value. Returns the
    variables this call set (for logging and tests).
    """
    changed: dict[str, str] = {}
    if device == "CPU" and ONEDNN_ISA_VAR not in os.environ:
        os.environ[ONEDNN_ISA_VAR] = ONEDNN_ISA_VALUE
        changed[ONEDNN_ISA_VAR] = ONEDNN_ISA_VALUE
    if save_graphs_dir:
        os.makedirs(save_graphs_dir, exist_ok=True)
        for key, value in (
            ("MS_DEV_SAVE_GRAPHS", "1"),
            ("MS_DEV_SAVE_GRAPHS_PATH", save_graphs_dir),
        ):
            os.environ[key] = value
            changed[key] = value
    return changed


def resolve_amp(level: str, device: str) -> str:
    """``auto`` is O2 on Ascend/GPU and O0 on CPU, where fp16 kernels are 2-4x slower."""
    if level not in AMP_LEVELS:
        raise ValueError(f"runtime.amp must be one of {AMP_LEVELS}, got {level!r}")
    if level == "auto":
        return "O0" if device == "CPU" else "O2"
    return level


def resolve_sink(sink: Any, device: str) -> bool:
    """``auto`` sinks on Ascend only; an explicit bool is kept (CPU falls back silently)."""
    if sink == "auto":
        return device == "Ascend"
    return bool(sink)


def setup_runtime(cfg: Any, run_dir: str = ".") -> Runtime:
    """Configure MindSpore from the ``runtime`` config group and return a :class:`Runtime`.

    ``cfg`` needs: device, mode, seed, amp, sink, sink_size, save_graphs, jit_level,
    threads, deterministic, distributed. Call before building any network.
    """
    device = resolve_device(cfg.device)
    if cfg.mode not in MODES:
        raise ValueError(f"runtime.mode must be one of {MODES}, got {cfg.mode!r}")
    graphs_dir = os.path.join(run_dir, "graphs") if cfg.save_graphs else None
    changed = configure_process_env(device, graphs_dir)

    import mindspore as ms  # after the environment is prepared

    device_id = int(os.environ.get("DEVICE_ID", "0")) if device != "CPU" else 0
    ms.set_device(device, device_id)
    mode = ms.GRAPH_MODE if cfg.mode == "graph" else ms.PYNATIVE_MODE
    context: dict[str, Any] = {"mode": mode}
    if cfg.jit_level:
        context["jit_config"] = {"jit_level": str(cfg.jit_level)}
    ms.set_context(**context)
    if cfg.deterministic:
        ms.set_deterministic(True)
    if device == "CPU" and cfg.threads:
        ms.device_context.cpu.op_tuning.threads_num(int(cfg.threads))

    rank, world = 0, 1
    if cfg.distributed:
        rank, world = _init_distributed(ms, device, sync_bn=bool(cfg.get("sync_bn", False)))
    # Every rank gets the same seed: identical initial weights are what data parallelism
    # assumes; per-rank data order comes from sharding, not from the seed.
    ms.set_seed(int(cfg.seed))

    rt = Runtime(
        device=device,
        mode=cfg.mode,
        amp_level=resolve_amp(cfg.amp, device),
        sink=resolve_sink(cfg.sink, device),
        sink_size=int(cfg.sink_size),
        loss_scale=float(cfg.loss_scale),
        rank=rank,
        world_size=world,
        device_id=device_id,
        run_dir=run_dir,
    )
    if changed.get(ONEDNN_ISA_VAR):
        log.info("CPU: %s=%s set for fast oneDNN convolutions", ONEDNN_ISA_VAR, ONEDNN_ISA_VALUE)
    return rt


def _init_distributed(ms: Any, device: str, sync_bn: bool) -> tuple[int, int]:
    """Initialise collectives (HCCL on Ascend, NCCL on GPU, mccl on CPU) for data parallel.

    Must run under a launcher (msrun, or a rank table on Ascend); MindSpore's own error
    is replaced by one that names the launch scripts.
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
    ms.reset_auto_parallel_context()
    ms.set_auto_parallel_context(
        parallel_mode=ms.ParallelMode.DATA_PARALLEL,
        gradients_mean=True,
        device_num=world,
    )
    if sync_bn and device != "Ascend":
        log.warning("runtime.sync_bn is only supported on Ascend; using per-rank BatchNorm")
    return rank, world
