"""CSPDarknet, the YOLOX backbone."""

from __future__ import annotations

from mindspore import nn

from models.layers import CSPLayer, Focus, SPPBottleneck, conv_block


class CSPDarknet(nn.Cell):
    """Focus stem and four CSP stages; returns the dark3, dark4 and dark5 features.

    Channels are 64 * width * (1, 2, 4, 8, 16) from the stem to dark5; stage depths are
    round(3 * depth) bottlenecks (x3 in dark3/dark4).
    """

    def __init__(self, depth: float, width: float, depthwise: bool = False, act: str = "silu"):
        super().__init__()
        conv = conv_block(depthwise)
        base_ch = int(width * 64)
        base_depth = max(round(depth * 3), 1)

        self.stem = Focus(3, base_ch, ksize=3, act=act)
        self.dark2 = nn.SequentialCell(
            conv(base_ch, base_ch * 2, 3, 2, act=act),
            CSPLayer(base_ch * 2, base_ch * 2, n=base_depth, depthwise=depthwise, act=act),
        )
        self.dark3 = nn.SequentialCell(
            conv(base_ch * 2, base_ch * 4, 3, 2, act=act),
            CSPLayer(base_ch * 4, base_ch * 4, n=base_depth * 3, depthwise=depthwise, act=act),
        )
        self.dark4 = nn.SequentialCell(
            conv(base_ch * 4, base_ch * 8, 3, 2, act=act),
            CSPLayer(base_ch * 8, base_ch * 8, n=base_depth * 3, depthwise=depthwise, act=act),
        )
        self.dark5 = nn.SequentialCell(
            conv(base_ch * 8, base_ch * 16, 3, 2, act=act),
            SPPBottleneck(base_ch * 16, base_ch * 16, act=act),
            CSPLayer(
                base_ch * 16,
                base_ch * 16,
                n=base_depth,
                shortcut=False,
                depthwise=depthwise,
                act=act,
            ),
        )

    def construct(self, x):
        x = self.dark2(self.stem(x))
        dark3 = self.dark3(x)
        dark4 = self.dark4(dark3)
        dark5 = self.dark5(dark4)
        return dark3, dark4, dark5
