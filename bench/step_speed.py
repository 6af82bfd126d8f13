"""msdet's full training step (forward, SimOTA loss, backward, SGD, EMA): time and memory.

    python -m msdet.bench.step_speed [model=yolox_nano] [train.batch_size=8] [data.img_size=[320,320]]
                               [runtime.amp=O0] [runtime.mode=graph] [--steps 20] [--objects 5]
    python -m msdet.bench.step_speed --infer [eval.img_size=[416,416]] [eval.batch_size=8]
    python -m msdet.bench.step_speed --alternate runtime.cpu_kernels=auto,native [--rounds 3]

Trailing arguments are settings (``key=value``) of configs/config.yaml. Reports the
first-step time (graph compilation included), the median step time after warm-up,
images/s and peak RSS; ``--infer`` measures inference + NMS instead. ``--alternate KEY=A,B``
runs the same benchmark in fresh processes with each value of one override, one after the
other for ``--rounds`` rounds, every other round in reverse order (machine noise and drift
hit every value alike), and reports each value's median step. The last line is ``RESULT {json}``.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time

from msdet.bench.common import (
    peak_rss_mb,
    print_header,
    print_result,
    read_result,
    synthetic_batch,
    timed,
    train_py_step,
)
from msdet.common.config import load_config
from msdet.engine.runtime.memory import release_free_heap
from msdet.engine.runtime.process import setup_runtime


def run_train(cfg, rt, steps: int, warmup: int, objects: int, num_classes: int) -> dict:
    import mindspore as ms

    from msdet.engine.runtime.amp import apply_amp
    from msdet.engine.training.schedule import yolox_lr_schedule
    from msdet.models.loss import YOLOXLoss
    from msdet.models.yolox import build_model

    batch, size = int(cfg.train.batch_size), int(cfg.data.img_size[0])
    net = build_model(cfg.model, num_classes, rt.kernels)
    net = apply_amp(net, rt)
    loss = YOLOXLoss(num_classes, assigner_rule=str(cfg.train.assigner.rule), kernels=rt.kernels)
    lrs = yolox_lr_schedule(0.01, steps + warmup + 1, 1, 0, 0)
    step = train_py_step(net, loss, lrs, cfg, rt)
    images, targets, mask = (
        ms.Tensor(a)
        for a in synthetic_batch(batch, size, num_classes, int(cfg.data.max_objects), objects)
    )
    # As train.py does (engine.training.callbacks.compile.CompileTrainingGraph): compile,
    # then hand the compiler's free heap back before the step allocates its tensors.
    started = time.perf_counter()
    if rt.mode == "graph":
        step.compile(images, targets, mask)
        release_free_heap()
    compile_s = time.perf_counter() - started
    first, t = timed(lambda: step(images, targets, mask)[0].asnumpy(), steps, warmup)
    first += compile_s
    return {
        "kind": "train_step",
        "framework": "msdet",
        "model": cfg.model.name,
        "batch": batch,
        "img_size": size,
        "objects": objects,
        "max_objects": int(cfg.data.max_objects),
        "amp": rt.amp_level,
        "mode": rt.mode,
        "cpu_kernels": list(rt.kernels.names),
        "first_step_s": round(first, 3),
        "step_s": round(t, 4),
        "images_per_s": round(batch / t, 2),
        "peak_rss_mb": round(peak_rss_mb(), 1),
        "steps": steps,
    }


def run_infer(cfg, rt, steps: int, warmup: int, num_classes: int) -> dict:
    import mindspore as ms

    from msdet.models.inference import InferenceNet, build_nms
    from msdet.models.yolox import build_model

    batch, size = int(cfg.eval.batch_size), int(cfg.eval.img_size[0])
    net = build_model(cfg.model, num_classes, rt.kernels)
    net.set_train(False)
    infer = InferenceNet(net, build_nms(cfg.eval, num_classes, kernels=rt.kernels))
    images = ms.Tensor(synthetic_batch(batch, size, num_classes, 1, 0)[0])
    first, t = timed(lambda: infer(images)[0].asnumpy(), steps, warmup)
    return {
        "kind": "inference",
        "framework": "msdet",
        "model": cfg.model.name,
        "batch": batch,
        "img_size": size,
        "mode": rt.mode,
        "cpu_kernels": list(rt.kernels.names),
        "first_step_s": round(first, 3),
        "batch_s": round(t, 4),
        "images_per_s": round(batch / t, 2),
        "peak_rss_mb": round(peak_rss_mb(), 1),
        "steps": steps,
    }


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=20, help="timed steps")
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps after the first")
    parser.add_argument("--objects", type=int, default=5, help="boxes per image")
    parser.add_argument("--num-classes", type=int, default=80)
    parser.add_argument("--infer", action="store_true", help="inference + NMS instead")
    parser.add_argument("--alternate", metavar="KEY=A,B", help="compare values of one override")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of --alternate")
    parser.add_argument("overrides", nargs="*", help="settings, e.g. model=yolox_s")
    args = parser.parse_args(argv)
    if args.alternate:
        return alternate(args, argv if argv is not None else sys.argv[1:])
    cfg = load_config("tool", ["runtime=cpu", *args.overrides])
    print_header("msdet " + ("inference" if args.infer else "training step"))
    rt = setup_runtime(cfg.runtime, tempfile.mkdtemp(prefix="msdet-bench-"))
    if args.infer:
        result = run_infer(cfg, rt, args.steps, args.warmup, args.num_classes)
    else:
        result = run_train(cfg, rt, args.steps, args.warmup, args.objects, args.num_classes)
    print_result(result)
    return result


def alternate(args, argv: list[str]) -> dict:
    """``--alternate KEY=A,B``: each value in a fresh process, values alternating per round."""
    key, _, values = args.alternate.partition("=")
    choices = [v for v in values.split(",") if v]
    if not key or len(choices) < 2:
        raise SystemExit("--alternate takes KEY=A,B[,...] (two values at least)")
    rest, skip = [], False
    for a in argv:  # the same command without --alternate/--rounds
        if skip:
            skip = False
        elif a in ("--alternate", "--rounds"):
            skip = True
        elif not a.startswith(("--alternate=", "--rounds=")):
            rest.append(a)
    # A training step reports its step_s, inference its batch_s (forward + NMS of a batch).
    field = "batch_s" if args.infer else "step_s"
    print_header(f"msdet {'inference' if args.infer else 'training step'}, alternating {key}")
    runs: dict[str, list[dict]] = {v: [] for v in choices}
    for r in range(args.rounds):
        # Every other round in reverse: on this shared machine the first run of a round was
        # measured faster whichever value it had.
        for value in choices if r % 2 == 0 else choices[::-1]:
            cmd = [sys.executable, "-m", "msdet.bench.step_speed", *rest, f"{key}={value}"]
            done = subprocess.run(cmd, capture_output=True, text=True)
            if done.returncode != 0:
                raise SystemExit(f"{' '.join(cmd)} failed:\n{done.stderr[-2000:]}")
            result = read_result(done.stdout)
            runs[value].append(result)
            print(
                f"round {r + 1} {key}={value}: {result[field]:.3f} s, first call "
                f"{result['first_step_s']:.1f} s, kernels {result.get('cpu_kernels')}",
                flush=True,
            )
    summary = {
        value: {
            field: [x[field] for x in rs],
            f"median_{field}": round(statistics.median(x[field] for x in rs), 4),
            "first_step_s": [x["first_step_s"] for x in rs],
            "cpu_kernels": rs[0].get("cpu_kernels"),
        }
        for value, rs in runs.items()
    }
    for value, row in summary.items():
        print(f"{key}={value}: median {row[f'median_{field}']:.3f} s over {args.rounds} rounds")
    result = {"kind": "alternate", "key": key, "rounds": args.rounds, "values": summary}
    print_result(result)
    return result


if __name__ == "__main__":
    main()
