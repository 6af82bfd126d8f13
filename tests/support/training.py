"""Stand-ins for the training tests: MindSpore's run context as the callbacks see it, a
network that records what it is given, a batch, and the Ascend float-status register."""

from __future__ import annotations

from types import SimpleNamespace

import mindspore as ms
import numpy as np
from mindspore import Parameter, Tensor, nn, ops


class RunContext:
    """What MindSpore hands a callback: the run's parameters and a stop request."""

    def __init__(self, **params):
        self.params = SimpleNamespace(**params)
        self.stopped = False

    def original_args(self):
        return self.params

    def request_stop(self):
        self.stopped = True


class RecordingNetwork:
    """Records what the callback asks the training network to compile."""

    def __init__(self):
        self.compiled = []

    def compile(self, *inputs):
        self.compiled.append(inputs)


def training_batch(rows: int, boxes: int = 1):
    """A batch of two 4x4 images with ``rows`` target rows, the first ``boxes`` filled."""
    targets = np.zeros((2, rows, 5), np.float32)
    targets[:, :boxes] = 7.0
    mask = np.zeros((2, rows), np.float32)
    mask[:, :boxes] = 1.0
    return (Tensor(np.zeros((2, 3, 4, 4), np.uint8)), Tensor(targets), Tensor(mask))


class FloatStatusRegister:
    """A CPU stand-in for Ascend's float-status register and its clear/get primitives:
    the forward pass sets it when it meets inf (as the device's overflow flag would)."""

    def __init__(self):
        self.value = Parameter(ms.Tensor(np.zeros(8, np.int32)), name="register")
        register = self.value

        class Clear(nn.Cell):
            def construct(self, status):
                return ops.assign(register, ops.zeros_like(register))

        class Get(nn.Cell):
            def construct(self, status):
                return register * 1

        self.ops = (Clear(), Get())


def flag_inf_input(register, x):
    """Inside a network: set the ``FloatStatusRegister`` when ``x`` holds inf, as the device
    flags an overflow anywhere in the step, and return ``x`` with its infs zeroed (so the
    gradients stay finite and only the register tells)."""
    flag = ops.isinf(x).any().astype(ms.int32) * ops.ones((8,), ms.int32)
    x = ops.depend(x, ops.assign(register, ops.maximum(register, flag)))
    return ops.select(ops.isinf(x), ops.zeros_like(x), x)
