"""A small network's primitives as the chip check's IR listing reads them, printed as JSON.

Run in a process of its own (``python -m tests.tools.chip_check.ir_probe``): once a process has
turned MindSpore's IR dump on it cannot be turned off (MindSpore 2.10), so a test that
listed primitives in-process would leave every later compile of its worker dumping."""

from __future__ import annotations

import json

import mindspore as ms
import numpy as np
from mindspore import nn, ops

from msdet.tools.chip_check.ir import list_primitives


class Net(nn.Cell):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)

    def construct(self, x):
        y = ops.cast(self.conv(x), ms.float16)
        return ops.topk(y.reshape(2, -1), 3)[0]


if __name__ == "__main__":
    ms.set_context(mode=ms.GRAPH_MODE, device_target="CPU")
    rows = list_primitives(Net(), ms.Tensor(np.zeros((2, 3, 8, 8), np.float32)))
    print(json.dumps(rows))
