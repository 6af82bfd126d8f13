"""msdet's full training step (forward, SimOTA loss, backward, SGD, EMA): time and memory.

    python -m bench.train_step [model=yolox_nano] [train.batch_size=8] [data.img_size=[320,320]]
                               [runtime.amp=O0] [runtime.mode=graph] [--steps 20] [--objects 5]
    python -m bench.train_step --infer [eval.img_size=[416,416]] [eval.batch_size=8]

Trailing key=value arguments are Hydra overrides of configs/config.yaml. Reports the
first-step time (graph compilation included), the median step time after warm-up,
images/s and peak RSS; ``--infer`` measures inference + NMS instead. The last line is
``RESULT {json}``.
"""

from __future__ import annotations

import argparse
import time

from hydra import compose, initialize_config_dir

from bench.common import (
    CONFIG_DIR,
    peak_rss_mb,
    print_header,
    print_result,
    synthetic_batch,
    timed,
)
from engine.cli import prepare_config
from engine.runtime import release_free_heap, setup_runtime


def run_train(cfg, rt, steps: int, warmup: int, objects: int, num_classes: int) -> dict:
    import mindspore as ms

    from engine.optim import yolox_lr_schedule
    from engine.trainer import apply_amp, build_train_step
    from models.loss import YOLOXLoss
    from models.yolox import build_model

    batch, size = int(cfg.train.batch_size), int(cfg.data.img_size[0])
    net = build_model(cfg.model, num_classes)
    apply_amp(net, rt)
    loss = YOLOXLoss(num_classes, assigner_rule=str(cfg.train.assigner.rule))
    lrs = yolox_lr_schedule(0.01, steps + warmup + 1, 1, 0, 0)
    step = build_train_step(net, loss, lrs, cfg.train, rt)
    images, targets, mask = (
        ms.Tensor(a)
        for a in synthetic_batch(batch, size, num_classes, int(cfg.data.max_objects), objects)
    )
    # As train.py does (engine.callbacks.CompileTrainingGraph): compile, then hand the
    # compiler's free heap back before the step allocates its tensors.
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
        "first_step_s": round(first, 3),
        "step_s": round(t, 4),
        "images_per_s": round(batch / t, 2),
        "peak_rss_mb": round(peak_rss_mb(), 1),
        "steps": steps,
    }


def run_infer(cfg, rt, steps: int, warmup: int, num_classes: int) -> dict:
    import mindspore as ms

    from models.inference import InferenceNet, build_nms
    from models.yolox import build_model

    batch, size = int(cfg.eval.batch_size), int(cfg.eval.img_size[0])
    net = build_model(cfg.model, num_classes)
    net.set_train(False)
    infer = InferenceNet(net, build_nms(cfg.eval, num_classes))
    images = ms.Tensor(synthetic_batch(batch, size, num_classes, 1, 0)[0])
    first, t = timed(lambda: infer(images)[0].asnumpy(), steps, warmup)
    return {
        "kind": "inference",
        "framework": "msdet",
        "model": cfg.model.name,
        "batch": batch,
        "img_size": size,
        "mode": rt.mode,
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
    parser.add_argument("overrides", nargs="*", help="Hydra overrides, e.g. model=yolox_s")
    args = parser.parse_args(argv)
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        cfg = prepare_config(compose("config", overrides=["runtime=cpu", *args.overrides]))
    print_header("msdet " + ("inference" if args.infer else "training step"))
    rt = setup_runtime(cfg.runtime, ".")
    if args.infer:
        result = run_infer(cfg, rt, args.steps, args.warmup, args.num_classes)
    else:
        result = run_train(cfg, rt, args.steps, args.warmup, args.objects, args.num_classes)
    print_result(result)
    return result


if __name__ == "__main__":
    main()
