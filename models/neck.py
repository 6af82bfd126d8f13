"""PAFPN, the YOLOX neck: top-down then bottom-up fusion of dark3..dark5."""

from __future__ import annotations

from mindspore import nn, ops

from models.backbone import CSPDarknet
from models.layers import BaseConv, CSPLayer, conv_block, upsample2x


class YOLOPAFPN(nn.Cell):
    """Backbone plus path-aggregation neck; returns features at strides 8, 16, 32.

    The backbone is an attribute named ``backbone`` (as in YOLOX, whose detector holds
    this cell as ``backbone`` too: parameter names start ``backbone.backbone.``).
    """

    def __init__(
        self,
        depth: float = 1.0,
        width: float = 1.0,
        in_channels: tuple[int, int, int] = (256, 512, 1024),
        depthwise: bool = False,
        act: str = "silu",
    ):
        super().__init__()
        self.backbone = CSPDarknet(depth, width, depthwise=depthwise, act=act)
        conv = conv_block(depthwise)
        c3, c4, c5 = (int(c * width) for c in in_channels)
        n = round(3 * depth)

        self.lateral_conv0 = BaseConv(c5, c4, 1, 1, act=act)
        self.C3_p4 = CSPLayer(2 * c4, c4, n, False, depthwise=depthwise, act=act)
        self.reduce_conv1 = BaseConv(c4, c3, 1, 1, act=act)
        self.C3_p3 = CSPLayer(2 * c3, c3, n, False, depthwise=depthwise, act=act)
        self.bu_conv2 = conv(c3, c3, 3, 2, act=act)
        self.C3_n3 = CSPLayer(2 * c3, c4, n, False, depthwise=depthwise, act=act)
        self.bu_conv1 = conv(c4, c4, 3, 2, act=act)
        self.C3_n4 = CSPLayer(2 * c4, c5, n, False, depthwise=depthwise, act=act)

    def construct(self, x):
        x2, x1, x0 = self.backbone(x)

        fpn_out0 = self.lateral_conv0(x0)
        f_out0 = self.C3_p4(ops.concat((upsample2x(fpn_out0), x1), 1))
        fpn_out1 = self.reduce_conv1(f_out0)
        pan_out2 = self.C3_p3(ops.concat((upsample2x(fpn_out1), x2), 1))

        pan_out1 = self.C3_n3(ops.concat((self.bu_conv2(pan_out2), fpn_out1), 1))
        pan_out0 = self.C3_n4(ops.concat((self.bu_conv1(pan_out1), fpn_out0), 1))
        return pan_out2, pan_out1, pan_out0
