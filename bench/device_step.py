"""``bench.device``'s per-rank step benchmark, one process per rank:
``device_step.py [--steps N] [--warmup N] key=value ...``."""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time

import numpy as np

from msdet.common.config import ROOT
from msdet.engine.cli import Run, run_command

if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from msdet.bench.common import cpu_model, peak_rss_mb, synthetic_batch, train_py_step  # noqa: E402
from msdet.bench.device import RESULT_FILE  # noqa: E402

NUM_CLASSES = 80


def main(run: Run, steps: int, warmup: int) -> None:
    cfg = run.cfg
    from msdet.engine.cli import prepare_config
    from msdet.engine.runtime.process import setup_runtime

    prepare_config(cfg)
    rt = setup_runtime(cfg.runtime, run.dir)
    import mindspore as ms

    from msdet.engine.runtime.amp import apply_amp
    from msdet.engine.runtime.memory import release_free_heap
    from msdet.engine.training.optim import yolox_lr_schedule
    from msdet.models.loss import YOLOXLoss
    from msdet.models.yolox import build_model

    batch, (h, w) = int(cfg.train.batch_size), (int(v) for v in cfg.data.img_size)
    net = apply_amp(build_model(cfg.model, NUM_CLASSES, rt.kernels), rt)
    lrs = yolox_lr_schedule(0.01, steps + warmup + 2, 1, 0, 0)
    step = train_py_step(net, YOLOXLoss(NUM_CLASSES, kernels=rt.kernels), lrs, cfg, rt)
    arrays = synthetic_batch(batch, h, NUM_CLASSES, int(cfg.data.max_objects), 5, seed=rt.rank)
    images, targets, mask = (ms.Tensor(a) for a in arrays)
    started = time.perf_counter()
    if rt.mode == "graph":
        step.compile(images, targets, mask)
        release_free_heap()
    compile_s = time.perf_counter() - started
    times = []
    for i in range(warmup + steps):
        started = time.perf_counter()
        step(images, targets, mask)[0].asnumpy()
        if i >= warmup:
            times.append(time.perf_counter() - started)
    step_s = statistics.median(times)
    if not rt.is_main:
        return
    device_peak = ms.runtime.max_memory_allocated() if rt.device != "CPU" else 0
    result = {
        "model": str(cfg.model.name),
        "batch/card": batch,
        "img": f"{h}x{w}",
        "ms/step": round(1000 * step_s, 1),
        "img/s": round(batch * rt.world_size / step_s, 1),
        "compile s": round(compile_s, 1),
        "peak mem GiB": round((device_peak or peak_rss_mb() * 2**20) / 2**30, 2),
        "peak_mem_kind": "device memory pool" if device_peak else "host resident (RSS)",
        "amp": rt.amp_level,
        "machine": {
            "device": rt.device,
            "chip": rt.chip,
            "ranks": rt.world_size,
            "cpu": cpu_model(),
            "cores": os.cpu_count(),
            "mindspore": ms.__version__,
            "python": platform.python_version(),
            "cpu_kernels": list(rt.kernels.names),
        },
        "steps": steps,
        "step_s_all": [round(t, 4) for t in times],
        "max_rel_spread": round((max(times) - min(times)) / step_s, 3),
        "last_loss": float(np.asarray(step(images, targets, mask)[0].asnumpy())),
    }
    with open(os.path.join(rt.run_dir, RESULT_FILE), "w", encoding="utf-8") as f:
        json.dump(result, f, indent=2)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    timing, settings = parser.parse_known_args()
    run_command("bench.device", lambda run: main(run, timing.steps, timing.warmup), argv=settings)
