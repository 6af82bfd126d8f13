"""The model EMA's update over all of a network's parameters as one compiled CPU operator
that moves the flat average buffer in place (``kernels/ema.cc``: MindSpore's ``Lerp``
arithmetic, the same bits).

``engine.train_step.ModelEMA`` keeps its averages in one flat buffer; on MindSpore's
operators each step flattens every parameter into it (a ``Reshape`` each, a ``Concat``, a
``Lerp``, an ``Assign``). :func:`flat_ema_op` reads the parameters where they are and writes
the buffer, declared written (an ``RW_WRITE`` input of a ``side_effect_mem`` primitive, as
``ops.sgd`` declares the weights). ``ModelEMA`` uses it when ``ops.cpu_kernels`` has a
library enabled for ``"ema"``.
"""

from __future__ import annotations

import mindspore as ms
from mindspore import ops
from mindspore.ops import signature as sig


def _flag(*_shapes):
    return (1,)


def _float32(*_dtypes):
    return ms.float32


def flat_ema_op(library: str, count: int):
    """The update of a buffer averaging ``count`` parameters, called as ``op(weight, *params,
    buffer)`` (``weight`` = 1 - decay, a float32 tensor); returns a float32 flag [1] and sets
    ``buffer = buffer + (flat(params) - buffer) * weight`` in place."""
    signature = (
        sig.make_sig("weight"),
        *(sig.make_sig(f"param{i}") for i in range(count)),
        sig.make_sig("buffer", sig.sig_rw.RW_WRITE, dtype=sig.sig_dtype.T),
    )

    class FlatEMA(ops.Custom):
        __mindspore_signature__ = signature

    op = FlatEMA(f"{library}:FlatEMA", out_shape=_flag, out_dtype=_float32, func_type="aot")
    op.add_prim_attr("side_effect_mem", True)
    return op
