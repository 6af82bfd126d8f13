"""The decoupled YOLOX head and the decoding of its outputs into boxes."""

from __future__ import annotations

import math

import mindspore as ms
from mindspore import nn, ops
from mindspore.common.initializer import Constant

from msdet.models.layers import BaseConv, conv2d, conv_block
from msdet.ops.boxes import decode_boxes
from msdet.ops.cpu_kernels import NATIVE, CpuKernels
from msdet.ops.transpose import swap_last_axes_op


def prior_bias(prior_prob: float) -> float:
    """Bias whose sigmoid is ``prior_prob`` (YOLOX's initial objectness/class score)."""
    return -math.log((1.0 - prior_prob) / prior_prob)


def make_grid(h: int, w: int, stride: int) -> tuple[ms.Tensor, ms.Tensor]:
    """Anchor-point grid of one level: xy offsets [h*w, 2] (x fastest) and strides [h*w].

    Tiled aranges, not ``mindspore.ops.meshgrid``: Ascend has no AI Core kernel for Meshgrid
    (the AI CPU would run it at every step)."""
    xs = ops.tile(ops.arange(w, dtype=ms.float32).reshape(1, w), (h, 1))
    ys = ops.tile(ops.arange(h, dtype=ms.float32).reshape(h, 1), (1, w))
    grid = ops.stack((xs, ys), -1).reshape(-1, 2)
    strides = ops.full((h * w,), stride, dtype=ms.float32)
    return grid, strides


class YOLOXHead(nn.Cell):
    """Per level: a 1x1 stem, then separate classification and regression branches.

    In training mode (``set_train(True)``) ``construct`` returns what the loss needs:
    raw outputs ``[B, A, 5 + C]`` (box regression, objectness logit, class logits) and
    the anchor grid ``[A, 2]`` and strides ``[A]``. In inference mode it returns decoded
    predictions ``[B, A, 5 + C]``: cx, cy, w, h in input pixels, objectness and class
    probabilities, exactly as YOLOX does. This is the only place that mode is decided.
    """

    def __init__(
        self,
        num_classes: int,
        width: float = 1.0,
        strides: tuple[int, ...] = (8, 16, 32),
        in_channels: tuple[int, ...] = (256, 512, 1024),
        act: str = "silu",
        depthwise: bool = False,
        prior_prob: float = 0.01,
        kernels: CpuKernels = NATIVE,
    ):
        super().__init__()
        self.num_classes = num_classes
        self.strides = tuple(strides)
        self.num_levels = len(in_channels)
        # On CPU, the outputs' [B, 5 + C, A] -> [B, A, 5 + C] swap on msdet's kernel
        # (ops.transpose: the same bits, without MindSpore's per-element index table).
        library = kernels.library_for("transpose")
        self.swap = swap_last_axes_op(library) if library else None
        conv = conv_block(depthwise)
        hidden = int(256 * width)
        bias = Constant(prior_bias(prior_prob))

        self.stems = nn.CellList()
        self.cls_convs = nn.CellList()
        self.reg_convs = nn.CellList()
        self.cls_preds = nn.CellList()
        self.reg_preds = nn.CellList()
        self.obj_preds = nn.CellList()
        for c in in_channels:
            self.stems.append(BaseConv(int(c * width), hidden, 1, 1, act=act, kernels=kernels))
            self.cls_convs.append(
                nn.SequentialCell(
                    conv(hidden, hidden, 3, 1, act=act, kernels=kernels),
                    conv(hidden, hidden, 3, 1, act=act, kernels=kernels),
                )
            )
            self.reg_convs.append(
                nn.SequentialCell(
                    conv(hidden, hidden, 3, 1, act=act, kernels=kernels),
                    conv(hidden, hidden, 3, 1, act=act, kernels=kernels),
                )
            )
            cls_pred = conv2d(hidden, num_classes, 1, bias=True)
            obj_pred = conv2d(hidden, 1, 1, bias=True)
            cls_pred.bias.set_data(ms.common.initializer.initializer(bias, [num_classes]))
            obj_pred.bias.set_data(ms.common.initializer.initializer(bias, [1]))
            self.cls_preds.append(cls_pred)
            self.reg_preds.append(conv2d(hidden, 4, 1, bias=True))
            self.obj_preds.append(obj_pred)

    def construct(self, feats):
        outputs = []
        grids = []
        strides = []
        for k in range(self.num_levels):
            x = self.stems[k](feats[k])
            cls_out = self.cls_preds[k](self.cls_convs[k](x))
            reg_feat = self.reg_convs[k](x)
            reg_out = self.reg_preds[k](reg_feat)
            obj_out = self.obj_preds[k](reg_feat)
            out = ops.concat((reg_out, obj_out, cls_out), 1)
            b, c, h, w = out.shape
            outputs.append(out.reshape(b, c, h * w))
            grid, stride = make_grid(h, w, self.strides[k])
            grids.append(grid)
            strides.append(stride)
        stacked = ops.concat(outputs, 2)
        if self.swap is None:
            raw = ops.transpose(stacked, (0, 2, 1)).astype(ms.float32)
        else:
            raw = self.swap(stacked)
        grids = ops.concat(grids, 0)
        strides = ops.concat(strides, 0)
        if self.training:
            return raw, grids, strides
        boxes = decode_boxes(raw[..., :4], grids, strides)
        return ops.concat((boxes, ops.sigmoid(raw[..., 4:])), -1)
