"""``bench.device``'s per-rank step benchmark, one process per rank:
``device_step.py [--steps N] [--warmup N] [--data loader|synthetic] key=value ...``.

The steps run as a training run of ``runtime.loop`` runs them (its plan and loop object:
``engine.training.plan``, ``engine.training.loops``, so its mode and each graph's backend):
from the host loop, one batch fetched per step (no data sinking), or, where MindSpore really
sinks data (``Runtime.sink_effective``: Ascend), in sinks of ``--steps`` steps through
``Model.train`` or, under ``runtime.loop=jit``, ``mindspore.data_sink``. Either way the time
is wall time over the timed steps, the data feeding included, synchronised once at the end
(as a run's step-time log sees it)."""

from __future__ import annotations

import argparse
import json
import os
import platform
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


def image_size(cfg) -> tuple[int, int]:
    """``data.img_size`` as (height, width); a single number is a square."""
    size = cfg.data.img_size
    values = [int(size)] * 2 if isinstance(size, (int, float)) else [int(v) for v in size]
    if len(values) != 2:
        raise ValueError(f"data.img_size must be [height, width], got {list(values)}")
    return values[0], values[1]


def synthetic_batches(cfg, batch: int, count: int, seed: int):
    """A dataset of ``count`` copies of one synthetic batch (uint8 HWC images, as the
    training pipeline gives them) at ``data.img_size``, height and width as given."""
    import mindspore.dataset as ds

    h, w = image_size(cfg)
    images, targets, mask = synthetic_batch(batch, h, NUM_CLASSES, int(cfg.data.max_objects), 5,
                                            seed=seed, width=w)  # fmt: skip
    images = np.ascontiguousarray(images.transpose(0, 2, 3, 1).clip(0, 255).astype(np.uint8))
    rows = [(images, targets, mask)] * count
    return ds.GeneratorDataset(lambda: iter(rows), ["images", "targets", "mask"], shuffle=False)


def loader_batches(cfg, rt, batch: int, count: int):
    """The first ``count`` batches of msdet's training pipeline on ``cfg.data`` (this rank's
    shard), the generated shapes set unless another is configured."""
    from msdet.data.build import build_sources
    from msdet.data.pipeline import build_train_dataset

    train, _ = build_sources(cfg.data)
    needed = count * batch * rt.world_size
    if len(train) < needed:
        raise ValueError(f"{train.ann_file}: {len(train)} images, the timed steps need {needed}: "
                         "raise data.num_train or lower --steps")  # fmt: skip
    dataset = build_train_dataset(cfg.data, train, batch, 300, 15, int(cfg.runtime.seed),
                                  rt.rank, rt.world_size)  # fmt: skip
    return dataset.take(count)


def host_loop(step, dataset, steps: int, warmup: int) -> tuple[float, float, list[float]]:
    """(compile seconds, seconds per step, each timed step's seconds) of the host loop."""
    iterator = dataset.create_tuple_iterator(num_epochs=1)
    started = time.perf_counter()
    step(*next(iterator))[0].asnumpy()  # compiles
    first = time.perf_counter() - started
    for _ in range(warmup):
        step(*next(iterator))[0].asnumpy()
    times, last = [], None
    started = time.perf_counter()
    for _ in range(steps):
        begun = time.perf_counter()
        last = step(*next(iterator))[0]
        times.append(time.perf_counter() - begun)
    last.asnumpy()
    total = time.perf_counter() - started
    return max(first - total / steps, 0.0), total / steps, times


def sunk_loop(step, dataset, steps: int, jit_backend=None) -> tuple[float, float, list[float]]:
    """(compile seconds, seconds per step, each sink's seconds): two sinks of ``steps``
    steps through ``Model.train``, or through ``mindspore.data_sink`` with ``jit_backend``
    (the jit loop's), the first of which compiles."""
    from mindspore.train import Callback, Model

    ends: list[float] = []
    started = time.perf_counter()
    if jit_backend is not None:
        from msdet.engine.training.jit_loop import device_sink

        sink = device_sink(step, dataset, steps, jit_backend)
        for _ in range(2):
            sink()[0].asnumpy()
            ends.append(time.perf_counter())
    else:

        class SinkEnds(Callback):
            def on_train_epoch_end(self, run_context):
                ends.append(time.perf_counter())

        Model(step).train(2, dataset, callbacks=[SinkEnds()], dataset_sink_mode=True,
                          sink_size=steps)  # fmt: skip
    first, second = ends[0] - started, ends[1] - ends[0]
    return max(first - second, 0.0), second / steps, [first, second]


def main(run: Run, steps: int, warmup: int, data: str) -> None:
    cfg = run.cfg
    from msdet.engine.runtime.process import setup_runtime

    rt = setup_runtime(cfg.runtime, run.dir)
    import mindspore as ms

    from msdet.engine.runtime.amp import apply_amp
    from msdet.engine.runtime.memory import release_free_heap
    from msdet.engine.training.jit_loop import compiled_step
    from msdet.engine.training.plan import DataSummary, Loop, plan_run
    from msdet.engine.training.schedule import yolox_lr_schedule
    from msdet.engine.training.trainer import build_loop
    from msdet.models.loss import YOLOXLoss
    from msdet.models.yolox import build_model

    batch, (h, w) = int(cfg.train.batch_size), image_size(cfg)
    sinking = rt.sink_effective
    count = 2 * steps if sinking else 1 + warmup + steps
    classes = tuple(str(i) for i in range(NUM_CLASSES))
    plan = plan_run(cfg, rt, DataSummary("bench", count * batch * rt.world_size, 1, classes))
    loop = build_loop(plan, rt)  # the loop's mode, context and gradient reducer
    net = apply_amp(build_model(cfg.model, NUM_CLASSES, rt.kernels), rt)
    lrs = yolox_lr_schedule(0.01, count + 2, 1, 0, 0)
    step = train_py_step(net, YOLOXLoss(NUM_CLASSES, kernels=rt.kernels), lrs, cfg, rt,
                         grad_reducer=loop.gradient_reducer)  # fmt: skip
    jit = plan.loop is Loop.JIT
    if data == "synthetic":
        dataset = synthetic_batches(cfg, batch, count, rt.rank)
    else:
        dataset = loader_batches(cfg, rt, batch, count)
    if sinking:
        compile_s, step_s, times = sunk_loop(step, dataset, steps,
                                             plan.backends["sink"] if jit else None)  # fmt: skip
    else:
        run_step = compiled_step(step, plan.backends["train"]) if jit else step
        compile_s, step_s, times = host_loop(run_step, dataset, steps, warmup)
    backend = plan.backends["sink" if sinking else "train"]
    release_free_heap()
    if not rt.is_main:
        return
    device_peak = ms.runtime.max_memory_allocated() if rt.device != "CPU" else 0
    result = {
        "model": str(cfg.model.name),
        "batch/card": batch,
        "img": f"{h}x{w}",
        "data": data,
        "ms/step": round(1000 * step_s, 1),
        "img/s": round(batch * rt.world_size / step_s, 1),
        "compile s": round(compile_s, 1),
        "peak mem GiB": round((device_peak or peak_rss_mb() * 2**20) / 2**30, 2),
        "peak_mem_kind": "device memory pool" if device_peak else "host resident (RSS)",
        "run": {
            "loop": plan.loop.value,
            "jit_level": backend.jit_level,
            "backend": backend.runs,
            "amp": rt.amp_level,
            "sink": sinking,
            "loss_scale": rt.loss_scale if rt.amp_level != "O0" else 1.0,
            "mode": plan.mode,
        },
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
        "timed_s": [round(t, 4) for t in times],
    }
    with open(os.path.join(rt.run_dir, RESULT_FILE), "w", encoding="utf-8") as f:
        json.dump(result, f, indent=2)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--data", default="loader", choices=("loader", "synthetic"))
    timing, settings = parser.parse_known_args()
    run_command(
        "bench.device",
        lambda run: main(run, timing.steps, timing.warmup, timing.data),
        argv=settings,
    )
