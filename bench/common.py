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

from msdet.common.config import load_config

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
    batch: int,
    img: int,
    num_classes: int,
    max_objects: int,
    objects: int,
    seed: int = 0,
    width: int | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Images [B, 3, H, W] (0-255), YOLOX targets [B, M, 5] (class, cx, cy, w, h), mask [B, M].

    The same arrays for msdet and the PyTorch original: ``objects`` boxes per image of
    random size (8 px to half the image side). ``img`` is the height and, unless ``width``
    is given, the width.
    """
    height, width = img, width or img
    rng = np.random.default_rng(seed)
    images = rng.uniform(0, 255, (batch, 3, height, width)).astype(np.float32)
    targets = np.zeros((batch, max_objects, 5), np.float32)
    mask = np.zeros((batch, max_objects), np.float32)
    for b in range(batch):
        w = rng.uniform(8, width / 2, objects)
        h = rng.uniform(8, height / 2, objects)
        targets[b, :objects] = np.stack(
            [
                rng.integers(0, num_classes, objects),
                rng.uniform(w / 2, width - w / 2),
                rng.uniform(h / 2, height - h / 2),
                w,
                h,
            ],
            1,
        )
        mask[b, :objects] = 1
    return images, targets, mask


def train_py_step(net, loss, lrs, cfg, rt, **kwargs):
    """``engine.training.step.build_train_step`` as ``train.py`` calls it: with the non-finite
    check of ``runtime.check_finite`` (its step skips a NaN/Inf update), so that a benchmark
    times the graph a training run compiles. ``kwargs``: further arguments (``img_size``)."""
    from msdet.engine.training.step import build_train_step

    skip = bool(cfg.runtime.check_finite)
    return build_train_step(net, loss, lrs, cfg.train, rt, skip_nonfinite=skip, **kwargs)


def nano_train_steps(variants: dict[str, tuple[str, ...]], steps: int, threads: int):
    """YOLOX-nano's training step (batch 8, 320 px, 80 classes) built once per variant in
    this process, each with the msdet kernels it names (``()``: MindSpore's operators only),
    and run once (graph compilation). Returns ``(library, steps by name, first step's
    seconds by name, the batch's tensors)``; ``steps`` sizes the learning-rate schedule."""
    import time

    from msdet.engine.runtime.process import setup_runtime

    cfg = load_config(
        "tool", ["runtime=cpu", f"runtime.threads={threads}", "runtime.cpu_kernels=msdet"]
    )
    rt = setup_runtime(cfg.runtime, ".")
    if not rt.kernels:
        raise SystemExit("msdet's kernels are not available here (no compiler?)")
    import dataclasses

    import mindspore as ms

    from msdet.engine.training.schedule import yolox_lr_schedule
    from msdet.models.loss import YOLOXLoss
    from msdet.models.yolox import build_model

    num_classes = 80
    batch = synthetic_batch(8, 320, num_classes, int(cfg.data.max_objects), 5)
    inputs = tuple(ms.Tensor(a) for a in batch)
    train_steps, first = {}, {}
    for name, names in variants.items():
        variant = dataclasses.replace(rt, kernels=rt.kernels.only(*names))
        ms.set_seed(0)
        net = build_model(cfg.model, num_classes, variant.kernels)
        lrs = yolox_lr_schedule(0.01, 4 * steps + 10, 1, 0, 0)
        loss = YOLOXLoss(num_classes, kernels=variant.kernels)
        train_steps[name] = train_py_step(net, loss, lrs, cfg, variant)
        start = time.perf_counter()
        train_steps[name](*inputs)[0].asnumpy()
        first[name] = round(time.perf_counter() - start, 2)
    return rt.kernels.library, train_steps, first, inputs


def alternate_steps(train_steps: dict, inputs: tuple, steps: int, before=None) -> dict:
    """Median seconds per step of each of ``train_steps``, the variants taking turns for
    ``steps`` rounds after one warm-up round, in reversed order every other round (a fixed
    order favours the later variants). ``before(name)``, if given, runs before each step."""
    import time

    names = list(train_steps)
    times: dict[str, list[float]] = {name: [] for name in names}
    for i in range(steps + 1):
        for name in names if i % 2 == 0 else names[::-1]:
            if before is not None:
                before(name)
            start = time.perf_counter()
            train_steps[name](*inputs)[0].asnumpy()
            if i > 0:
                times[name].append(time.perf_counter() - start)
    return {name: round(median(t), 3) for name, t in times.items()}


def kernel_bench_parser(doc: str, rounds: int):
    """The command line shared by the per-kernel benchmarks (``bench.depthwise``,
    ``bench.upsample``): batch, rounds, steps per timing, threads, ``--train-step``."""
    import argparse

    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=rounds)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--train-step", action="store_true", help="whole training step instead")
    return parser


def start_kernel_bench(title: str, threads: int) -> str:
    """Set up a per-kernel benchmark's process (CPU environment, graph mode, ``threads`` for
    PyTorch and msdet's kernels), print its header, and return the kernel library."""
    from msdet.engine.runtime.cpu import configure_process_env

    configure_process_env("CPU")
    import mindspore as ms
    import torch

    from msdet.ops.cpu_kernels import build_kernel_library, set_kernel_threads

    ms.set_context(mode=ms.GRAPH_MODE)
    torch.set_num_threads(threads)
    print_header(title)
    library = build_kernel_library()
    if library is None:
        raise SystemExit("no C++ compiler: the kernel cannot be built here")
    set_kernel_threads(library, threads)
    return library


def print_step_comparison(
    result: dict[str, float], baseline: str, candidate: str, first: dict, steps: int
) -> None:
    """The whole-step comparison's last lines: the medians, ``baseline / candidate`` as the
    speed-up, the first steps (compilation), the peak RSS."""
    ratio = round(result[baseline] / result[candidate], 3)
    print(f"step s: {result}  speed-up {ratio}x", flush=True)
    print_result(
        {
            "step_s": result,
            "speedup": ratio,
            "first_step_s": first,
            "steps": steps,
            "peak_rss_mb": round(peak_rss_mb(), 1),
        }
    )


def read_result(output: str) -> dict[str, Any]:
    """The RESULT json of a benchmark's output."""
    for line in reversed(output.splitlines()):
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT ") :])
    raise ValueError("no RESULT line in the benchmark output:\n" + output[-2000:])
