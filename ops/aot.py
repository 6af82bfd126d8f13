"""msdet's compiled CPU kernels as MindSpore operators: ``ops.Custom(func_type="aot")``, written
once for every module of ``ops`` that puts a kernel on one.

:func:`aot_op` is an entry point of the kernel library (``"<library>:<Entry>"``) with its
output shapes and dtypes (the first input's by default: :func:`same_as_first`) and,
optionally, its backward. :func:`in_place_op` is one that writes some of its inputs in
place, and MindSpore has to be told.

A kernel may write into an input's memory (the optimizer's weights, BatchNorm's running
statistics, the EMA's buffer), but the graph must know, or it may hand the kernel a copy,
reorder a later read of the Parameter before the write, or drop an operator whose output
nobody uses. MindSpore's own optimizer and BatchNorm primitives say so in two parts, and
:func:`in_place_op` says it the same way: the written inputs are ``RW_WRITE`` in the
primitive's signature, and the primitive has the ``side_effect_mem`` attribute. Measured in
graph and PyNative mode (``tests/ops/test_sgd.py``, ``test_ema.py``,
``test_batchnorm_silu.py``): the Parameters' own memory is written, and a read after the
operator sees the new values.

Operators that run eagerly, one by one in PyNative mode (``eager``: ``runtime.mode=pynative``,
``CpuKernels.eager``), leave the signature out. There each operator runs at once, in program
order, on the Parameters' own memory, so nothing needs declaring; and MindSpore 2.10's
PyNative executor applies the signature of one ``ops.Custom`` it has run to every other
``ops.Custom`` after it (they share the primitive name "Custom"): the next compiled kernel
with another number of inputs failed with "Check input args failed"
(``tests/ops/test_aot.py``). Operators for graphs, whether graph mode or ``mindspore.jit``
compiles them (msdet's jit training loop, in PyNative mode), keep it.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence

import mindspore as ms
from mindspore import ops
from mindspore.ops import signature as sig


def same_as_first(first, *_):
    """An output shape or dtype equal to the first input's."""
    return first


def aot_op(
    library: str,
    entry: str,
    out_shape: Callable,
    out_dtype: Callable = same_as_first,
    bprop: Callable | None = None,
) -> ops.Custom:
    """The operator ``entry`` of msdet's kernel library ``library``; ``out_shape`` and
    ``out_dtype`` map the inputs' shapes and dtypes to the outputs'; ``bprop(*inputs, out,
    dout)`` is its backward (None: not differentiable)."""
    return ops.Custom(
        f"{library}:{entry}", out_shape=out_shape, out_dtype=out_dtype, func_type="aot", bprop=bprop
    )


def flag_shape(*_shapes) -> tuple[int]:
    """The output shape of an operator whose only output is a done-flag: [1]."""
    return (1,)


def float32(*_dtypes):
    """The output dtype of such an operator."""
    return ms.float32


def in_place_op(
    library: str,
    entry: str,
    inputs: Sequence[str],
    written: Collection[str],
    out_shape: Callable,
    out_dtype: Callable,
    bprop: Callable | None = None,
    eager: bool = False,
):
    """The operator ``entry`` of ``library`` taking ``inputs`` (their names, in order), of
    which it writes ``written`` in place; ``eager``: it runs on its own in PyNative mode, not
    inside a graph (see above)."""
    signature = tuple(
        sig.make_sig(name, sig.sig_rw.RW_WRITE, dtype=sig.sig_dtype.T)
        if name in written
        else sig.make_sig(name)
        for name in inputs
    )

    class InPlace(ops.Custom):
        __mindspore_signature__ = signature

    kind = ops.Custom if eager else InPlace
    op = kind(
        f"{library}:{entry}", out_shape=out_shape, out_dtype=out_dtype, func_type="aot", bprop=bprop
    )
    op.add_prim_attr("side_effect_mem", True)
    return op
