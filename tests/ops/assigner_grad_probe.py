"""The primitives of YOLOX's loss and its gradient on MindSpore's operators (SimOTA's
assignment inside), printed as JSON (``python -m tests.ops.assigner_grad_probe``: a process
of its own, the IR dump cannot be turned off again)."""

from __future__ import annotations

import json

import mindspore as ms
import numpy as np
from mindspore import nn

from msdet.models.loss import YOLOXLoss
from msdet.tools.chip_check.ir import list_primitives
from tests.support.loss_cases import anchor_grid, random_raw_outputs, random_targets


class LossGradient(nn.Cell):
    """The gradient of the total loss with respect to the raw head outputs."""

    def __init__(self, loss, rest):
        super().__init__()
        self.loss, self.rest = loss, rest

    def total(self, raw):
        return self.loss(raw, *self.rest)[0]

    def construct(self, raw):
        return ms.grad(self.total)(raw)


if __name__ == "__main__":
    ms.set_context(mode=ms.GRAPH_MODE, device_target="CPU")
    rng = np.random.default_rng(3)
    grids, strides = anchor_grid(64)
    raw = random_raw_outputs(rng, 2, len(strides), 4)
    targets, mask = random_targets(rng, [3, 2], 64, 4, 6)
    rest = tuple(ms.Tensor(a) for a in (grids, strides, targets, mask))
    rows = list_primitives(LossGradient(YOLOXLoss(4), rest), ms.Tensor(raw))
    print(json.dumps([[row[0], row[4], row[3]] for row in rows]))
