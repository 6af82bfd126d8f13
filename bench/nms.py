"""Benchmark: NMS on MindSpore (graph mode, CPU) next to a numpy greedy NMS.

    python -m msdet.bench.nms [--sizes 100 1000 5000] [--repeats 9] [--iou 0.65]

For each N it times, as the median of ``--repeats`` runs after a warm-up (graph compile):
``ops.NMSWithMask`` alone on [N, 5] score-sorted boxes, the whole :class:`ops.nms.BatchedNMS`
on [1, N, 85] predictions (threshold, top-k <= 2864, class offsets, NMS, top max_det), and
:func:`ops.nms.greedy_nms` in numpy on the same boxes. The last line is ``RESULT {json}``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable

from msdet.bench.common import cpu_model
from msdet.engine.runtime.cpu import configure_process_env

NUM_CLASSES = 80
IMG = 640.0


def median_ms(fn: Callable[[], object], repeats: int) -> float:
    """Median wall time of ``fn()`` in milliseconds, after one untimed warm-up call."""
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1000.0)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[100, 1000, 5000])
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--iou", type=float, default=0.65)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    configure_process_env("CPU")  # before MindSpore loads
    import mindspore as ms
    import numpy as np
    from mindspore import nn, ops

    from msdet.ops.nms import ASCEND_MAX_NMS_BOXES, BatchedNMS, greedy_nms

    ms.set_device("CPU")
    ms.set_context(mode=ms.GRAPH_MODE)

    class RawNMS(nn.Cell):
        def __init__(self, iou: float):
            super().__init__()
            self.nms = ops.NMSWithMask(iou)

        def construct(self, boxes):
            return self.nms(boxes)[2]

    print(
        f"machine: {cpu_model()}, {os.cpu_count()} cores, {platform.system()} {platform.release()}"
    )
    print(
        f"python {platform.python_version()}, mindspore {ms.__version__}, numpy {np.__version__}, "
        f"ONEDNN_MAX_CPU_ISA={os.environ.get('ONEDNN_MAX_CPU_ISA', '')}"
    )
    print(
        "command: " + " ".join([sys.executable, "-m", "msdet.bench.nms", *(argv or sys.argv[1:])])
    )
    print(
        f"{'N':>6} {'NMSWithMask':>12} {'BatchedNMS':>11} {'numpy greedy':>13} {'kept':>6}  (ms, median of {args.repeats})"
    )

    rng = np.random.default_rng(args.seed)

    def time_size(n: int) -> dict:
        centers = rng.uniform(0, IMG, (n, 2))
        sizes = rng.uniform(8, IMG / 6, (n, 2))
        scores = rng.uniform(0, 1, n)
        order = np.argsort(-scores)
        boxes = np.concatenate((centers - sizes / 2, centers + sizes / 2), 1)[order].astype(
            np.float32
        )
        scores = scores[order].astype(np.float32)
        raw = RawNMS(args.iou)
        raw_input = ms.Tensor(np.concatenate((boxes, scores[:, None]), 1))

        preds = np.zeros((1, n, 5 + NUM_CLASSES), np.float32)
        preds[0, :, :2] = centers
        preds[0, :, 2:4] = sizes
        preds[0, :, 4] = rng.uniform(0, 1, n)
        preds[0, :, 5:] = rng.uniform(0, 1, (n, NUM_CLASSES))
        topk = min(n, ASCEND_MAX_NMS_BOXES)
        batched = BatchedNMS(NUM_CLASSES, 0.01, args.iou, pre_nms_topk=topk, max_det=100)
        preds_t = ms.Tensor(preds)

        raw_ms = median_ms(lambda: raw(raw_input).asnumpy(), args.repeats)
        batched_ms = median_ms(lambda: batched(preds_t)[1].asnumpy(), args.repeats)
        numpy_ms = median_ms(lambda: greedy_nms(boxes, scores, args.iou), args.repeats)
        kept = int(raw(raw_input).asnumpy().sum())
        kept_numpy = len(greedy_nms(boxes, scores, args.iou))
        if kept != kept_numpy:
            print(f"warning: N={n}: NMSWithMask kept {kept} boxes, numpy greedy NMS {kept_numpy}")
        print(f"{n:>6} {raw_ms:>12.2f} {batched_ms:>11.2f} {numpy_ms:>13.2f} {kept:>6}")
        return {
            "n": n,
            "nms_with_mask_ms": round(raw_ms, 3),
            "batched_nms_ms": round(batched_ms, 3),
            "batched_nms_topk": topk,
            "numpy_greedy_ms": round(numpy_ms, 3),
            "kept": kept,
        }

    rows = [time_size(n) for n in args.sizes]

    result = {
        "benchmark": "nms",
        "machine": {"cpu": cpu_model(), "cores": os.cpu_count()},
        "mindspore": ms.__version__,
        "mode": "graph",
        "device": "CPU",
        "iou": args.iou,
        "repeats": args.repeats,
        "results": rows,
    }
    print("RESULT " + json.dumps(result))
    return result


if __name__ == "__main__":
    main()
