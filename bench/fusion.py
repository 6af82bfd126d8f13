"""Graph kernel fusion (``runtime.fusion``): step time and losses of off / safe / all.

    python -m msdet.bench.fusion [--rounds 2] [--steps 8] [--variants off,safe,all] [key=value ...]

Each round runs, in fresh processes (the jit level is process-wide) and one after the
other, YOLOX-nano's training step (batch 8, 320 px, 80 classes, the synthetic batch of
``bench.compare_torch``; key=value overrides change the model, batch or size) under each
variant from the same initial weights: the losses of
the first ``--steps + 1`` steps and the median step time after the first. ``off`` is the
reference: the report gives each variant's speed-up and how far its losses are from
``off``'s at each step. The processes run in a temporary folder, as AKG (MindSpore's CPU
fusion compiler) writes a log file into the working folder. The last line is
``RESULT {json}``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

from msdet.bench.common import median, print_header, print_result, read_result, train_py_step
from msdet.common.config import ROOT, load_config


def one_variant(
    fusion: str, steps: int, overrides: list[str], update_file: str | None = None
) -> dict:
    """One variant in this process. ``update_file``: where to save the first step's update
    of the trainable weights (after minus before, float64, all parameters in one vector)."""

    from msdet.bench.common import synthetic_batch
    from msdet.engine.runtime.process import setup_runtime

    cfg = load_config(
        "tool",
        [
            "runtime=cpu",
            f"runtime.fusion={fusion}",
            "data.img_size=320",
            "data.max_objects=50",
            *overrides,
        ],
    )
    rt = setup_runtime(cfg.runtime, ".")
    import mindspore as ms

    from msdet.engine.training.schedule import yolox_lr_schedule
    from msdet.models.loss import YOLOXLoss
    from msdet.models.yolox import build_model

    ms.set_seed(0)
    net = build_model(cfg.model, 80, rt.kernels)
    lrs = yolox_lr_schedule(0.01, steps + 10, 1, 0, 0)
    step = train_py_step(net, YOLOXLoss(80, kernels=rt.kernels), lrs, cfg, rt)
    batch, size, max_objects = (
        int(cfg.train.batch_size),
        int(cfg.data.img_size[0]),
        int(cfg.data.max_objects),
    )
    arrays = synthetic_batch(batch, size, 80, max_objects, min(5, max_objects))
    images, targets, mask = (ms.Tensor(a) for a in arrays)

    def weights() -> np.ndarray:
        return np.concatenate(
            [p.asnumpy().astype(np.float64).ravel() for p in net.trainable_params()]
        )

    before = weights() if update_file else None
    losses, times = [], []
    for i in range(steps + 1):
        started = time.perf_counter()
        losses.append(float(step(images, targets, mask)[0].asnumpy()))
        times.append(time.perf_counter() - started)
        if i == 0 and update_file:
            np.save(update_file, weights() - before)
    return {
        "fusion": fusion,
        "flags": os.environ.get("MS_DEV_GRAPH_KERNEL_FLAGS"),
        "first_step_s": round(times[0], 1),
        "step_s": round(median(times[1:]), 4),
        "losses": losses,
    }


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--variants", default="off,safe,all")
    parser.add_argument("--only", help=argparse.SUPPRESS)  # one variant, in this process
    parser.add_argument("--update-file", help=argparse.SUPPRESS)  # with --only: see one_variant
    args, overrides = parser.parse_known_args(argv)
    if args.only:
        result = one_variant(args.only, args.steps, overrides, args.update_file)
        print_result(result)
        return result
    print_header("graph kernel fusion: off / safe / all")
    variants = args.variants.split(",")
    runs: dict[str, list[dict]] = {v: [] for v in variants}
    env = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}
    with tempfile.TemporaryDirectory(prefix="msdet-fusion-") as work:
        for r in range(args.rounds):
            for v in variants:
                cmd = [
                    sys.executable,
                    "-m",
                    "msdet.bench.fusion",
                    "--only",
                    v,
                    "--steps",
                    str(args.steps),
                ]
                out = subprocess.run(
                    [*cmd, *overrides], cwd=work, env=env, capture_output=True, text=True
                )
                if out.returncode != 0:
                    raise RuntimeError(f"{v} failed:\n{out.stdout[-2000:]}\n{out.stderr[-2000:]}")
                res = read_result(out.stdout)
                runs[v].append(res)
                print(
                    f"round {r + 1} {v:<5} first step {res['first_step_s']} s  step {res['step_s']} s"
                    f"  losses {res['losses'][:4]}"
                )
    reference = runs[variants[0]][0]["losses"]
    summary = {}
    for v in variants:
        step = median([x["step_s"] for x in runs[v]])
        diffs = [abs(a - b) / abs(b) for a, b in zip(runs[v][0]["losses"], reference)]
        summary[v] = {
            "step_s": round(step, 4),
            "speedup_vs_" + variants[0]: round(
                median([x["step_s"] for x in runs[variants[0]]]) / step, 3
            ),
            "loss_rel_diff_per_step": [float(f"{d:.2e}") for d in diffs],
            "flags": runs[v][0]["flags"],
        }
        print(f"{v:<5} {json.dumps(summary[v])}")
    result = {"rounds": args.rounds, "steps": args.steps, "variants": summary, "runs": runs}
    print_result(result)
    return result


if __name__ == "__main__":
    main()
