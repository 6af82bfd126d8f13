"""SPP's chained 5x5 max-pools and their concatenation with the input as one compiled CPU
operator (forward and backward).

YOLOX's SPP concatenates ``x`` with its 5, 9 and 13 max-pools; ``models.layers.SPPBottleneck``
computes them as three 5x5 pools applied one after another (the same values). On MindSpore
2.10's CPU each pool's ``MaxPoolGrad`` costs ~2.4 ms on YOLOX-nano's [8, 128, 10, 10]
planes; ``kernels/spp_pool.cc`` does the three pools and the concatenation in one pass and
their gradient in another, with MindSpore's values and its rule for ties (why: its header).
``SPPBottleneck`` uses it when ``ops.cpu_kernels`` has a library enabled for ``"spp"``.
"""

from __future__ import annotations

from msdet.ops.aot import aot_op


def spp_pools_op(library: str, levels: int):
    """``x [N, C, H, W] -> [N, (levels + 1) C, H, W]``: ``x``, then ``levels`` 5x5 max-pools
    (stride 1, windows clipped at the border), each of the one before, concatenated along the
    channels; with its backward attached."""

    def stacked(x):
        return (x[0], (levels + 1) * x[1], x[2], x[3])

    def unstacked(y, dy):
        return (y[0], y[1] // (levels + 1), y[2], y[3])

    grad = aot_op(library, "SppPoolGrad", unstacked)

    def bprop(x, out, dout):
        return (grad(out, dout),)

    return aot_op(library, "SppPoolForward", stacked, bprop=bprop)
