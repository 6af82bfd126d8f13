"""A Cell with primitives msdet's graphs do not use (Sort, CumSum) through ``check_cell``,
its findings printed as JSON. Run in a process of its own (``python -m
tests.tools.chip_check.open_world_probe``): the IR dump cannot be turned off again."""

from __future__ import annotations

import json

import mindspore as ms
import numpy as np
from mindspore import nn, ops

from msdet.tools.chip_check.cell import check_cell


class Ranked(nn.Cell):
    """Sorted scores and their running sum."""

    def construct(self, scores):
        ranked = ops.sort(scores, axis=-1, descending=True)[0]
        return ops.cumsum(ranked, axis=-1)


if __name__ == "__main__":
    ms.set_context(mode=ms.GRAPH_MODE, device_target="CPU")
    scores = ms.Tensor(np.random.default_rng(0).random((2, 16)).astype(np.float32))
    findings = check_cell(Ranked(), scores, chips=("ascend910", "ascend910b"))
    print(json.dumps([f.to_json() for f in findings]))
