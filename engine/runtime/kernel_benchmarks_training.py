"""The training side's benchmarks behind ``runtime.cpu_kernels=auto``: SimOTA's assignment,
the loss's terms, SGD and the EMA over all of YOLOX-nano's parameters, and NMS; each a pair of
functions for :data:`engine.runtime.kernel_choice.DECISIONS`, as the network's layers'
benchmarks in ``engine.runtime.kernel_benchmarks`` (whose docstring says how they are built
and timed).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from msdet.engine.runtime.kernel_benchmarks import BATCH

# The assignment's shapes: target rows per image, real boxes among them, anchors at 320 px
# (strides 8, 16, 32), classes.
ASSIGN_ROWS, ASSIGN_REAL, ASSIGN_SIDE, ASSIGN_CLASSES = 50, 5, 320, 80

# The share of anchors in the foreground at the loss: ~290 of 8 x 2,100 in the default run's
# last epoch (its log's "fg"): 1.7%.
LOSS_FG_SHARE = 0.02

# Post-processing's shapes: the side (3,549 anchors), the share of anchors whose score
# passes eval.conf_thresh (0.01), and eval's defaults (threshold, IoU, top-k, max_det).
NMS_SIDE, NMS_VALID_SHARE, NMS_SETTINGS = 416, 0.2, (0.01, 0.65, 1000, 100)

SGD_RECIPE = (0.9, 5e-4)  # momentum (Nesterov), weight decay: the yolox recipe


def nano_parameter_shapes() -> list[tuple[int, ...]]:
    """The shapes of YOLOX-nano's trainable parameters at 80 classes (912,159 values): what
    the optimizer updates each step. Convolution weights (more than one dimension) take weight
    decay; BatchNorm scales and shifts and biases do not."""
    from msdet.models.yolox import build_model, load_model_config

    net = build_model(load_model_config("yolox_nano"), 80)
    return [tuple(p.shape) for p in net.trainable_params()]


def assigner(library: str, kernels: Sequence[str], rng) -> Any:
    """SimOTA's assigner (forward only: it runs outside the gradient), on its compiled
    operators if ``kernels`` has them."""
    from msdet.ops.assigner import SimOTAAssigner

    return SimOTAAssigner(ASSIGN_CLASSES, library=library if "assigner" in kernels else None)


def assigner_inputs(rng, steps: Mapping[str, Any]) -> tuple:
    """The assigner's inputs at the training step's shapes: random predictions, a few real
    boxes per image among padded rows."""
    import mindspore as ms
    import numpy as np

    grid, stride = _anchor_grid(ASSIGN_SIDE)
    a = len(stride)
    pred = np.concatenate(
        [rng.uniform(0, ASSIGN_SIDE, (BATCH, a, 2)), np.exp(rng.uniform(1, 4, (BATCH, a, 2)))], -1
    )
    boxes = np.zeros((BATCH, ASSIGN_ROWS, 4))
    boxes[:, :ASSIGN_REAL, :2] = rng.uniform(40, ASSIGN_SIDE - 40, (BATCH, ASSIGN_REAL, 2))
    boxes[:, :ASSIGN_REAL, 2:] = rng.uniform(16, 80, (BATCH, ASSIGN_REAL, 2))
    mask = np.zeros((BATCH, ASSIGN_ROWS))
    mask[:, :ASSIGN_REAL] = 1.0
    classes = rng.integers(0, ASSIGN_CLASSES, (BATCH, ASSIGN_ROWS))
    f32 = np.float32
    return tuple(
        ms.Tensor(x)
        for x in (
            pred.astype(f32),
            rng.standard_normal((BATCH, a)).astype(f32),
            rng.standard_normal((BATCH, a, ASSIGN_CLASSES)).astype(f32),
            grid.astype(f32),
            stride.astype(f32),
            boxes.astype(f32),
            classes.astype(np.int32),
            mask.astype(f32),
        )
    )


def loss(library: str, kernels: Sequence[str], rng) -> Any:
    """The loss's four terms (``ops.loss_terms.LossTerms``), weighted and summed, with their
    gradient w.r.t. the head's output, as the training step runs them: on msdet's operator
    for all four if ``kernels`` has ``loss_terms``, else on MindSpore's operators with the
    class term on its own kernel if ``kernels`` has ``class_bce``. Returns (loss,
    gradient)."""
    import mindspore as ms
    import numpy as np
    from mindspore import nn

    from msdet.ops.loss_terms import LossTerms

    weights = ms.Tensor(np.array([5.0, 1.0, 1.0, 1.0], np.float32))  # the IoU term's weight

    class Step(nn.Cell):
        def __init__(self):
            super().__init__()
            self.terms = LossTerms(
                ASSIGN_CLASSES,
                library if "loss_terms" in kernels else None,
                library if "class_bce" in kernels else None,
            )
            self.grad_fn = ms.value_and_grad(self.forward, 0)

        def forward(self, raw, grids, strides, box_target, fg, cls, iou):
            return (self.terms(raw, grids, strides, box_target, fg, cls, iou) * weights).sum()

        def construct(self, *inputs):
            return self.grad_fn(*inputs)

    step = Step()
    step.set_train(True)
    return step


def loss_inputs(rng, steps: Mapping[str, Any]) -> tuple:
    """The terms' inputs at the training step's shapes: random head outputs, matched boxes
    near their anchors, classes and IoUs, :data:`LOSS_FG_SHARE` of the anchors in the
    foreground."""
    import mindspore as ms
    import numpy as np

    grid, stride = _anchor_grid(ASSIGN_SIDE)
    a = len(stride)
    centres = (grid + 0.5) * stride[:, None] + rng.normal(0, 4, (BATCH, a, 2))
    sizes = stride[None, :, None] * np.exp(rng.normal(0, 0.5, (BATCH, a, 2)))
    f32 = np.float32
    return tuple(
        ms.Tensor(x)
        for x in (
            rng.standard_normal((BATCH, a, 5 + ASSIGN_CLASSES)).astype(f32),
            grid.astype(f32),
            stride.astype(f32),
            np.concatenate([centres, sizes], -1).astype(f32),
            (rng.random((BATCH, a)) < LOSS_FG_SHARE).astype(f32),
            rng.integers(0, ASSIGN_CLASSES, (BATCH, a)).astype(np.int32),
            rng.random((BATCH, a)).astype(f32),
        )
    )


def _anchor_grid(side: int):
    """The anchor points at ``side`` px (strides 8, 16, 32): grid cells [A, 2] and strides
    [A], numpy, as ``models.head.make_grid`` lays them out."""
    import numpy as np

    grids, strides = [], []
    for stride in (8, 16, 32):
        n = side // stride
        ys, xs = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")
        grids.append(np.stack([xs.ravel(), ys.ravel()], -1))
        strides.append(np.full(n * n, stride))
    return np.concatenate(grids), np.concatenate(strides)


def sgd(library: str, kernels: Sequence[str], rng) -> Any:
    """One step of SGD with Nesterov momentum and weight decay over YOLOX-nano's parameters
    (:func:`nano_parameter_shapes`): one ``SGD`` operator per parameter, as
    ``engine.training.optim`` runs it on MindSpore's operators, or msdet's one operator for all if
    ``kernels`` has it. Called with the gradients; returns (the first weight's sum after the
    step,), so the update must have run."""
    import mindspore as ms
    import numpy as np
    from mindspore import nn, ops

    from msdet.ops.sgd import flat_sgd_op

    momentum, decay = SGD_RECIPE
    shapes = nano_parameter_shapes()
    decays = [decay if len(shape) > 1 else 0.0 for shape in shapes]

    def f32(*values):
        return ms.Tensor(np.array(values, np.float32))

    class Update(nn.Cell):
        def __init__(self):
            super().__init__()
            self.weights = ms.ParameterTuple(
                ms.Parameter(f32(*rng.uniform(-0.1, 0.1, shape).ravel()).reshape(shape), f"w{i}")
                for i, shape in enumerate(shapes)
            )
            self.accum = self.weights.clone("accum", "zeros")
            self.stat = self.weights.clone("stat", "ones")
            self.lr, self.momentum, self.decays = f32(1e-3), f32(momentum), f32(*decays)
            self.settings = (f32(0.0), f32(1.0))  # dampening, Nesterov
            self.flat = flat_sgd_op(library, len(shapes)) if "sgd" in kernels else None
            self.each = tuple(ops.SGD(0.0, d, True) for d in decays)

        def construct(self, *grads):
            if self.flat is None:
                done = ()
                for op, weight, grad, accum, stat in zip(
                    self.each, self.weights, grads, self.accum, self.stat
                ):
                    done = done + (op(weight, grad, self.lr, accum, self.momentum, stat),)
            else:
                dampening, nesterov = self.settings
                done = self.flat(
                    self.lr, self.momentum, dampening, nesterov, self.decays,
                    *grads, *self.weights, *self.accum, *self.stat,
                )  # fmt: skip
            after = ops.depend(ops.zeros((), ms.float32), done)
            return (after + self.weights[0].sum(),)

    return Update()


def sgd_inputs(rng, steps: Mapping[str, Any]) -> tuple:
    """One gradient per parameter of :func:`sgd`'s Cells."""
    import mindspore as ms
    import numpy as np

    weights = next(iter(steps.values())).weights
    return tuple(ms.Tensor(rng.standard_normal(p.shape).astype(np.float32) * 1e-3) for p in weights)


def ema(library: str, kernels: Sequence[str], rng) -> Any:
    """One update of a flat EMA buffer over YOLOX-nano's trainable parameters (the table of
    :func:`sgd`; the model's EMA also averages its BatchNorm statistics): ``Reshape``s,
    ``Concat``, ``Lerp`` and ``Assign``, as ``engine.training.ema.ModelEMA`` runs on
    MindSpore's operators, or msdet's one operator if ``kernels`` has it. Returns (the
    buffer's first value after the update,)."""
    import mindspore as ms
    import numpy as np
    from mindspore import nn, ops

    from msdet.ops.ema import flat_ema_op

    shapes = nano_parameter_shapes()

    class Update(nn.Cell):
        def __init__(self):
            super().__init__()
            self.sources = ms.ParameterTuple(
                ms.Parameter(ms.Tensor(rng.standard_normal(shape).astype(np.float32)), f"p{i}")
                for i, shape in enumerate(shapes)
            )
            total = sum(int(np.prod(shape)) for shape in shapes)
            self.buffer = ms.Parameter(ms.Tensor(np.zeros(total, np.float32)), "buffer")
            self.weight = ms.Tensor(np.array([1e-4], np.float32))
            self.flat = flat_ema_op(library, len(shapes)) if "ema" in kernels else None

        def construct(self):
            if self.flat is None:
                values = ops.concat([p.reshape((-1,)) for p in self.sources])
                done = ops.assign(self.buffer, ops.lerp(self.buffer, values, self.weight))
            else:
                done = self.flat(self.weight, *self.sources, self.buffer)
            after = ops.depend(ops.zeros((), ms.float32), done)
            return (after + self.buffer[0],)

    return Update()


def ema_inputs(rng, steps: Mapping[str, Any]) -> tuple:
    """None: the EMA's Cells hold their sources."""
    return ()


def nms(library: str, kernels: Sequence[str], rng) -> Any:
    """:class:`ops.nms.BatchedNMS` at eval's defaults, 80 classes, on the greedy NMS
    operator if ``kernels`` has it (else ``NMSWithMask``)."""
    from msdet.ops.nms import BatchedNMS

    conf, iou, topk, max_det = NMS_SETTINGS
    return BatchedNMS(
        ASSIGN_CLASSES, conf, iou, topk, max_det, library=library if "nms" in kernels else None
    )


def nms_inputs(rng, steps: Mapping[str, Any]) -> tuple:
    """Decoded predictions [8, A, 85] at ``NMS_SIDE``: boxes anywhere in the image, a share
    ``NMS_VALID_SHARE`` of the anchors confident enough to be candidates."""
    import mindspore as ms
    import numpy as np

    a = sum((NMS_SIDE // stride) ** 2 for stride in (8, 16, 32))
    centres = rng.uniform(0, NMS_SIDE, (BATCH, a, 2))
    sizes = rng.uniform(8, NMS_SIDE / 3, (BATCH, a, 2))
    confident = rng.uniform(size=(BATCH, a, 1)) < NMS_VALID_SHARE
    objectness = np.where(confident, rng.uniform(0.1, 1, (BATCH, a, 1)), 1e-3)
    classes = rng.uniform(0, 1, (BATCH, a, ASSIGN_CLASSES))
    pred = np.concatenate([centres, sizes, objectness, classes], -1)
    return (ms.Tensor(pred.astype(np.float32)),)
