"""Depthwise 3x3 convolution, forward + backward: MindSpore's Conv2D, msdet's kernel, PyTorch.

    python -m msdet.bench.depthwise [--batch 8] [--rounds 3] [--steps 20] [--threads N]
    python -m msdet.bench.depthwise --train-step [--steps 10]   # whole nano step, both variants

For each layer shape YOLOX-nano uses (channels x size, stride), one graph-mode cell computes
the output and both gradients (input and weight) of ``sum(conv(x))`` with MindSpore's
``nn.Conv2d(group=C)``, with ``ops.depthwise`` (the compiled kernel) on its stride-1 fast
path and on its general loops (same bits, ``cpu_kernels.set_depthwise_general``; stride 2
has one path), and PyTorch's ``nn.Conv2d(groups=C)`` does the same; the four alternate in
every round so machine load hits all alike. Prints median ms per shape; last line
``RESULT {json}``.

``--train-step`` builds YOLOX-nano's whole training step (batch 8, 320 px, 80 classes)
twice in one process, once on MindSpore's operators and once on msdet's kernels (all of
``ops.cpu_kernels``), and alternates their steps with a third: msdet's step again with the
depthwise layers on their general loops.
msdet's kernels use ``--threads`` threads in every mode.
"""

from __future__ import annotations

from msdet.bench.common import kernel_bench_parser, median, print_result, start_kernel_bench, timed

GENERAL_LOOPS = "msdet_kernels_general_loops"
# (channels, input side, stride): YOLOX-nano's depthwise layers at 320 px.
SHAPES = ((16, 160, 2), (32, 80, 1), (32, 80, 2), (64, 40, 1), (64, 40, 2), (128, 20, 1))


def main(argv: list[str] | None = None) -> dict:
    args = kernel_bench_parser(__doc__, rounds=3).parse_args(argv)
    if args.train_step:
        return compare_train_steps(args.steps, args.threads)
    library = start_kernel_bench("depthwise convolution, forward + backward", args.threads)
    import mindspore as ms
    import numpy as np
    import torch
    from mindspore import nn, ops

    from msdet.ops.cpu_kernels import set_depthwise_general
    from msdet.ops.depthwise import DepthwiseConv2d

    class Grads(nn.Cell):
        def __init__(self, conv):
            super().__init__()
            self.conv = conv
            self.params = ms.ParameterTuple(conv.trainable_params())
            self.grad = ops.GradOperation(get_all=True, get_by_list=True)

        def construct(self, x):
            return self.grad(self.conv, self.params)(x)

    rows = []
    for c, size, stride in SHAPES:
        rng = np.random.default_rng(0)
        x_np = rng.standard_normal((args.batch, c, size, size)).astype(np.float32)
        x = ms.Tensor(x_np)
        native = Grads(nn.Conv2d(c, c, 3, stride, pad_mode="pad", padding=1, group=c))
        custom = Grads(DepthwiseConv2d(c, 3, stride, "HeUniform", library))
        tconv = torch.nn.Conv2d(c, c, 3, stride, 1, groups=c, bias=False)
        tx = torch.tensor(x_np, requires_grad=True)

        def run_torch(tconv=tconv, tx=tx):
            tx.grad = None
            tconv.weight.grad = None
            tconv(tx).sum().backward()

        def run_general(net=custom, x=x):
            set_depthwise_general(library, True)
            try:
                net(x)[0][0].asnumpy()
            finally:
                set_depthwise_general(library, False)

        sides = {
            "mindspore_conv2d": lambda net=native, x=x: net(x)[0][0].asnumpy(),
            "msdet_kernel": lambda net=custom, x=x: net(x)[0][0].asnumpy(),
            "msdet_general_loops": run_general,
            "pytorch": run_torch,
        }
        times: dict[str, list[float]] = {k: [] for k in sides}
        for _ in range(args.rounds):
            for name, fn in sides.items():
                times[name].append(timed(fn, args.steps, 2)[1] * 1000)
        row = {"channels": c, "size": size, "stride": stride}
        row.update({k: round(median(v), 2) for k, v in times.items()})
        rows.append(row)
        print(
            f"{c:4d} ch {size:3d}px s{stride}: Conv2D {row['mindspore_conv2d']:7.2f} ms  "
            f"kernel {row['msdet_kernel']:7.2f} ms "
            f"(general loops {row['msdet_general_loops']:7.2f})  PyTorch {row['pytorch']:7.2f} ms",
            flush=True,
        )
    total = {k: round(sum(r[k] for r in rows), 2) for k in sides}
    print_result({"batch": args.batch, "rounds": args.rounds, "rows": rows, "total_ms": total})
    return total


def compare_train_steps(steps: int, threads: int) -> dict:
    """Median seconds per training step on MindSpore's operators and on msdet's kernels,
    steps alternating."""
    from msdet.bench.common import (
        alternate_steps,
        nano_train_steps,
        print_header,
        print_step_comparison,
    )
    from msdet.ops import cpu_kernels

    print_header("YOLOX-nano training step: MindSpore's operators vs msdet's kernels")
    variants = {"mindspore_ops": (), "msdet_kernels": cpu_kernels.KERNELS}
    library, train_steps, first, inputs = nano_train_steps(variants, steps, threads)
    # msdet's kernels once more, with stride-1 3x3 depthwise layers on the general loops
    # (the same graph and bits; cpu_kernels.set_depthwise_general)
    train_steps[GENERAL_LOOPS] = train_steps["msdet_kernels"]

    def before(name: str) -> None:
        cpu_kernels.set_depthwise_general(library, name == GENERAL_LOOPS)

    try:
        result = alternate_steps(train_steps, inputs, steps, before)
    finally:
        cpu_kernels.set_depthwise_general(library, False)
    print_step_comparison(result, "mindspore_ops", "msdet_kernels", first, steps)
    return result


if __name__ == "__main__":
    main()
