"""Nearest-neighbour 2x upsampling (PyTorch's ``nn.Upsample(scale_factor=2)``): portable,
and on CPU as a compiled custom operator (forward and backward).

The portable way is a reshape + ``Tile`` (:func:`upsample2x`). MindSpore 2.10's CPU
``Tile`` writes under 1 GB/s and its gradient runs as a ``ReduceSum`` over the tiled axes;
``kernels/upsample.cc`` does each direction in one pass and gives the same bits as the
``Tile`` path (why: its header). ``models.layers.Upsample2x`` uses the kernel when
``ops.cpu_kernels`` has a library enabled for ``"upsample"``.
"""

from __future__ import annotations

from mindspore import Tensor, ops

from msdet.ops.aot import aot_op


def upsample2x(x: Tensor) -> Tensor:
    """A reshape + tile: the same values as ResizeNearestNeighbor, 2x faster on CPU."""
    b, c, h, w = x.shape
    return ops.tile(x.reshape(b, c, h, 1, w, 1), (1, 1, 1, 2, 1, 2)).reshape(b, c, h * 2, w * 2)


def _doubled(x):
    return (x[0], x[1], 2 * x[2], 2 * x[3])


def _halved(dy):
    return (dy[0], dy[1], dy[2] // 2, dy[3] // 2)


def upsample2x_op(library: str):
    """``x [N, C, H, W] -> y [N, C, 2H, 2W]``, ``y[.., 2i + a, 2j + b] = x[.., i, j]``, with
    its backward attached (each input pixel gets the sum of its four outputs' gradients)."""
    grad = aot_op(library, "Upsample2xGrad", _halved)

    def bprop(x, out, dout):
        return (grad(dout),)

    return aot_op(library, "Upsample2xForward", _doubled, bprop=bprop)
