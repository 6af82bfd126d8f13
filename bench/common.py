"""What every benchmark prints: the machine, the command, medians, peak memory, RESULT."""

from __future__ import annotations

import json
import os
import platform
import resource
import statistics
import sys
import time
from typing import Any

import numpy as np

CONFIG_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "configs")


# The SIMD levels that decide which kernels oneDNN, MindSpore's nnacl, PyTorch and msdet's
# own CPU kernels run (x86 "flags", aarch64 "Features" in /proc/cpuinfo): two CPUs with the
# same model name (an "AMD EPYC" with and without AVX-512) differ here.
SIMD_FLAGS = ("avx512f", "avx512_vnni", "avx512_bf16", "avx2", "fma", "avx", "sse4_2",
              "asimd", "sve", "sve2")  # fmt: skip


def _cpuinfo() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            return f.read()
    except OSError:
        return ""


def cpu_model(cpuinfo: str | None = None) -> str:
    """The CPU model name, with the x86 family/model numbers that tell generations apart
    (from /proc/cpuinfo on Linux), else what platform knows."""
    fields = _first_fields(_cpuinfo() if cpuinfo is None else cpuinfo)
    name = fields.get("model name")
    if not name:
        return platform.processor() or "unknown"
    if "cpu family" in fields and "model" in fields:
        return f"{name} (family {fields['cpu family']} model {fields['model']})"
    return name


def cpu_simd(cpuinfo: str | None = None) -> str:
    """The SIMD levels this CPU has, of :data:`SIMD_FLAGS`, widest first ("" if unknown)."""
    fields = _first_fields(_cpuinfo() if cpuinfo is None else cpuinfo)
    have = set((fields.get("flags") or fields.get("Features") or "").split())
    return " ".join(flag for flag in SIMD_FLAGS if flag in have)


def _first_fields(cpuinfo: str) -> dict[str, str]:
    """``key: value`` pairs of the first processor in a /proc/cpuinfo text."""
    fields: dict[str, str] = {}
    for line in cpuinfo.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() not in fields:
            fields[key.strip()] = value.strip()
    return fields


def machine() -> dict[str, Any]:
    """CPU model and SIMD levels, core count, load average, Python."""
    return {
        "cpu": cpu_model(),
        "simd": cpu_simd(),
        "cores": os.cpu_count(),
        "loadavg_1m": round(os.getloadavg()[0], 2),
        "python": platform.python_version(),
    }


def peak_rss_mb() -> float:
    """Peak resident memory of this process so far, in MiB (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def median(values: list[float]) -> float:
    return float(statistics.median(values))


def timed(fn, steps: int, warmup: int) -> tuple[float, float]:
    """(seconds of the first call, median seconds of ``steps`` calls after ``warmup`` more)."""
    start = time.perf_counter()
    fn()
    first = time.perf_counter() - start
    times = []
    for i in range(warmup + steps):
        start = time.perf_counter()
        fn()
        if i >= warmup:
            times.append(time.perf_counter() - start)
    return first, median(times)


def print_header(title: str) -> None:
    print(f"{title}\nmachine: {json.dumps(machine())}\ncommand: {' '.join(sys.argv)}", flush=True)


def print_result(result: dict[str, Any]) -> None:
    """The last line of every benchmark: ``RESULT {json}``."""
    print("RESULT " + json.dumps(result), flush=True)


def synthetic_batch(
    batch: int, img: int, num_classes: int, max_objects: int, objects: int, seed: int = 0
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Images [B, 3, H, W] (0-255), YOLOX targets [B, M, 5] (class, cx, cy, w, h), mask [B, M].

    The same arrays for msdet and the PyTorch original: ``objects`` boxes per image of
    random size (8 px to half the image).
    """
    rng = np.random.default_rng(seed)
    images = rng.uniform(0, 255, (batch, 3, img, img)).astype(np.float32)
    targets = np.zeros((batch, max_objects, 5), np.float32)
    mask = np.zeros((batch, max_objects), np.float32)
    for b in range(batch):
        w = rng.uniform(8, img / 2, objects)
        h = rng.uniform(8, img / 2, objects)
        targets[b, :objects] = np.stack(
            [
                rng.integers(0, num_classes, objects),
                rng.uniform(w / 2, img - w / 2),
                rng.uniform(h / 2, img - h / 2),
                w,
                h,
            ],
            1,
        )
        mask[b, :objects] = 1
    return images, targets, mask


def train_py_step(net, loss, lrs, cfg, rt, **kwargs):
    """``engine.trainer.build_train_step`` as ``train.py`` calls it: with the non-finite
    check of ``runtime.check_finite`` (its step skips a NaN/Inf update), so that a benchmark
    times the graph a training run compiles. ``kwargs``: further arguments (``img_size``)."""
    from engine.trainer import build_train_step

    skip = bool(cfg.runtime.check_finite)
    return build_train_step(net, loss, lrs, cfg.train, rt, skip_nonfinite=skip, **kwargs)


def read_result(output: str) -> dict[str, Any]:
    """The RESULT json of a benchmark's output."""
    for line in reversed(output.splitlines()):
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT ") :])
    raise ValueError("no RESULT line in the benchmark output:\n" + output[-2000:])
