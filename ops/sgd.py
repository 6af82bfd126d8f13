"""SGD with momentum over all of a network's parameters as one compiled CPU operator that
updates them in place (``kernels/sgd.cc``: MindSpore's ``SGD`` arithmetic, the same bits).

MindSpore runs one ``SGD`` operator per parameter (330 for YOLOX-nano); each costs compiled-
graph memory and runtime time out of proportion to its work. :func:`flat_sgd_op` returns a
primitive that takes every gradient, weight, momentum buffer and first-step flag at once and
declares the last three written (``RW_WRITE`` inputs of a ``side_effect_mem`` primitive, as
MindSpore's own optimizer primitives do), so the graph orders later reads of the weights
after it and copies nothing. ``engine.optim.DecayInKernelSGD`` uses it when
``ops.cpu_kernels`` has a library enabled for ``"sgd"``.
"""

from __future__ import annotations

import mindspore as ms
from mindspore import ops
from mindspore.ops import signature as sig


def _flag(*_shapes):
    return (1,)


def _float32(*_dtypes):
    return ms.float32


def flat_sgd_op(library: str, count: int):
    """The update of ``count`` parameters, called as ``op(lr, momentum, dampening, nesterov,
    decays [count], *grads, *weights, *accums, *stats)`` (scalars as float32 tensors;
    ``nesterov`` 0 or 1); returns a float32 flag [1] and writes the weights, accumulators
    and stats in place."""
    read = tuple(sig.make_sig(f"in{i}") for i in range(5 + count))
    written = tuple(
        sig.make_sig(f"{part}{i}", sig.sig_rw.RW_WRITE, dtype=sig.sig_dtype.T)
        for part in ("weight", "accum", "stat")
        for i in range(count)
    )

    class FlatSGD(ops.Custom):
        __mindspore_signature__ = read + written

    op = FlatSGD(f"{library}:FlatSGD", out_shape=_flag, out_dtype=_float32, func_type="aot")
    op.add_prim_attr("side_effect_mem", True)
    return op
