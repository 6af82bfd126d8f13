"""SGD with momentum over all of a network's parameters as one compiled CPU operator that
updates them in place (``kernels/sgd.cc``: MindSpore's ``SGD`` arithmetic, the same bits).

MindSpore runs one ``SGD`` operator per parameter (330 for YOLOX-nano); each costs compiled-
graph memory and runtime time out of proportion to its work. :func:`flat_sgd_op` returns a
primitive that takes every gradient, weight, momentum buffer and first-step flag at once and
declares the last three written (``ops.aot``), so the graph orders later reads of the
weights after it and copies nothing. ``engine.training.optim.DecayInKernelSGD`` uses it when
``ops.cpu_kernels`` has a library enabled for ``"sgd"``.
"""

from __future__ import annotations

from msdet.ops.aot import flag_shape, float32, in_place_op


def flat_sgd_op(library: str, count: int, eager: bool = False):
    """The update of ``count`` parameters, called as ``op(lr, momentum, dampening, nesterov,
    decays [count], *grads, *weights, *accums, *stats)`` (scalars as float32 tensors;
    ``nesterov`` 0 or 1); returns a float32 flag [1] and writes the weights, accumulators
    and stats in place; ``eager``: run op by op in PyNative mode (``ops.aot.in_place_op``)."""
    read = ["lr", "momentum", "dampening", "nesterov", "decays"]
    read += [f"grad{i}" for i in range(count)]
    written = [f"{part}{i}" for part in ("weight", "accum", "stat") for i in range(count)]
    return in_place_op(
        library, "FlatSGD", read + written, set(written), flag_shape, float32, eager=eager
    )
