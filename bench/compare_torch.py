"""msdet side by side with the PyTorch original (YOLOX 0.3.0), alternating runs.

    python -m msdet.bench.compare_torch [--model yolox_nano] [--batch 8] [--img 320] [--infer-img 416]
                                  [--rounds 3] [--steps 15] [--isa native|avx2]
                                  [--set KEY=VALUE ...]

Each round runs, in fresh processes, the original's training step, msdet's, then both
inference benchmarks (forward + NMS/postprocess), alternating so that machine noise hits
both sides alike; every other round each pair runs msdet's side first. Reports the median
of each side over the rounds, peak RSS, and ratios (> 1: msdet is faster / leaner). Same
model size, batch, image size and number of targets on both sides; msdet pads targets to
``--max-objects`` (its static shapes), the original loops over the real ones. ``--isa
avx2`` runs both sides without AVX-512 on a CPU that has it (ISA_CAPS), the nearest this
machine comes to an AVX2-only CPU of its family. The last line is ``RESULT {json}``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys

from msdet.bench.common import print_header, print_result, read_result

# Environment per side for ``--isa``. "avx2": PyTorch's own kernels (ATen's dispatch), its
# oneDNN and MKL capped at AVX2; msdet's kernel library compiled for this CPU without
# AVX-512 (its oneDNN is capped at AVX2 on every CPU, engine.runtime.device). Left as they are:
# MindSpore's nnacl kernels, which choose AVX-512 themselves from CPUID, and the cache and
# core of this CPU, so this is not a measurement of another machine.
ISA_CAPS: dict[str, dict[str, dict[str, str]]] = {
    "native": {"pytorch": {}, "msdet": {}},
    "avx2": {
        "pytorch": {
            "ATEN_CPU_CAPABILITY": "avx2",
            "ONEDNN_MAX_CPU_ISA": "AVX2",
            "MKL_ENABLE_INSTRUCTIONS": "AVX2",
        },
        "msdet": {"MSDET_KERNEL_FLAGS": "-mno-avx512f"},
    },
}


def run(cmd: list[str], env: dict[str, str] | None = None) -> dict:
    out = subprocess.run(
        [sys.executable, "-m", *cmd],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
    )
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{out.stdout[-2000:]}\n{out.stderr[-2000:]}")
    return read_result(out.stdout)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="yolox_nano")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--img", type=int, default=320)
    parser.add_argument("--infer-img", type=int, default=416)
    parser.add_argument("--objects", type=int, default=5)
    parser.add_argument("--max-objects", type=int, default=50)
    parser.add_argument("--num-classes", type=int, default=80)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=15)
    parser.add_argument("--amp", default="O0", help="msdet runtime.amp")
    parser.add_argument(
        "--isa",
        choices=sorted(ISA_CAPS),
        default="native",
        help="avx2: both sides without AVX-512 (see ISA_CAPS)",
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a setting (key=value) for msdet's side (repeatable), e.g. runtime.fusion=safe",
    )
    args = parser.parse_args(argv)
    print_header("msdet vs PyTorch YOLOX, side by side")
    caps = ISA_CAPS[args.isa]
    for side, env in caps.items():
        if env:
            print(f"{side} environment: " + " ".join(f"{k}={v}" for k, v in env.items()))

    common = ["--steps", str(args.steps), "--num-classes", str(args.num_classes)]
    torch_train = [
        "msdet.bench.torch_step",
        "--model",
        args.model,
        "--batch",
        str(args.batch),
        "--img",
        str(args.img),
        "--objects",
        str(args.objects),
        "--max-objects",
        str(args.max_objects),
        *common,
    ]
    ms_train = [
        "msdet.bench.step_speed",
        *common,
        "--objects",
        str(args.objects),
        f"model={args.model}",
        f"train.batch_size={args.batch}",
        f"data.img_size=[{args.img},{args.img}]",
        f"data.max_objects={args.max_objects}",
        f"runtime.amp={args.amp}",
        *args.set,
    ]
    torch_infer = [
        "msdet.bench.torch_step",
        "--infer",
        "--model",
        args.model,
        "--batch",
        str(args.batch),
        "--img",
        str(args.infer_img),
        *common,
    ]
    ms_infer = [
        "msdet.bench.step_speed",
        "--infer",
        *common,
        f"model={args.model}",
        f"eval.batch_size={args.batch}",
        f"eval.img_size=[{args.infer_img},{args.infer_img}]",
        *args.set,
    ]

    runs: dict[str, list[dict]] = {
        "torch_train": [],
        "ms_train": [],
        "torch_infer": [],
        "ms_infer": [],
    }
    pairs = [
        [("torch_train", torch_train), ("ms_train", ms_train)],
        [("torch_infer", torch_infer), ("ms_infer", ms_infer)],
    ]
    for r in range(args.rounds):
        # Each pair in reverse every other round: on a shared machine the first run of a
        # pair was measured faster whichever side it was, which would favour the side that always went first.
        order = [entry for pair in pairs for entry in (pair if r % 2 == 0 else pair[::-1])]
        for key, cmd in order:
            res = run(cmd, caps["pytorch" if key.startswith("torch") else "msdet"])
            runs[key].append(res)
            print(
                f"round {r + 1} {key:<12} {res.get('step_s', res.get('batch_s'))} s  "
                f"{res['images_per_s']} img/s  peak RSS {res['peak_rss_mb']} MiB",
                flush=True,
            )

    def med(key: str, field: str) -> float:
        return round(statistics.median(x[field] for x in runs[key]), 4)

    result = {
        "model": args.model,
        "batch": args.batch,
        "train_img": args.img,
        "infer_img": args.infer_img,
        "objects": args.objects,
        "rounds": args.rounds,
        "msdet_amp": args.amp,
        "isa": args.isa,
        "pytorch_cpu_capability": runs["torch_train"][0].get("cpu_capability"),
        "msdet_overrides": args.set,
        "train_step_s": {
            "pytorch": med("torch_train", "step_s"),
            "msdet": med("ms_train", "step_s"),
        },
        "train_images_per_s": {
            "pytorch": med("torch_train", "images_per_s"),
            "msdet": med("ms_train", "images_per_s"),
        },
        "infer_images_per_s": {
            "pytorch": med("torch_infer", "images_per_s"),
            "msdet": med("ms_infer", "images_per_s"),
        },
        "train_peak_rss_mb": {
            "pytorch": med("torch_train", "peak_rss_mb"),
            "msdet": med("ms_train", "peak_rss_mb"),
        },
        "first_step_s": {
            "pytorch": med("torch_train", "first_step_s"),
            "msdet": med("ms_train", "first_step_s"),
        },
    }
    result["ratio_train_speed"] = round(
        result["train_step_s"]["pytorch"] / result["train_step_s"]["msdet"], 3
    )
    result["ratio_infer_speed"] = round(
        result["infer_images_per_s"]["msdet"] / result["infer_images_per_s"]["pytorch"], 3
    )
    result["ratio_train_memory"] = round(
        result["train_peak_rss_mb"]["pytorch"] / result["train_peak_rss_mb"]["msdet"], 3
    )
    print(
        f"train step: PyTorch {result['train_step_s']['pytorch']:.3f} s, msdet "
        f"{result['train_step_s']['msdet']:.3f} s -> speed ratio {result['ratio_train_speed']}"
    )
    print(
        f"inference at {args.infer_img}: PyTorch {result['infer_images_per_s']['pytorch']} img/s, "
        f"msdet {result['infer_images_per_s']['msdet']} img/s -> ratio {result['ratio_infer_speed']}"
    )
    print(
        f"peak RSS (train): PyTorch {result['train_peak_rss_mb']['pytorch']} MiB, msdet "
        f"{result['train_peak_rss_mb']['msdet']} MiB -> ratio {result['ratio_train_memory']}"
    )
    print_result(result)
    return result


if __name__ == "__main__":
    main()
