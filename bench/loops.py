"""The training step under msdet's two loops, alternating in one process: what ``Model.train``
runs each step (the TrainStep Cell called in graph mode) against what ``runtime.loop=jit``
runs (the same Cell compiled by ``mindspore.jit``, called in PyNative mode).

    python -m msdet.bench.loops [--steps 20] [model=yolox_nano] [train.batch_size=8]
                                [data.img_size=[320,320]] [runtime.cpu_kernels=native]

Both steps are built from the same seed and fed the same batch every round, the execution
mode switched before each call; they take turns (every other round in reverse order) and
their losses are compared at every round, so the timing also checks that the two stay equal.
Reports each loop's first step (graph compilation included) and median step, the ratio, and
``RESULT {json}``.
"""

from __future__ import annotations

import argparse
import time

from msdet.bench.common import (
    machine,
    median,
    peak_rss_mb,
    print_header,
    print_result,
    synthetic_batch,
    train_py_step,
)
from msdet.common.config import load_config
from msdet.engine.runtime.process import setup_runtime

LOOPS = ("model", "jit")


def build_steps(cfg, rt, steps: int, num_classes: int) -> dict:
    """The training step of each loop, built in its own execution mode from seed 0: the
    Cell for ``model``, the Cell compiled by ``mindspore.jit`` for ``jit``."""
    import mindspore as ms

    from msdet.engine.training.jit_loop import compiled_step
    from msdet.engine.training.schedule import yolox_lr_schedule
    from msdet.models.loss import YOLOXLoss
    from msdet.models.yolox import build_model

    built = {}
    for loop in LOOPS:
        set_mode(loop)
        ms.set_seed(0)
        # Both loops build their in-place kernels for graphs (rt.kernels is not eager).
        net = build_model(cfg.model, num_classes, rt.kernels)
        loss = YOLOXLoss(num_classes, kernels=rt.kernels)
        lrs = yolox_lr_schedule(0.01, 2 * steps + 10, 1, 0, 0)
        step = train_py_step(net, loss, lrs, cfg, rt)
        built[loop] = step if loop == "model" else compiled_step(step)
    return built


def set_mode(loop: str) -> None:
    """The execution mode each loop runs its steps in."""
    import mindspore as ms

    ms.set_context(mode=ms.GRAPH_MODE if loop == "model" else ms.PYNATIVE_MODE)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--objects", type=int, default=5)
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_args()
    cfg = load_config("tool", ["runtime=cpu", *args.overrides])
    rt = setup_runtime(cfg.runtime, ".")
    import mindspore as ms

    print_header("msdet training step: Model.train's (graph mode) vs runtime.loop=jit's")
    num_classes = 80
    batch, size = int(cfg.train.batch_size), int(cfg.data.img_size[0])
    inputs = tuple(
        ms.Tensor(a)
        for a in synthetic_batch(batch, size, num_classes, int(cfg.data.max_objects), args.objects)
    )
    steps = build_steps(cfg, rt, args.steps, num_classes)
    first, losses = {}, {loop: [] for loop in LOOPS}
    times: dict[str, list[float]] = {loop: [] for loop in LOOPS}
    for i in range(args.steps + 1):
        for loop in LOOPS if i % 2 == 0 else LOOPS[::-1]:
            set_mode(loop)
            started = time.perf_counter()
            loss = float(steps[loop](*inputs)[0].asnumpy())
            seconds = time.perf_counter() - started
            losses[loop].append(loss)
            if i == 0:
                first[loop] = round(seconds, 2)
            else:
                times[loop].append(seconds)
    result = {loop: round(median(times[loop]), 4) for loop in LOOPS}
    equal = losses["model"] == losses["jit"]
    ratio = round(result["jit"] / result["model"], 3)
    print(f"step s: {result}  jit / model {ratio}x  losses equal every step: {equal}", flush=True)
    print_result(
        {
            "step_s": result,
            "jit_over_model": ratio,
            "first_step_s": first,
            "losses_equal": equal,
            "last_loss": losses["model"][-1],
            "steps": args.steps,
            "batch": batch,
            "img_size": size,
            "cpu_kernels": list(rt.kernels.names),
            "cpu": machine()["cpu"],
            "peak_rss_mb": round(peak_rss_mb(), 1),
        }
    )


if __name__ == "__main__":
    main()
