"""Where the training step's time goes, operator by operator, msdet beside the original.

    python -m msdet.bench.op_profile [--steps 4] [--side both|msdet|pytorch] [key=value ...]

One fresh process per side builds the step ``bench.compare_torch`` times (YOLOX-nano,
batch 8, 320 px, 80 classes, the same synthetic batch), times ``--steps`` steps without a
profiler, then profiles as many: msdet with MindSpore's profiler (host operators,
``cpu_op_detail_info``), the original with ``torch.profiler`` (self time of each ATen
operator). Operators are grouped by what they compute (:data:`CATEGORIES`): the scope
MindSpore records (``Gradients/``, ``loss-YOLOXLoss``, ``dconv``, ``BatchNormSiLU``, ...)
and, for PyTorch, the weight shape (depthwise: one input channel per filter) and the phase
(``record_function`` ranges around the loss, the optimizer and the EMA). Prints ms per step
per group on each side and their ratio; trailing arguments are settings (key=value)
for msdet (e.g. ``runtime.cpu_kernels=native``). The last line is ``RESULT {json}``.
"""

from __future__ import annotations

import argparse
import csv
import glob
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter

from msdet.bench.common import (
    median,
    print_header,
    print_result,
    read_result,
    synthetic_batch,
    train_py_step,
)
from msdet.common.config import load_config

CATEGORIES = (
    "convolutions, dense: forward",
    "convolutions, dense: backward",
    "convolutions, depthwise: forward + backward",
    "BatchNorm + SiLU: forward + backward",
    "max pooling (SPP): forward + backward",
    "loss and SimOTA assignment: forward",
    "optimizer and EMA",
    "everything else",
)
WARMUP = 6  # msdet's steps settle after ~5 (0.60 -> 0.53 s here)
DENSE_FWD, DENSE_BWD, DEPTHWISE, BN_SILU, POOL, LOSS, OPTIM, OTHER = CATEGORIES


def msdet_category(op_type: str, scope: str) -> str:
    """The group of one MindSpore operator, from its type and full scope name."""
    if "DepthwiseConv2d" in scope or (op_type.startswith("Conv2D") and "/dconv-" in scope):
        return DEPTHWISE
    if op_type == "Conv2D":
        return DENSE_FWD
    if op_type.startswith("Conv2DBackprop"):
        return DENSE_BWD
    # msdet's Focus kernel (the stem's phases and convolution; Focus's own Custom) and its
    # 1x1 convolutions' kernel
    if "stem-Focus/Custom" in scope or ("PointwiseConv2d" in scope and "Gradients" not in scope):
        return DENSE_FWD
    if "stem-Focus/Grad_Custom" in scope or "PointwiseConv2d" in scope:
        return DENSE_BWD
    if "BatchNormSiLU" in scope or op_type.startswith("BatchNorm") or "/_SiLU" in scope:
        return BN_SILU
    # MindSpore's pools, or msdet's pools kernel (SPPBottleneck's own Custom, either way)
    if op_type.startswith("MaxPool") or "SPPBottleneck/Custom" in scope:
        return POOL
    if "SPPBottleneck/Grad_Custom" in scope:  # (Grad_Custom/Custom-opN)
        return POOL
    if "optimizer" in scope or "/ema-" in scope:
        return OPTIM
    if "loss-YOLOXLoss" in scope and not scope.startswith("Gradients"):
        return LOSS
    return OTHER


def torch_category(name: str, shapes: list, phase: str | None) -> str:
    """The group of one ATen operator, from its name, input shapes and phase range."""
    if phase in ("optimizer", "ema"):
        return OPTIM
    if phase == "loss":
        return LOSS
    if name in ("aten::mkldnn_convolution", "aten::convolution_backward"):
        weight = shapes[1] if name == "aten::mkldnn_convolution" else shapes[2]
        if len(weight) == 4 and weight[1] == 1:
            return DEPTHWISE
        return DENSE_FWD if name == "aten::mkldnn_convolution" else DENSE_BWD
    if "batch_norm" in name or "silu" in name:
        return BN_SILU
    if "max_pool" in name:
        return POOL
    return OTHER


def _wall(step, steps: int) -> float:
    times = []
    for _ in range(steps):
        started = time.perf_counter()
        step()
        times.append(time.perf_counter() - started)
    return median(times)


def msdet_side(steps: int, overrides: list[str]) -> dict:

    from msdet.engine.runtime.process import setup_runtime

    cfg = load_config(
        "tool", ["runtime=cpu", "data.img_size=320", "data.max_objects=50", *overrides]
    )
    rt = setup_runtime(cfg.runtime, ".")
    import mindspore as ms
    from mindspore.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler

    from msdet.engine.training.schedule import yolox_lr_schedule
    from msdet.models.loss import YOLOXLoss
    from msdet.models.yolox import build_model

    net = build_model(cfg.model, 80, rt.kernels)
    lrs = yolox_lr_schedule(0.01, 4 * steps + 10, 1, 0, 0)
    train_step = train_py_step(net, YOLOXLoss(80, kernels=rt.kernels), lrs, cfg, rt)
    images, targets, mask = (
        ms.Tensor(a) for a in synthetic_batch(8, 320, 80, int(cfg.data.max_objects), 5)
    )

    def step():
        train_step(images, targets, mask)[0].asnumpy()

    for _ in range(WARMUP):
        step()
    wall = _wall(step, steps)
    out = tempfile.mkdtemp(prefix="msdet-profile-")
    prof = profile(
        activities=[ProfilerActivity.CPU],
        schedule=schedule(wait=0, warmup=1, active=steps, repeat=1, skip_first=0),
        on_trace_ready=tensorboard_trace_handler(out),
    )
    profiled = []
    for _ in range(steps + 1):
        started = time.perf_counter()
        step()
        profiled.append(time.perf_counter() - started)
        prof.step()
    prof.stop()
    files = glob.glob(os.path.join(out, "**", "cpu_op_detail_info_*.csv"), recursive=True)
    if not files:
        raise SystemExit(f"MindSpore's profiler wrote no cpu_op_detail_info file under {out}")
    groups: Counter = Counter()
    counts: Counter = Counter()  # operators launched, per group
    types: Counter = Counter()  # and per operator type
    with open(max(files, key=os.path.getmtime), encoding="utf-8") as f:
        for row in csv.DictReader(f):
            group = msdet_category(row["op_type"], row["full_op_name"])
            groups[group] += float(row["op_total_time(ms)"])
            counts[group] += int(row["op_occurrences"])
            types[row["op_type"]] += int(row["op_occurrences"])
    ops = sum(counts.values())
    return {
        "framework": "msdet",
        "cpu_kernels": list(rt.kernels.names),
        "step_s": round(wall, 4),
        "profiled_step_s": round(median(profiled[1:]), 4),
        "ops_per_step": round(ops / steps),
        "ms_per_step": {k: round(groups[k] / steps, 1) for k in CATEGORIES},
        "ops_per_step_by_group": {k: round(counts[k] / steps) for k in CATEGORIES},
        "ops_per_step_by_type": {k: round(n / steps) for k, n in types.most_common(25)},
        "profile_dir": out,
    }


def pytorch_side(steps: int) -> dict:
    from msdet.models.yolox import load_model_config
    from msdet.porting.reference import build_torch_yolox, import_yolox, yolox_optimizer

    import_yolox()
    import torch
    from torch.profiler import ProfilerActivity, profile, record_function
    from yolox.utils import ModelEMA

    model = build_torch_yolox(load_model_config("yolox_nano"), 80)
    images, targets, mask = synthetic_batch(8, 320, 80, 50, 5)
    x, labels = torch.from_numpy(images), torch.from_numpy(targets * mask[..., None])
    model.train()
    opt, ema = yolox_optimizer(model), ModelEMA(model, 0.9998)
    get_losses = model.head.get_losses

    def losses_in_a_range(*args, **kwargs):
        with record_function("loss"):
            return get_losses(*args, **kwargs)

    model.head.get_losses = losses_in_a_range

    def step():
        loss = model(x, labels)["total_loss"]
        opt.zero_grad()
        loss.backward()
        with record_function("optimizer"):
            opt.step()
        with record_function("ema"):
            ema.update(model)

    for _ in range(WARMUP):
        step()
    wall = _wall(step, steps)
    profiled = []
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        for _ in range(steps):
            started = time.perf_counter()
            step()
            profiled.append(time.perf_counter() - started)
    phases = ("loss", "optimizer", "ema")
    groups: Counter = Counter()
    for event in prof.events():
        if event.name in phases:
            continue
        phase, parent = None, event.cpu_parent
        while parent is not None and phase is None:
            phase = parent.name if parent.name in phases else None
            parent = parent.cpu_parent
        groups[torch_category(event.name, event.input_shapes or [], phase)] += (
            event.self_cpu_time_total / 1000.0
        )
    return {
        "framework": "pytorch",
        "threads": torch.get_num_threads(),
        "step_s": round(wall, 4),
        "profiled_step_s": round(median(profiled), 4),
        "ms_per_step": {k: round(groups[k] / steps, 1) for k in CATEGORIES},
    }


def table(results: dict) -> str:
    torch_ms, msdet_ms = results["pytorch"]["ms_per_step"], results["msdet"]["ms_per_step"]
    lines = [f"{'ms per step':<46} {'original':>9} {'msdet':>9} {'msdet/orig':>10}"]
    for name in (*CATEGORIES, "sum of operators"):
        if name == "sum of operators":
            a, b = sum(torch_ms.values()), sum(msdet_ms.values())
        else:
            a, b = torch_ms[name], msdet_ms[name]
        lines.append(f"{name:<46} {a:>9.1f} {b:>9.1f} {b / a if a else float('nan'):>10.2f}")
    for key, label in (("profiled_step_s", "step, profiled"), ("step_s", "step, no profiler")):
        a, b = results["pytorch"][key] * 1e3, results["msdet"][key] * 1e3
        lines.append(f"{label + ' (wall)':<46} {a:>9.1f} {b:>9.1f} {b / a:>10.2f}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--side", choices=("msdet", "pytorch", "both"), default="both")
    args, overrides = parser.parse_known_args(argv)
    if args.side != "both":
        print_header(f"operator profile: {args.side}")
        side = msdet_side if args.side == "msdet" else pytorch_side
        res = side(args.steps, overrides) if args.side == "msdet" else side(args.steps)
        print_result(res)
        return res
    print_header("operator profile: msdet and the PyTorch original")
    results = {}
    for side in ("pytorch", "msdet"):
        cmd = [sys.executable, "-m", "msdet.bench.op_profile", "--side", side]
        cmd += ["--steps", str(args.steps), *overrides]
        out = subprocess.run(cmd, capture_output=True, text=True)
        if out.returncode != 0:
            raise RuntimeError(f"{side} failed:\n{out.stdout[-2000:]}\n{out.stderr[-2000:]}")
        results[side] = read_result(out.stdout)
    print(table(results), flush=True)
    print_result(results)
    return results


if __name__ == "__main__":
    main()
