"""The last two axes of a 3-D tensor swapped (``ops.transpose(x, (0, 2, 1))``) as a compiled
CPU operator, forward and backward.

MindSpore 2.10's CPU ``Transpose`` keeps an 8-byte index per element it writes for the
graph's life (~11 MiB for YOLOX's head at 320 px, each way); ``kernels/transpose.cc``
copies in tiles and keeps nothing: the same bits. ``models.head.YOLOXHead`` uses it when
``ops.cpu_kernels`` has a library enabled for ``"transpose"``.
"""

from __future__ import annotations

from msdet.ops.aot import aot_op


def _swapped(x):
    return (x[0], x[2], x[1])


def swap_last_axes_op(library: str):
    """``x [B, M, N] -> y [B, N, M]``, ``y[b, j, i] = x[b, i, j]``, with its backward attached
    (the same swap of the gradient)."""
    back = aot_op(library, "SwapLastAxes", _swapped)

    def bprop(x, out, dout):
        return (back(dout),)

    return aot_op(library, "SwapLastAxes", _swapped, bprop=bprop)
