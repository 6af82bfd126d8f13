"""The primitives of the compiled training step with its skip as a select and as a branch,
and with a gradient-accumulation window, printed as JSON (``python -m tests.engine.training.branch_probe``: a process of its own, the
IR dump cannot be turned off again)."""

from __future__ import annotations

import json

import mindspore as ms
import numpy as np
from omegaconf import OmegaConf

from msdet.engine.training.optim import build_optimizer
from msdet.engine.training.step import TrainStep
from msdet.tools.chip_check.cell import check_cell
from msdet.tools.chip_check.ir import list_primitives
from tests.support.branching_step import Affine, BranchingStep

CFG = OmegaConf.create({"momentum": 0.9, "nesterov": True, "weight_decay": 5e-4})

if __name__ == "__main__":
    ms.set_context(mode=ms.GRAPH_MODE, device_target="CPU")
    one = ms.Tensor(np.ones(1, np.float32))
    x = ms.Tensor(np.ones(3, np.float32))
    found = {}
    variants = (("select", TrainStep, 1), ("branch", BranchingStep, 1), ("window", TrainStep, 4))
    for name, cls, k in variants:
        net = Affine()
        extra = {"accumulate": k} if k > 1 else {}
        step = cls(net, build_optimizer(net, 0.1, CFG), skip_nonfinite=True, **extra)
        step.set_train(True)
        rows = list_primitives(step, x, one, one, include_virtual=True)
        found[name] = sorted({row[0] for row in rows})
        findings = check_cell(step, x, one, one, chips=("ascend910b",), sunk=True)
        found[name + "_failing"] = sorted({f.prim: f.verdict for f in findings
                                           if f.verdict == "control-flow"}.items())  # fmt: skip
    print(json.dumps(found))
