"""2x nearest upsampling, forward + backward: reshape + Tile, msdet's kernel, PyTorch.

    python -m msdet.bench.upsample [--batch 8] [--rounds 5] [--steps 20] [--threads N]
    python -m msdet.bench.upsample --train-step [--steps 10]   # whole nano step, with and without

For each upsampling YOLOX-nano's neck does at 320 px (channels x input side), one
graph-mode cell computes ``sum(up(x) * s)`` and its gradient w.r.t. ``x`` with msdet's
portable reshape + ``Tile`` (``ops.upsample.upsample2x``) and with ``ops.upsample`` (the
compiled kernel, the same bits), and PyTorch's ``nn.Upsample(scale_factor=2)`` does the
same; the three alternate in every round. Prints median ms per shape; last line
``RESULT {json}``.

``--train-step`` builds YOLOX-nano's whole training step (batch 8, 320 px, 80 classes)
twice in one process, on all of msdet's kernels and on all but the upsampling one, and
alternates their steps (the order reversed every round).
"""

from __future__ import annotations

from msdet.bench.common import kernel_bench_parser, median, print_result, start_kernel_bench, timed
from msdet.engine.runtime.kernel_benchmarks import (
    UPSAMPLES as SHAPES,  # YOLOX-nano's two, at 320 px
)


def main(argv: list[str] | None = None) -> dict:
    args = kernel_bench_parser(__doc__, rounds=5).parse_args(argv)
    if args.train_step:
        return compare_train_steps(args.steps, args.threads)
    library = start_kernel_bench("2x nearest upsampling, forward + backward", args.threads)
    import mindspore as ms
    import numpy as np
    import torch
    from mindspore import nn

    from msdet.ops.upsample import upsample2x, upsample2x_op

    class Weighted(nn.Cell):
        def __init__(self, op, scale):
            super().__init__()
            self.op = op
            self.scale = scale

        def construct(self, x):
            y = upsample2x(x) if self.op is None else self.op(x)
            return (y * self.scale).sum()

    rows = []
    for c, side in SHAPES:
        rng = np.random.default_rng(0)
        x_np = rng.standard_normal((args.batch, c, side, side)).astype(np.float32)
        s_np = rng.uniform(0.5, 1.5, (1, c, 2 * side, 2 * side)).astype(np.float32)
        x = ms.Tensor(x_np)
        tile = ms.grad(Weighted(None, ms.Tensor(s_np)), 0)
        kernel = ms.grad(Weighted(upsample2x_op(library), ms.Tensor(s_np)), 0)
        tx = torch.tensor(x_np, requires_grad=True)
        ts = torch.tensor(s_np)
        tup = torch.nn.Upsample(scale_factor=2)

        def run_torch(tx=tx, ts=ts, tup=tup):
            tx.grad = None
            (tup(tx) * ts).sum().backward()

        sides = {
            "tile": lambda fn=tile, x=x: fn(x).asnumpy(),
            "msdet_kernel": lambda fn=kernel, x=x: fn(x).asnumpy(),
            "pytorch": run_torch,
        }
        times: dict[str, list[float]] = {k: [] for k in sides}
        names = list(sides)
        for r in range(args.rounds):
            for name in names if r % 2 == 0 else names[::-1]:
                times[name].append(timed(sides[name], args.steps, 2)[1] * 1000)
        row = {"channels": c, "side": side}
        row.update({k: round(median(v), 3) for k, v in times.items()})
        rows.append(row)
        print(
            f"{c:4d} ch {side:3d}px -> {2 * side}px: Tile {row['tile']:7.3f} ms  "
            f"kernel {row['msdet_kernel']:7.3f} ms  PyTorch {row['pytorch']:7.3f} ms",
            flush=True,
        )
    total = {k: round(sum(r[k] for r in rows), 3) for k in sides}
    print_result({"batch": args.batch, "rounds": args.rounds, "rows": rows, "total_ms": total})
    return total


def compare_train_steps(steps: int, threads: int) -> dict:
    """Median seconds per training step with and without the upsampling kernel (every other
    msdet kernel on in both), steps alternating."""
    from msdet.bench.common import (
        alternate_steps,
        nano_train_steps,
        print_header,
        print_step_comparison,
    )
    from msdet.ops import cpu_kernels

    print_header("YOLOX-nano training step: upsampling on Tile vs on msdet's kernel")
    others = tuple(k for k in cpu_kernels.KERNELS if k != "upsample")
    variants = {"tile": others, "upsample_kernel": cpu_kernels.KERNELS}
    _, train_steps, first, inputs = nano_train_steps(variants, steps, threads)
    result = alternate_steps(train_steps, inputs, steps)
    print_step_comparison(result, "tile", "upsample_kernel", first, steps)
    return result


if __name__ == "__main__":
    main()
