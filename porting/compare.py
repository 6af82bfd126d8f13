"""Module-by-module comparison of msdet's YOLOX with the PyTorch original.

    python -m msdet.porting.compare --model yolox_nano --src yolox_nano.pth [--image IMG] [--size 416]
        [--atol 1e-4 --rtol 1e-4] [--mode graph|pynative] [--train-step] [--json OUT.json]
    python -m msdet.porting.compare --model yolox_nano --random-init     # no checkpoint needed

Each major module (stem, dark2..dark5, every neck block, every head branch per level,
the decoded output) is run on *the same input* in both frameworks: the input PyTorch's
module received is fed to the matching MindSpore cell. Differences then measure that
module alone, so a wrong weight mapping or a mis-ported layer shows up exactly where it
is, instead of being smeared over everything downstream by float32 rounding (which grows
through a deep network: PyTorch's own float32 output differs from its float64 output by
~1e-3 on a random-init YOLOX-nano).

After the modules come rows that run more than one module: the whole network in the
chosen mode, and the detections after NMS (msdet's ``BatchedNMS`` and YOLOX's
``postprocess`` on the same decoded predictions). ``--train-step`` adds one training
step (see :func:`compare_train_step`): every loss term, the number of foreground anchors,
the loss gradient and each module's parameter gradients, each fed the original's values
as the forward rows are, and whole-step gradient norms per module and per YOLOX optimizer
group (BN weights / conv weights / biases).

Per-module rows (forward and backward) always run in PyNative mode: in graph mode every
one of the ~30 sub-cells would be compiled separately (13.5 s instead of 4.2 s for nano
at 416 px on a 2-core CPU). Rows that run the whole network, NMS and the whole training
step use ``--mode``.

Rows that run the whole network accumulate float32 rounding, so they are compared with
the original run in float64: such a row passes when it is within atol/rtol of that
reference, or no further from it than ``ROUNDING_FACTOR`` times PyTorch's own float32
result. Exit status: 0 all rows pass, 1 a row fails (the first one is named), 2 the
comparison could not run (missing PyTorch/YOLOX, unreadable checkpoint or image).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

from msdet.porting.detections import compare_detections
from msdet.porting.forward import compare_modules, compare_network_output
from msdet.porting.inputs import ComparisonSetupError, build_pair, load_input, train_batch
from msdet.porting.report import ModuleDiff, build_report, first_failure, format_table, json_safe
from msdet.porting.training import compare_train_step

DEFAULT_SIZE = 416


def run_comparison(
    torch_model,
    ms_model,
    x: np.ndarray,
    mode: str,
    atol: float,
    rtol: float,
    train_step: bool = False,
    grad_rtol: float = 1e-3,
    step_rtol: float = 5e-2,
    use_l1: bool = False,
) -> list[ModuleDiff]:
    """All rows: modules (PyNative), whole network and NMS (``mode``), optionally the
    training step (:func:`compare_train_step`). Restores MindSpore's mode afterwards."""
    import mindspore as ms

    previous = ms.get_context("mode")
    try:
        ms.set_context(mode=ms.PYNATIVE_MODE)
        rows = compare_modules(torch_model, ms_model, x, atol, rtol)
        ms.set_context(mode=ms.GRAPH_MODE if mode == "graph" else ms.PYNATIVE_MODE)
        row, decoded = compare_network_output(
            torch_model, ms_model, x, atol, rtol, f"network output ({mode})"
        )
        rows.append(row)
        rows.append(
            compare_detections(
                decoded, ms_model.num_classes, atol, rtol, f"detections after NMS ({mode})"
            )
        )
        if train_step:
            images, targets, mask = train_batch(x, ms_model.num_classes)
            rows += compare_train_step(
                torch_model,
                ms_model,
                images,
                targets,
                mask,
                atol,
                rtol,
                grad_rtol,
                step_rtol,
                use_l1,
                mode,
            )
    finally:
        ms.set_context(mode=previous)
    return rows


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m msdet.porting.compare",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--model", required=True, help="yolox_nano ... yolox_x, yolox_darknet53")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--src", help="PyTorch YOLOX checkpoint (.pth)")
    source.add_argument(
        "--random-init",
        action="store_true",
        help="no checkpoint: random weights, BatchNorm statistics calibrated on the input",
    )
    parser.add_argument("--image", help="an image file; default: a synthetic picture")
    parser.add_argument("--size", type=int, default=DEFAULT_SIZE, help="input side, px")
    parser.add_argument("--num-classes", type=int, help="default: from the checkpoint (80)")
    parser.add_argument("--atol", type=float, default=1e-4)
    parser.add_argument("--rtol", type=float, default=1e-4)
    parser.add_argument("--mode", choices=("graph", "pynative"), default="graph")
    parser.add_argument("--train-step", action="store_true", help="also compare a training step")
    parser.add_argument(
        "--grad-rtol",
        type=float,
        default=1e-3,
        help="train step: |g - g_orig|/|g_orig| of a module fed the original's values",
    )
    parser.add_argument(
        "--step-rtol",
        type=float,
        default=5e-2,
        help="train step: relative difference of whole-step gradient norms",
    )
    parser.add_argument("--use-l1", action="store_true", help="train step with the L1 loss on")
    parser.add_argument("--device", default="auto", help="auto | CPU | GPU | Ascend")
    parser.add_argument("--seed", type=int, default=0, help="random init (--random-init)")
    parser.add_argument("--json", help="write the table as JSON here")
    args = parser.parse_args(argv)
    if args.size % 32:
        parser.error(f"--size must be a multiple of 32, got {args.size}")
    return args


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point; returns the exit status (0 pass, 1 fail, 2 cannot run)."""
    args = parse_args(argv)
    # The CLI is an entry point like train.py: prepare the process before MindSpore loads
    # (on CPU this picks oneDNN's fast convolution kernels).
    from msdet.engine.runtime.cpu import configure_process_env
    from msdet.engine.runtime.device import resolve_device

    device = resolve_device(args.device)
    configure_process_env(device)
    import mindspore as ms

    if ms.get_context("device_target") != device:  # a process can set its device only once
        ms.set_device(device)
    start = time.time()
    try:
        x = load_input(args.image, args.size)
        calibration = train_batch(x, 1)[0]
        torch_model, net = build_pair(
            args.model, args.src, args.num_classes, calibration, args.seed
        )
    except ComparisonSetupError as err:
        print(f"comparison cannot run: {err}", file=sys.stderr)
        return 2
    rows = run_comparison(
        torch_model,
        net,
        x,
        args.mode,
        args.atol,
        args.rtol,
        args.train_step,
        args.grad_rtol,
        args.step_rtol,
        args.use_l1,
    )
    seconds = time.time() - start
    source = args.src or f"random init (seed {args.seed}, calibrated)"
    print(
        f"msdet vs YOLOX (PyTorch): {args.model}, {source}, "
        f"input {args.image or 'synthetic'} {args.size}x{args.size}, device {device}\n"
        f"module rows in PyNative mode; whole network, NMS, whole train step in {args.mode} "
        "mode; "
        f"atol {args.atol:g} rtol {args.rtol:g}"
        + (f" grad-rtol {args.grad_rtol:g} step-rtol {args.step_rtol:g}" if args.train_step else "")
        + "\n"
    )
    print(format_table(rows))
    failed = first_failure(rows)
    if failed:
        print(f"\nFAIL: first divergence at {failed.module} (max abs {failed.max_abs:.3g})")
    else:
        print(f"\nPASS: all {len(rows)} rows within tolerance ({seconds:.1f} s)")
    if args.json:
        report = build_report(
            rows,
            model=args.model,
            source=source,
            image=args.image,
            size=args.size,
            mode=args.mode,
            device=device,
            atol=args.atol,
            rtol=args.rtol,
            train_step=args.train_step,
            grad_rtol=args.grad_rtol,
            step_rtol=args.step_rtol,
            seconds=round(seconds, 2),
        )
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(json_safe(report), f, indent=2, allow_nan=False)
        print(f"JSON: {args.json}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
