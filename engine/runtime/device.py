"""Where msdet runs, decided once: the concrete device, the AMP level and data sinking it
gets. The sides of each device live beside this module: ``cpu`` (process environment,
threads, msdet's CPU kernels), ``ascend`` (chip profile, precision, jit level, NMS policy)
and ``distributed`` (ranks); ``engine.runtime.process.setup_runtime`` applies them in order
and hands the rest of msdet a :class:`engine.runtime.process.Runtime`, so nothing else asks
the hardware.

Nothing here imports MindSpore at import time: the process environment has to be prepared
*before* MindSpore loads its CPU kernels (``engine.runtime.cpu.configure_process_env``).
"""

from __future__ import annotations

import glob
import os
from typing import Any

DEVICES = ("auto", "CPU", "GPU", "Ascend")

AMP_LEVELS = ("auto", "O0", "O1", "O2", "O3")

ASCEND_DEVICE_FILES = ("/dev/davinci_manager", "/dev/davinci0")


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


def device_id(device: str) -> int:
    """The card this process drives (``DEVICE_ID``, set per rank by the launchers)."""
    return int(os.environ.get("DEVICE_ID", "0")) if device != "CPU" else 0
