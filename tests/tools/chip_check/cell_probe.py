"""A user's own Cell through ``check_cell``, its findings printed as JSON.

Run in a process of its own (``python -m tests.tools.chip_check.cell_probe``): the IR dump it
turns on cannot be turned off again in that process (MindSpore 2.10)."""

from __future__ import annotations

import json

import mindspore as ms
import numpy as np
from mindspore import nn, ops

from msdet.tools.chip_check.cell import check_cell


class Ranker(nn.Cell):
    """A port's post-processing in miniature: a float32 TopK and NMSWithMask on [N, 5]."""

    def __init__(self):
        super().__init__()
        self.nms = ops.NMSWithMask(0.5)

    def construct(self, costs, boxes):
        top = ops.topk(-costs, 4)[0]
        kept = self.nms(boxes)[2]
        return top, kept


if __name__ == "__main__":
    ms.set_context(mode=ms.GRAPH_MODE, device_target="CPU")
    costs = ms.Tensor(np.random.default_rng(0).random((3, 16)).astype(np.float32))
    boxes = ms.Tensor(np.array([[0, 0, 10, 10, 0.9]] * 6, np.float32))
    findings = check_cell(Ranker(), costs, boxes, largest={"TopK": 1e9})
    print(json.dumps([f.to_json() for f in findings]))
