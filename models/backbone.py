"""The YOLOX backbones: CSPDarknet (nano ... x) and Darknet53 (YOLOX-Darknet53)."""

from __future__ import annotations

from mindspore import nn

from msdet.models.layers import BaseConv, CSPLayer, Focus, ResLayer, SPPBottleneck, conv_block
from msdet.ops.cpu_kernels import NATIVE, CpuKernels


class CSPDarknet(nn.Cell):
    """Focus stem and four CSP stages; returns the dark3, dark4 and dark5 features.

    Channels are 64 * width * (1, 2, 4, 8, 16) from the stem to dark5; stage depths are
    round(3 * depth) bottlenecks (x3 in dark3/dark4).
    """

    def __init__(
        self,
        depth: float,
        width: float,
        depthwise: bool = False,
        act: str = "silu",
        kernels: CpuKernels = NATIVE,
    ):
        super().__init__()
        conv = conv_block(depthwise)
        base_ch = int(width * 64)
        base_depth = max(round(depth * 3), 1)

        self.stem = Focus(3, base_ch, ksize=3, act=act, kernels=kernels)
        self.dark2 = nn.SequentialCell(
            conv(base_ch, base_ch * 2, 3, 2, act=act, kernels=kernels),
            CSPLayer(
                base_ch * 2,
                base_ch * 2,
                n=base_depth,
                depthwise=depthwise,
                act=act,
                kernels=kernels,
            ),
        )
        self.dark3 = nn.SequentialCell(
            conv(base_ch * 2, base_ch * 4, 3, 2, act=act, kernels=kernels),
            CSPLayer(
                base_ch * 4,
                base_ch * 4,
                n=base_depth * 3,
                depthwise=depthwise,
                act=act,
                kernels=kernels,
            ),
        )
        self.dark4 = nn.SequentialCell(
            conv(base_ch * 4, base_ch * 8, 3, 2, act=act, kernels=kernels),
            CSPLayer(
                base_ch * 8,
                base_ch * 8,
                n=base_depth * 3,
                depthwise=depthwise,
                act=act,
                kernels=kernels,
            ),
        )
        self.dark5 = nn.SequentialCell(
            conv(base_ch * 8, base_ch * 16, 3, 2, act=act, kernels=kernels),
            SPPBottleneck(base_ch * 16, base_ch * 16, act=act, kernels=kernels),
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


class Darknet53(nn.Cell):
    """YOLOv3's Darknet-53 as YOLOX builds it; returns the dark3, dark4 and dark5 features.

    Each stage is a stride-2 3x3 conv doubling the channels, then residual blocks: one in
    the stem (after a stride-1 conv to 32 channels), then 2, 8, 8, 4 in dark2..dark5 (64 to
    1024 channels). dark5 ends with YOLOv3's SPP block, which brings it back to 512
    channels. Layers are numbered as the original's ``nn.Sequential``s number them, so
    parameter names match its ``backbone.backbone.*`` keys one for one.
    """

    STAGE_BLOCKS = (2, 8, 8, 4)  # residual blocks in dark2..dark5
    OUT_CHANNELS = (256, 512, 512)  # dark3, dark4, dark5

    def __init__(self, act: str = "lrelu", stem_channels: int = 32, kernels: CpuKernels = NATIVE):
        super().__init__()
        c = stem_channels * 2
        self.stem = nn.SequentialCell(
            BaseConv(3, stem_channels, 3, 1, act=act, kernels=kernels),
            *self._stage(stem_channels, 1, act, kernels),
        )
        stages = []
        for blocks in self.STAGE_BLOCKS:
            stages.append(self._stage(c, blocks, act, kernels))
            c *= 2
        self.dark2 = nn.SequentialCell(stages[0])
        self.dark3 = nn.SequentialCell(stages[1])
        self.dark4 = nn.SequentialCell(stages[2])
        # c is 1024 here: dark5's stage output. The SPP block works at half of it.
        half = c // 2
        self.dark5 = nn.SequentialCell(
            *stages[3],
            BaseConv(c, half, 1, 1, act=act, kernels=kernels),
            BaseConv(half, c, 3, 1, act=act, kernels=kernels),
            SPPBottleneck(c, half, act=act, kernels=kernels),
            BaseConv(half, c, 3, 1, act=act, kernels=kernels),
            BaseConv(c, half, 1, 1, act=act, kernels=kernels),
        )

    @staticmethod
    def _stage(in_channels: int, blocks: int, act: str, kernels: CpuKernels) -> list[nn.Cell]:
        """A stride-2 conv doubling the channels, then ``blocks`` residual blocks."""
        out = in_channels * 2
        return [BaseConv(in_channels, out, 3, 2, act=act, kernels=kernels)] + [
            ResLayer(out, act=act, kernels=kernels) for _ in range(blocks)
        ]

    def construct(self, x):
        x = self.dark2(self.stem(x))
        dark3 = self.dark3(x)
        dark4 = self.dark4(dark3)
        dark5 = self.dark5(dark4)
        return dark3, dark4, dark5
