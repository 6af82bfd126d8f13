"""Multi-scale training: compile time and step time per input size, graph mode.

    python -m msdet.bench.multiscale [model=yolox_nano] [data.img_size=[320,320]]
                               [train.multiscale_range=5] [train.batch_size=8]
                               [--sizes 160,320,480] [--steps 3] [--objects 5]

Builds the training step as ``train.py`` does (batch at ``train.input_size``, resized in the
graph by ``engine.training.multiscale``) and, for each size (default: every size of the schedule),
compiles its graph explicitly (timed), then times ``--steps`` steps. Finally it returns to
the first size and times one call, to show that a seen size is not compiled again. With
``MS_COMPILER_CACHE_ENABLE=1 MS_COMPILER_CACHE_PATH=DIR`` in the environment, a second run
shows what MindSpore's persistent compile cache saves. The last line is ``RESULT {json}``.
"""

from __future__ import annotations

import argparse
import os
import time

from msdet.bench.common import (
    print_header,
    print_result,
    synthetic_batch,
    timed,
    train_py_step,
)
from msdet.common.config import load_config
from msdet.engine.runtime.process import setup_runtime


def measure(cfg, rt, sizes, steps: int, objects: int, num_classes: int) -> dict:
    import mindspore as ms

    from msdet.engine.training.schedule import all_sizes, yolox_lr_schedule
    from msdet.models.loss import YOLOXLoss
    from msdet.models.yolox import build_model

    base = (int(cfg.train.input_size[0]), int(cfg.train.input_size[1]))  # train.py's
    ms_range = int(cfg.train.multiscale_range)
    sizes = sizes or all_sizes(base, ms_range)
    batch = int(cfg.train.batch_size)
    net = build_model(cfg.model, num_classes, rt.kernels)
    loss = YOLOXLoss(num_classes, assigner_rule=str(cfg.train.assigner.rule), kernels=rt.kernels)
    lrs = yolox_lr_schedule(0.01, (len(sizes) + 1) * (steps + 2), 1, 0, 0)
    step = train_py_step(net, loss, lrs, cfg, rt, img_size=base, multiscale=True)
    resize = step.net_with_loss
    arrays = synthetic_batch(batch, base[0], num_classes, int(cfg.data.max_objects), objects)
    images, targets, mask = (ms.Tensor(a) for a in arrays)

    def use(size):
        resize.size = size
        step.phase = f"train.{size[0]}x{size[1]}"

    rows = []
    for size in sizes:
        use(size)
        started = time.perf_counter()
        step.compile(images, targets, mask)
        compile_s = time.perf_counter() - started
        _, step_s = timed(lambda: step(images, targets, mask)[0].asnumpy(), steps, 0)
        rows.append(
            {"size": list(size), "compile_s": round(compile_s, 2), "step_s": round(step_s, 3)}
        )
        print(rows[-1], flush=True)
    use(sizes[0])
    started = time.perf_counter()
    step(images, targets, mask)[0].asnumpy()
    revisit = time.perf_counter() - started
    return {
        "kind": "multiscale",
        "model": cfg.model.name,
        "batch": batch,
        "base": list(base),
        "multiscale_range": ms_range,
        "compile_cache": os.environ.get("MS_COMPILER_CACHE_ENABLE") == "1",
        "sizes": rows,
        "compile_total_s": round(sum(r["compile_s"] for r in rows), 1),
        "revisit_first_size_s": round(revisit, 3),
    }


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="", help="square sizes to measure, e.g. 160,320,480")
    parser.add_argument("--steps", type=int, default=3, help="timed steps per size")
    parser.add_argument("--objects", type=int, default=5, help="boxes per image")
    parser.add_argument("--num-classes", type=int, default=80)
    parser.add_argument("overrides", nargs="*", help="settings, e.g. model=yolox_s")
    args = parser.parse_args(argv)
    cfg = load_config("tool", ["runtime=cpu", "train.multiscale_range=5", *args.overrides])
    print_header("msdet multi-scale compile and step time")
    rt = setup_runtime(cfg.runtime, ".")
    sizes = [(int(s), int(s)) for s in args.sizes.split(",") if s]
    result = measure(cfg, rt, sizes, args.steps, args.objects, args.num_classes)
    print_result(result)
    return result


if __name__ == "__main__":
    main()
