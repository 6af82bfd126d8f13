"""The YOLOX necks, each holding its backbone as ``backbone``: PAFPN (top-down then
bottom-up fusion of dark3..dark5, nano ... x) and YOLOv3's FPN (top-down only, Darknet53)."""

from __future__ import annotations

from mindspore import nn, ops

from msdet.models.backbone import CSPDarknet, Darknet53
from msdet.models.layers import BaseConv, CSPLayer, Upsample2x, conv_block
from msdet.ops.cpu_kernels import NATIVE, CpuKernels


class YOLOPAFPN(nn.Cell):
    """Backbone plus path-aggregation neck; returns features at strides 8, 16, 32.

    The backbone is an attribute named ``backbone`` (as in YOLOX, whose detector holds
    this cell as ``backbone`` too: parameter names start ``backbone.backbone.``).
    """

    # The neck's own blocks in execution order (the rows of porting's module comparison).
    BLOCKS = (
        "lateral_conv0",
        "C3_p4",
        "reduce_conv1",
        "C3_p3",
        "bu_conv2",
        "C3_n3",
        "bu_conv1",
        "C3_n4",
    )

    def __init__(
        self,
        depth: float = 1.0,
        width: float = 1.0,
        in_channels: tuple[int, int, int] = (256, 512, 1024),
        depthwise: bool = False,
        act: str = "silu",
        kernels: CpuKernels = NATIVE,
    ):
        super().__init__()
        self.backbone = CSPDarknet(depth, width, depthwise=depthwise, act=act, kernels=kernels)
        conv = conv_block(depthwise)
        c3, c4, c5 = (int(c * width) for c in in_channels)
        n = round(3 * depth)

        self.lateral_conv0 = BaseConv(c5, c4, 1, 1, act=act, kernels=kernels)
        self.C3_p4 = CSPLayer(2 * c4, c4, n, False, depthwise=depthwise, act=act, kernels=kernels)
        self.reduce_conv1 = BaseConv(c4, c3, 1, 1, act=act, kernels=kernels)
        self.C3_p3 = CSPLayer(2 * c3, c3, n, False, depthwise=depthwise, act=act, kernels=kernels)
        self.bu_conv2 = conv(c3, c3, 3, 2, act=act, kernels=kernels)
        self.C3_n3 = CSPLayer(2 * c3, c4, n, False, depthwise=depthwise, act=act, kernels=kernels)
        self.bu_conv1 = conv(c4, c4, 3, 2, act=act, kernels=kernels)
        self.C3_n4 = CSPLayer(2 * c4, c5, n, False, depthwise=depthwise, act=act, kernels=kernels)
        self.upsample = Upsample2x(kernels)

    def construct(self, x):
        x2, x1, x0 = self.backbone(x)

        fpn_out0 = self.lateral_conv0(x0)
        f_out0 = self.C3_p4(ops.concat((self.upsample(fpn_out0), x1), 1))
        fpn_out1 = self.reduce_conv1(f_out0)
        pan_out2 = self.C3_p3(ops.concat((self.upsample(fpn_out1), x2), 1))

        pan_out1 = self.C3_n3(ops.concat((self.bu_conv2(pan_out2), fpn_out1), 1))
        pan_out0 = self.C3_n4(ops.concat((self.bu_conv1(pan_out1), fpn_out0), 1))
        return pan_out2, pan_out1, pan_out0


class YOLOFPN(nn.Cell):
    """Darknet53 plus YOLOv3's top-down FPN; returns features at strides 8, 16, 32.

    dark5 (512 channels) is passed through as the stride-32 feature; a 1x1 conv and 2x
    upsampling bring it to dark4, five alternating 1x1/3x3 convs fuse them (256 channels),
    and the same again with dark3 (128 channels). Channels are fixed (no width multiplier):
    the head takes ``OUT_CHANNELS`` (the last one is dark5's).
    """

    BLOCKS = ("out1_cbl", "out1", "out2_cbl", "out2")
    OUT_CHANNELS = (128, 256, 512)

    def __init__(self, act: str = "lrelu", kernels: CpuKernels = NATIVE):
        super().__init__()
        self.backbone = Darknet53(act=act, kernels=kernels)
        dark3, dark4, dark5 = Darknet53.OUT_CHANNELS
        c3, c4, _ = self.OUT_CHANNELS
        self.out1_cbl = BaseConv(dark5, c4, 1, 1, act=act, kernels=kernels)
        self.out1 = self._embedding(c4 + dark4, c4, act, kernels)
        self.out2_cbl = BaseConv(c4, c3, 1, 1, act=act, kernels=kernels)
        self.out2 = self._embedding(c3 + dark3, c3, act, kernels)
        self.upsample = Upsample2x(kernels)

    @staticmethod
    def _embedding(
        in_channels: int, channels: int, act: str, kernels: CpuKernels
    ) -> nn.SequentialCell:
        """1x1 to ``channels``, then 3x3 (2x channels) / 1x1 (back) twice."""
        wide = 2 * channels
        return nn.SequentialCell(
            BaseConv(in_channels, channels, 1, 1, act=act, kernels=kernels),
            BaseConv(channels, wide, 3, 1, act=act, kernels=kernels),
            BaseConv(wide, channels, 1, 1, act=act, kernels=kernels),
            BaseConv(channels, wide, 3, 1, act=act, kernels=kernels),
            BaseConv(wide, channels, 1, 1, act=act, kernels=kernels),
        )

    def construct(self, x):
        x2, x1, x0 = self.backbone(x)
        out_dark4 = self.out1(ops.concat((self.upsample(self.out1_cbl(x0)), x1), 1))
        out_dark3 = self.out2(ops.concat((self.upsample(self.out2_cbl(out_dark4)), x2), 1))
        return out_dark3, out_dark4, x0
