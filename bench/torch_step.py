"""The PyTorch original's (YOLOX 0.3.0) training step or inference, for side-by-side runs.

    python -m msdet.bench.torch_step [--model yolox_nano] [--batch 8] [--img 320] [--steps 20]
    python -m msdet.bench.torch_step --infer [--img 416]
    python -m msdet.bench.torch_step --multiscale 5 [--steps 2]

The step is what YOLOX's trainer does per iteration: forward with targets (SimOTA loss),
backward, SGD (nesterov, YOLOX's parameter groups) and the EMA update; inference is the
eval-mode forward plus ``yolox.utils.postprocess``. Same synthetic batch as
``bench.step_speed`` (bench.common.synthetic_batch). ``--multiscale R`` also times ``--steps``
steps at every size of the multi-scale set, the batch resized by the original's
``Exp.preprocess``, and reports the mean over sizes (the schedule draws them uniformly).
Last line: ``RESULT {json}``.
"""

from __future__ import annotations

import argparse

from msdet.bench.common import peak_rss_mb, print_header, print_result, synthetic_batch, timed
from msdet.models.yolox import load_model_config
from msdet.porting.reference import build_torch_yolox, import_yolox, yolox_optimizer


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="yolox_nano")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--img", type=int, default=320)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--objects", type=int, default=5)
    parser.add_argument("--max-objects", type=int, default=120)
    parser.add_argument("--num-classes", type=int, default=80)
    parser.add_argument("--infer", action="store_true")
    parser.add_argument("--multiscale", type=int, default=0, help="range R; 0: one size")
    args = parser.parse_args(argv)
    import_yolox()
    import torch
    from yolox.utils import ModelEMA, postprocess

    print_header("PyTorch YOLOX " + ("inference" if args.infer else "training step"))
    model = build_torch_yolox(load_model_config(args.model), args.num_classes)
    images, targets, mask = synthetic_batch(
        args.batch, args.img, args.num_classes, args.max_objects, 0 if args.infer else args.objects
    )
    x = torch.from_numpy(images)
    if args.infer:
        model.eval()

        def step():
            with torch.no_grad():
                postprocess(model(x), args.num_classes, 0.01, 0.65)
    else:
        model.train()
        labels = torch.from_numpy(targets * mask[..., None])
        opt, ema = yolox_optimizer(model), ModelEMA(model, 0.9998)

        def step():
            loss = model(x, labels)["total_loss"]
            opt.zero_grad()
            loss.backward()
            opt.step()
            ema.update(model)

    first, t = timed(step, args.steps, args.warmup)
    result = {
        "kind": "inference" if args.infer else "train_step",
        "framework": "pytorch",
        "model": args.model,
        "batch": args.batch,
        "img_size": args.img,
        "threads": torch.get_num_threads(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "first_step_s": round(first, 3),
        ("batch_s" if args.infer else "step_s"): round(t, 4),
        "images_per_s": round(args.batch / t, 2),
        "peak_rss_mb": round(peak_rss_mb(), 1),
        "steps": args.steps,
    }
    if not args.infer:
        result.update(objects=args.objects, max_objects=args.max_objects)
    if args.multiscale and not args.infer:
        result["multiscale"] = multiscale_steps(step, x, labels, args)
    print_result(result)
    return result


def multiscale_steps(step, x, labels, args) -> dict:
    """Median step time per size with the original's resize; their mean and its ratio to
    the base size. ``step`` reads the batch through the closure's ``x``/``labels``."""
    import time

    from yolox.exp.yolox_base import Exp

    from msdet.engine.training.schedule import all_sizes

    exp = Exp()
    exp.input_size = (args.img, args.img)
    per_size = {}
    base_x, base_labels = x.clone(), labels.clone()
    for size in all_sizes((args.img, args.img), args.multiscale):
        times = []
        for _ in range(args.steps):
            started = time.perf_counter()
            rx, rl = exp.preprocess(base_x.clone(), base_labels.clone(), size)
            x.set_(rx.contiguous())
            labels.set_(rl.contiguous())
            step()
            times.append(time.perf_counter() - started)
        per_size[f"{size[0]}x{size[1]}"] = round(sorted(times)[len(times) // 2], 4)
        print(size, per_size[f"{size[0]}x{size[1]}"], flush=True)
    x.set_(base_x)
    labels.set_(base_labels)
    mean = sum(per_size.values()) / len(per_size)
    return {"range": args.multiscale, "step_s_per_size": per_size, "mean_step_s": round(mean, 4)}


if __name__ == "__main__":
    main()
