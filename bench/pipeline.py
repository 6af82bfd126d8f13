"""Throughput of the full training data pipeline (samples/s), by worker configuration.

    python -m msdet.bench.pipeline [--img-size 416] [--batch 8] [--batches 30] [--repeats 3]

Shapes data (generated into the cache on first use, not timed), mosaic + mixup + affine
on every sample (mosaic_prob = mixup_prob = 1), 1 worker, 2 worker threads and 2 worker
processes. Each setting is measured ``--repeats`` times and the median is reported (the
load average is printed too: other processes on the machine lower the numbers). Prints the
machine, the command and a final ``RESULT {json}`` line.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time

from msdet.common.config import load_config
from msdet.engine.runtime.cpu import configure_process_env

configure_process_env("CPU")  # before MindSpore loads (imported by data.pipeline)


from msdet.bench.common import cpu_model  # noqa: E402
from msdet.data.build import build_sources  # noqa: E402
from msdet.data.pipeline import build_train_dataset  # noqa: E402

WORKER_SETTINGS = (("1 worker", 1, False), ("2 threads", 2, False), ("2 processes", 2, True))


def measure(data_cfg, source, batch: int, batches: int, warmup: int) -> float:
    """Samples per second over ``batches`` batches after ``warmup`` batches."""
    dataset = build_train_dataset(data_cfg, source, batch, epochs=300, no_aug_epochs=15, seed=0)
    iterator = dataset.create_tuple_iterator(num_epochs=1, output_numpy=True)
    for _ in range(warmup):
        next(iterator)
    start = time.perf_counter()
    for _ in range(batches):
        next(iterator)
    elapsed = time.perf_counter() - start
    iterator.stop()
    return batches * batch / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--img-size", type=int, default=416)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--batches", type=int, default=30, help="timed batches per setting")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=3, help="measurements per setting")
    args = parser.parse_args()

    size = args.img_size
    overrides = [
        "data=shapes",
        f"data.img_size=[{size},{size}]",
        "data.aug.mosaic_prob=1.0",
        "data.aug.mixup_prob=1.0",
    ]
    cfg = load_config("tool", overrides)
    train, _ = build_sources(cfg.data)

    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"machine: {cpu_model()}, {os.cpu_count()} cores, {platform.platform()}")
    print(f"load average (1 min) before measuring: {load:.2f}")
    print("command: " + " ".join(["python -m msdet.bench.pipeline", *sys.argv[1:]]))
    print(f"data: {train}; {size}x{size}, mosaic+mixup+affine on every sample, batch {args.batch}")
    results = {}
    for name, workers, processes in WORKER_SETTINGS:
        cfg.data.num_workers = workers
        cfg.data.python_multiprocessing = processes
        rates = [
            measure(cfg.data, train, args.batch, args.batches, args.warmup)
            for _ in range(args.repeats)
        ]
        results[name] = round(statistics.median(rates), 1)
        runs = ", ".join(f"{r:.1f}" for r in rates)
        print(f"{name:>12}: {results[name]:7.1f} samples/s (median of {runs})")
    print(
        "RESULT "
        + json.dumps(
            {
                "benchmark": "train_pipeline",
                "img_size": size,
                "batch": args.batch,
                "timed_batches": args.batches,
                "repeats": args.repeats,
                "samples_per_s": results,
                "cpu": cpu_model(),
                "cores": os.cpu_count(),
                "load_avg_1min": round(load, 2),
            }
        )
    )


if __name__ == "__main__":
    main()
