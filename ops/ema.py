"""The model EMA's update over all of a network's parameters as one compiled CPU operator
that moves the flat average buffer in place (``kernels/ema.cc``: MindSpore's ``Lerp``
arithmetic, the same bits).

``engine.training.ema.ModelEMA`` keeps its averages in one flat buffer; on MindSpore's
operators each step flattens every parameter into it (a ``Reshape`` each, a ``Concat``, a
``Lerp``, an ``Assign``). :func:`flat_ema_op` reads the parameters where they are and writes
the buffer, declared written (an ``RW_WRITE`` input of a ``side_effect_mem`` primitive, as
``ops.sgd`` declares the weights). ``ModelEMA`` uses it when ``ops.cpu_kernels`` has a
library enabled for ``"ema"``.
"""

from __future__ import annotations

from msdet.ops.aot import flag_shape, float32, in_place_op


def flat_ema_op(library: str, count: int, eager: bool = False):
    """The update of a buffer averaging ``count`` parameters, called as ``op(weight, *params,
    buffer)`` (``weight`` = 1 - decay, a float32 tensor); returns a float32 flag [1] and sets
    ``buffer = buffer + (flat(params) - buffer) * weight`` in place; ``eager``: run op by op
    in PyNative mode (``ops.aot.in_place_op``)."""
    inputs = ["weight", *(f"param{i}" for i in range(count)), "buffer"]
    return in_place_op(library, "FlatEMA", inputs, {"buffer"}, flag_shape, float32, eager=eager)
