"""The model EMA (YOLOX's ``ModelEMA``): an exponential moving average of every parameter and
BatchNorm statistic, kept in one flat buffer, with YOLOX's decay ramp
``decay * (1 - exp(-updates / 2000))``; its entries are what checkpoints store as ``ema.<name>``.
"""

from __future__ import annotations

import mindspore as ms
import numpy as np
from mindspore import Parameter, ParameterTuple, nn, ops

from msdet.models.weights import EMA_PREFIX, CheckpointError
from msdet.ops.ema import flat_ema_op

# ModelEMA's flat buffer: never saved under this name (checkpoints hold ema.<name> entries).
EMA_BUFFER = "ema_buffer"

EMA_RAMP = 2000.0  # YOLOX: decay * (1 - exp(-updates / 2000))


# Each Parameter as a flat float32 vector (hyper_map over a tuple of Parameters).
flat_value = ops.MultitypeFuncGraph("flat_value")


@flat_value.register("Tensor")
def flat_value_one(param):
    return param.reshape((-1,)).astype(ms.float32)


def flatten_params(arrays: list) -> np.ndarray:
    """Arrays as one float32 vector, in order (ModelEMA's buffer layout)."""
    if len(arrays) == 0:
        return np.zeros(0, np.float32)
    return np.concatenate([np.asarray(a, np.float32).ravel() for a in arrays])


class ModelEMA(nn.Cell):
    """Exponential moving average of every network parameter, BatchNorm statistics included.

    The averages live in one flat float32 Parameter, :data:`EMA_BUFFER` (every parameter
    flattened, in the network's order): one step updates it with one ``Concat``, one
    ``Lerp`` and one ``Assign``, where a Parameter per weight took a ``Lerp`` and an
    ``Assign`` each, ~1,080 operators of a YOLOX-nano step. Checkpoints keep one entry per weight, ``ema.<name>``, as before:
    :meth:`checkpoint_entries` splits the buffer when a checkpoint is written and
    :meth:`pack` joins the entries when one is loaded (:mod:`msdet.engine.training.checkpoints`).
    """

    def __init__(
        self,
        network: nn.Cell,
        decay: float = 0.9998,
        library: str | None = None,
        eager: bool = False,
    ):
        super().__init__()
        self.decay = decay
        # Parameter names, not cell paths: mixed precision wraps cells (the path of a BN
        # weight gains a segment) but keeps each parameter's own name.
        params = list(network.get_parameters())
        self.sources = ParameterTuple(params)
        self.names = [p.name for p in params]
        self.shapes = [tuple(p.shape) for p in params]
        arrays = [p.asnumpy() for p in params]
        self.np_dtypes = [a.dtype for a in arrays]
        sizes = [int(np.prod(shape)) for shape in self.shapes]
        self.offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        self.buffer = Parameter(
            ms.Tensor(flatten_params(arrays)),
            name=EMA_BUFFER,
            requires_grad=False,
        )
        self.updates = Parameter(
            ms.Tensor(0.0, ms.float32), name="ema_updates", requires_grad=False
        )
        self.hyper_map = ops.HyperMap()
        # A tensor divisor: `x / 2000.0` is MindSpore 2.10's Divs, which has no GE adapter.
        self.ramp = ms.Tensor(EMA_RAMP, ms.float32)
        # On CPU, the update as one operator reading the parameters in place (ops.ema: the
        # same bits), given msdet's kernel library (CpuKernels.library_for("ema")).
        float32 = all(a.dtype == np.float32 for a in arrays)
        self.flat = (
            flat_ema_op(library, len(params), eager) if library and float32 and params else None
        )

    def construct(self, moves=None):
        # `moves` (a boolean; an accumulation window's last call): False leaves the averages
        # and the update count as they are (a weight of 0), a select rather than a branch.
        step = 1.0 if moves is None else moves.astype(ms.float32)
        updates = self.updates + step
        ops.assign(self.updates, updates)
        d = self.decay * (1.0 - ops.exp(ops.div(-updates, self.ramp)))
        weight = 1.0 - d
        if moves is not None:
            weight = weight * step
        if self.flat is not None:
            return self.flat(weight, *self.sources, self.buffer)
        # ema + (1 - d) * (value - ema) == d * ema + (1 - d) * value, in one Lerp kernel
        values = ops.concat(self.hyper_map(flat_value, self.sources))
        return ops.assign(self.buffer, ops.lerp(self.buffer, values, weight))

    def named_averages(self) -> dict[str, np.ndarray]:
        """{parameter name: its average}, each in its parameter's shape and dtype."""
        flat = self.buffer.asnumpy()
        return {
            name: flat[a:b].reshape(shape).astype(dtype)
            for name, shape, dtype, a, b in zip(
                self.names, self.shapes, self.np_dtypes, self.offsets[:-1], self.offsets[1:]
            )
        }

    def checkpoint_entries(self) -> dict[str, ms.Tensor]:
        """The averages as a checkpoint stores them: ``ema.<name>`` -> Tensor."""
        return {EMA_PREFIX + k: ms.Tensor(v) for k, v in self.named_averages().items()}

    def pack(self, params: dict, source: str) -> None:
        """Replace the ``ema.<name>`` entries of a checkpoint dict by :data:`EMA_BUFFER`,
        in place; a missing or mis-shaped entry is an error that names it."""
        arrays = []
        for name, shape in zip(self.names, self.shapes):
            key = EMA_PREFIX + name
            if key not in params:
                raise CheckpointError(
                    f"{source}: parameter {key!r} of the training step is missing from the "
                    "checkpoint (a different architecture? check model=...)"
                )
            have = tuple(params[key].shape)
            if have != shape:
                raise CheckpointError(
                    f"{source}: parameter {key!r} has shape {have} in the checkpoint but "
                    f"{shape} in the model"
                )
            arrays.append(params.pop(key).asnumpy())
        params[EMA_BUFFER] = Parameter(ms.Tensor(flatten_params(arrays)), name=EMA_BUFFER)
