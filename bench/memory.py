"""Where the training step's memory goes: resident memory stage by stage, both sides.

    python -m msdet.bench.memory [--model yolox_nano] [--batch 8] [--img 320] [--steps 5]
                           [--num-classes 80] [--side msdet|pytorch|both] [key=value ...]

One fresh process per side runs what ``bench.compare_torch`` times (the same synthetic
batch, no data pipeline) and reads Linux's ``VmRSS`` (resident now, split into ``RssAnon``
and ``RssFile``) and ``VmHWM`` (peak since the last reset; reset through
``/proc/self/clear_refs``) after each stage:
framework import, network built, training step built, first step (msdet: the graph
compiled without running it, the compiler's free heap handed back to the OS as train.py
does unless ``--keep-heap``, then its first run), the following steps (steady state), and,
for msdet, the
same process after one inference graph. Each stage's ``peak`` is the highest resident
memory *during* that stage, so compile-time transients show apart from what stays.
Each stage also records its wall time: the steady-state stage's divided by ``--steps`` is
the step time. Trailing arguments are settings (key=value) for msdet (e.g.
``runtime.cpu_kernels=native``, ``train.recompute=backbone``); the input size is ``--img``.
The last line is ``RESULT {json}``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time

from msdet.bench.common import print_header, print_result, read_result, train_py_step
from msdet.common.config import load_config


def _status_mb() -> dict[str, float]:
    """This process's memory, MiB: resident now (``rss``), its peak since the last reset
    (``peak``), and the resident split into anonymous memory (``anon``: heap, tensors,
    the compiled graph's structures) and file pages (``file``: the shared libraries'
    code and data paged in, which the kernel can drop and re-read)."""
    fields = {"VmRSS:": "rss", "VmHWM:": "peak", "RssAnon:": "anon", "RssFile:": "file"}
    out = dict.fromkeys(fields.values(), 0.0)
    with open("/proc/self/status", encoding="utf-8") as f:
        for line in f:
            key = line.split(None, 1)[0] if line.strip() else ""
            if key in fields:
                out[fields[key]] = int(line.split()[1]) / 1024.0
    return out


def _reset_peak() -> bool:
    """Reset VmHWM to the current RSS (Linux >= 4.0); False where not permitted."""
    try:
        with open("/proc/self/clear_refs", "w", encoding="utf-8") as f:
            f.write("5")
        return True
    except OSError:
        return False


class Stages:
    """Records (stage, resident after, peak during, seconds) as a process goes."""

    def __init__(self) -> None:
        self.rows: list[dict] = []
        self.resets = _reset_peak()
        self.since = time.perf_counter()

    def mark(self, name: str) -> None:
        mem = _status_mb()
        seconds = time.perf_counter() - self.since
        self.rows.append(
            {
                "stage": name,
                "rss_mb": round(mem["rss"], 1),
                "peak_mb": round(mem["peak"], 1),
                "anon_mb": round(mem["anon"], 1),
                "file_mb": round(mem["file"], 1),
                "seconds": round(seconds, 2),
            }
        )
        print(
            f"  {name:<36} resident {mem['rss']:7.1f} MiB (anon {mem['anon']:7.1f}, files "
            f"{mem['file']:6.1f})   peak during {mem['peak']:7.1f} MiB   {seconds:7.2f} s",
            flush=True,
        )
        _reset_peak()
        self.since = time.perf_counter()


def msdet_side(args, overrides: list[str]) -> dict:
    stages = Stages()

    from msdet.bench.common import synthetic_batch
    from msdet.engine.runtime.memory import release_free_heap
    from msdet.engine.runtime.process import setup_runtime

    cfg = load_config(
        "tool",
        [
            f"model={args.model}",
            f"train.batch_size={args.batch}",
            f"data.img_size=[{args.img},{args.img}]",
            f"eval.img_size=[{args.img},{args.img}]",
            f"eval.batch_size={args.batch}",
            "data.max_objects=50",
            *overrides,
        ],
    )
    rt = setup_runtime(cfg.runtime, tempfile.mkdtemp(prefix="msdet-bench-"))
    import mindspore as ms

    from msdet.engine.runtime.amp import apply_amp
    from msdet.engine.training.schedule import yolox_lr_schedule
    from msdet.models.loss import YOLOXLoss
    from msdet.models.yolox import build_model

    stages.mark("import + runtime")
    net = build_model(cfg.model, args.num_classes, rt.kernels)
    net = apply_amp(net, rt)
    stages.mark("network built")
    loss = YOLOXLoss(
        args.num_classes, assigner_rule=str(cfg.train.assigner.rule), kernels=rt.kernels
    )
    lrs = yolox_lr_schedule(0.01, args.steps + 2, 1, 0, 0)
    step = train_py_step(net, loss, lrs, cfg, rt)
    stages.mark("training step built (optimizer, EMA)")
    images, targets, mask = (
        ms.Tensor(a)
        for a in synthetic_batch(args.batch, args.img, args.num_classes, 50, args.objects)
    )
    step.compile(images, targets, mask)
    stages.mark("graph compiled (not run)")
    if (
        not args.keep_heap
    ):  # as train.py does (engine.training.callbacks.compile.CompileTrainingGraph)
        release_free_heap()
        stages.mark("compiler's free heap released")
    step(images, targets, mask)[0].asnumpy()
    stages.mark("first step run")
    for _ in range(args.steps):
        step(images, targets, mask)[0].asnumpy()
    stages.mark(f"next {args.steps} steps")
    from msdet.models.inference import InferenceNet, build_nms

    net.set_train(False)
    infer = InferenceNet(net, build_nms(cfg.eval, args.num_classes, kernels=rt.kernels))
    for _ in range(2):
        infer(images)[0].asnumpy()
    stages.mark("+ inference graph (2 batches)")
    return {
        "framework": "msdet",
        "cpu_kernels": list(rt.kernels.names),
        "peak_resets": stages.resets,
        "stages": stages.rows,
    }


def pytorch_side(args) -> dict:
    stages = Stages()
    from msdet.bench.common import synthetic_batch
    from msdet.models.yolox import load_model_config
    from msdet.porting.reference import build_torch_yolox, import_yolox, yolox_optimizer

    import_yolox()
    import torch
    from yolox.utils import ModelEMA

    stages.mark("import")
    model = build_torch_yolox(load_model_config(args.model), args.num_classes)
    model.train()
    stages.mark("network built")
    opt, ema = yolox_optimizer(model), ModelEMA(model, 0.9998)
    stages.mark("training step built (optimizer, EMA)")
    images, targets, mask = synthetic_batch(
        args.batch, args.img, args.num_classes, 120, args.objects
    )
    x, labels = torch.from_numpy(images), torch.from_numpy(targets * mask[..., None])

    def step():
        loss = model(x, labels)["total_loss"]
        opt.zero_grad()
        loss.backward()
        opt.step()
        ema.update(model)

    step()
    stages.mark("first step")
    for _ in range(args.steps):
        step()
    stages.mark(f"next {args.steps} steps")
    return {
        "framework": "pytorch",
        "threads": torch.get_num_threads(),
        "peak_resets": stages.resets,
        "stages": stages.rows,
    }


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="yolox_nano")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--img", type=int, default=320)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--objects", type=int, default=5)
    parser.add_argument("--num-classes", type=int, default=80)
    parser.add_argument("--side", choices=("msdet", "pytorch", "both"), default="both")
    parser.add_argument(
        "--keep-heap", action="store_true", help="msdet: skip releasing the compiler's free heap"
    )
    args, overrides = parser.parse_known_args(argv)
    if args.side != "both":
        print_header(f"memory by stage: {args.side}")
        res = msdet_side(args, overrides) if args.side == "msdet" else pytorch_side(args)
        res["peak_mb"] = max(r["peak_mb"] for r in res["stages"])
        print_result(res)
        return res
    print_header("memory by stage: msdet and the PyTorch original")
    result = {}
    given = list(sys.argv[1:] if argv is None else argv)
    passed = [a for i, a in enumerate(given) if a != "--side" and given[i - 1 : i] != ["--side"]]
    for side in ("pytorch", "msdet"):
        cmd = [sys.executable, "-m", "msdet.bench.memory", "--side", side, *passed]
        out = subprocess.run(cmd, capture_output=True, text=True)
        if out.returncode != 0:
            raise RuntimeError(f"{side} failed:\n{out.stdout[-2000:]}\n{out.stderr[-2000:]}")
        print(out.stdout.split("command:", 1)[-1].split("\n", 1)[-1].rsplit("RESULT", 1)[0])
        result[side] = read_result(out.stdout)
    print(json.dumps({s: r["peak_mb"] for s, r in result.items()}))
    print_result(result)
    return result


if __name__ == "__main__":
    main()
