"""Stand-ins for the training tests: MindSpore's run context as the callbacks see it, the
callbacks' state, the training step's outputs and in-graph statistics, a network that
records what it is given, a batch, the Ascend float-status register, and the scalars a run
wrote for TensorBoard."""

from __future__ import annotations

import glob
import struct
from types import SimpleNamespace

import mindspore as ms
import numpy as np
from mindspore import Parameter, Tensor, mutable, nn, ops
from omegaconf import OmegaConf

from msdet.engine.training.callbacks.base import TrainState
from msdet.engine.training.step_stats import StepStatistics


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


def step_outputs(lr=0.01, scale=1.0):
    """The training step's outputs, in engine.training.step.TrainStep's order (the callbacks
    read only the last step's lr and loss scale from them)."""
    return [Tensor(np.float32(v)) for v in (0, 0, 0, 0, 0, 0, lr, scale, 0)]


def record_step(stats: StepStatistics, total, iou=1.0, obj=1.0, cls=1.0, l1=0.0, fg=10.0, skip=0):
    """One training step as the training graph records it."""
    losses = tuple(Tensor(np.float32(v)) for v in (total, iou, obj, cls, l1, fg))
    stats(mutable(losses), mutable(Tensor(bool(skip))))  # variables: no recompile per call


def train_state(epochs=5, steps=4, **kw) -> TrainState:
    """The callbacks' shared state for ``epochs`` epochs of ``steps`` steps of 8 images."""
    return TrainState(epochs=epochs, steps_per_epoch=steps, total_batch=8, **kw)


def tensorboard_scalars(log_dir) -> dict[str, list[tuple[int, float]]]:
    """{tag: [(step, value), ...]} from the TensorBoard event files in ``log_dir``."""
    from tensorboardX.proto import event_pb2

    scalars: dict[str, list[tuple[int, float]]] = {}
    for path in sorted(glob.glob(f"{log_dir}/events.out.tfevents.*")):
        with open(path, "rb") as f:
            data = f.read()
        pos = 0
        while pos < len(data):  # TFRecord: length, crc, payload, crc
            (length,) = struct.unpack("<Q", data[pos : pos + 8])
            event = event_pb2.Event.FromString(data[pos + 12 : pos + 12 + length])
            pos += 12 + length + 4
            for value in event.summary.value:
                scalars.setdefault(value.tag, []).append((event.step, value.simple_value))
    return scalars


# The training step's small problem: one weight pair, the optimizer settings.
SGD_CFG = OmegaConf.create({"momentum": 0.9, "nesterov": True, "weight_decay": 0.0})


class Quadratic(nn.Cell):
    """loss = sum((w - x)^2) with the output tuple shape of DetectorWithLoss."""

    def __init__(self):
        super().__init__()
        self.w = Parameter(ms.Tensor(np.array([1.0, -2.0], np.float32)), name="w")

    def construct(self, x, targets, mask):
        loss = ((self.w - x) ** 2).sum() * targets.sum() * mask.sum()
        zero = ops.zeros((), ms.float32)
        return loss, zero, zero, zero, zero, zero


def training_loop(cfg, rt, train_images: int = 64, classes: int = 80):
    """The training loop a run of ``cfg`` on ``rt`` builds (``engine.training.loops``), from
    its plan over a dataset of ``train_images`` images: its execution mode and data-parallel
    context set, its gradient reducer ready for ``build_train_step``."""
    from msdet.engine.training.plan import DataSummary, plan_run
    from msdet.engine.training.trainer import build_loop

    data = DataSummary("test", train_images, 8, tuple(f"c{i}" for i in range(classes)))
    return build_loop(plan_run(cfg, rt, data), rt)
