"""The optimizer tests' problem: DecayInKernelSGD over four small weights."""

from __future__ import annotations

import mindspore as ms
import numpy as np
from mindspore import Parameter

from msdet.engine.training.optim import DecayInKernelSGD

SHAPES = ((4, 3, 3, 3), (7,), (5, 2), (1,))


def sgd_optimizer(library, nesterov: bool):
    """DecayInKernelSGD over four weights (the first decayed), with a per-step learning
    rate, on the flat kernel (library) or MindSpore's SGD per parameter (None)."""
    rng = np.random.default_rng(0)
    weights = [
        Parameter(ms.Tensor(rng.standard_normal(s).astype(np.float32)), name=f"w{i}.weight")
        for i, s in enumerate(SHAPES)
    ]
    groups = [
        {"params": weights[:1], "weight_decay": 5e-4},
        {"params": weights[1:], "weight_decay": 0.0},
    ]
    opt = DecayInKernelSGD(
        groups,
        library=library,
        eager=ms.get_context("mode") == ms.PYNATIVE_MODE,  # op by op in PyNative mode
        learning_rate=[0.1, 0.05, 0.02, 0.01],
        momentum=0.9,
        nesterov=nesterov,
        weight_decay=0.0,
    )
    return weights, opt
