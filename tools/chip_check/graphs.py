"""The graphs msdet runs on each Ascend chip, built on the CPU with msdet's own builders and
listed by MindSpore's IR dump (:mod:`.ir`).

- training chips (``ascend910``: the Atlas training series, ``ascend910b``: A2): the training
  step as ``train.py`` builds it there (AMP at the level ``runtime.amp`` resolves to on
  Ascend, dynamic loss scaling, the float-status register where the chip reads overflow
  from it), the evaluation network (float32, as ``TrainingEvaluation`` builds it) and the
  evaluation's NMS (on the device where the chip runs it, else only its candidate stage:
  the suppression runs on the host); with ``cards`` > 1 also the data-parallel training
  step of that many cards (``train_8p`` for 8: the gradient reducer's AllReduce, the
  overflow flag's AllReduce and SyncBatchNorm, ``runtime.sync_bn=true``, the superset of
  the plain one). MindSpore builds these primitives without a launcher as long as nothing
  asks for the rank: the gradient reducer is given the card count, and each BatchNorm gets
  the ``SyncBatchNorm`` primitive ``nn.SyncBatchNorm`` builds on Ascend (group
  ``hccl_world_group``, the card count), so no rank has to run on this CPU;
- inference chips (``ascend310p``, ``ascend310b``): the exported network as
  ``engine.inference.deploy`` takes it to ATC (without NMS: CANN's NMSWithMask kernels
  take [N, 8] boxes, which MindSpore does not build; NMS runs on the host).

Every graph is built on MindSpore's operators (no msdet CPU kernel exists on a card), at a
small input size: the operators and their dtypes do not depend on it. Both training loops
run the same step Cell (``runtime.loop=jit`` compiles it with ``mindspore.jit``), so the
listing holds for both; what the jit loop changes is the backend on the Atlas training
series (``engine.runtime.ascend.graph_backends``: kernel by kernel, where ``Model.train``
defaults to GE) and, with several ranks, the gradient mean (an AllReduce and a Mul either
way).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np

from msdet.tools.chip_check.ir import Row

TRAINING_CHIPS = ("ascend910", "ascend910b")
INFERENCE_CHIPS = ("ascend310p", "ascend310b")
NUM_CLASSES = 80


def chip_runtime(runtime_cfg: Any, chip: str, loop: str = "model") -> tuple[Any, Any]:
    """(runtime, training graphs' backend) of msdet on ``chip``: ``setup_runtime`` run against
    the chip stood in on this CPU (``engine.runtime.standin``: the chip's answers as the
    installed MindSpore release asks them) and the backend the run plan gives ``loop``'s
    training graphs there (``engine.runtime.ascend.graph_backends``), so the check judges what
    msdet really sets. ``runtime_cfg``: the ``runtime`` config group (its ``amp``,
    ``jit_level``, ``precision_mode``)."""
    import tempfile

    from omegaconf import OmegaConf

    from msdet.engine.runtime.ascend import graph_backends
    from msdet.engine.runtime.process import setup_runtime
    from msdet.engine.runtime.standin import StandInAscend

    cfg = OmegaConf.merge(runtime_cfg, {"device": "Ascend", "cpu_kernels": "native",
                                        "distributed": False, "save_graphs": False})  # fmt: skip
    with StandInAscend(chip):
        rt = setup_runtime(cfg, tempfile.gettempdir())
    backend = graph_backends(loop, rt.chip_profile, cfg.jit_level, rt.rank_table)["train"]
    return rt, backend


def graph_rows(
    cfg: Any,
    rt: Any,
    chip: str,
    img: int = 128,
    batch: int = 2,
    cards: int = 1,
    rewrite: Callable[[dict], list[dict]] | None = None,
) -> list[Row]:
    """Every primitive of the graphs msdet runs on ``chip``, with input dtypes as compiled
    (``cards`` > 1: also the data-parallel training step of that many cards; ``rewrite``: a
    pass of MindSpore's Ascend backend applied to each IR node of a training chip's graphs,
    :func:`.depthwise.rewrite_node`; the exported network goes to ATC, not through it)."""
    import mindspore as ms

    from msdet.models.inference import InferenceNet, build_nms
    from msdet.models.yolox import build_model
    from msdet.tools.chip_check.ir import list_primitives

    chip_rt, _ = chip_runtime(cfg.runtime, chip, str(cfg.runtime.get("loop", "model")))
    rows: list[Row] = []

    backend_pass = rewrite if chip in TRAINING_CHIPS else None

    def add(graph: str, cell, *inputs) -> None:
        listed = list_primitives(cell, *inputs, by_cell=True, rewrite=backend_pass)
        for prim, dtypes, shapes, count, scope in listed:
            rows.append(Row(graph, prim, dtypes, shapes, count, scope))

    images = ms.Tensor(np.zeros((batch, 3, img, img), np.float32))
    if chip in TRAINING_CHIPS:
        add("train", *training_step(cfg, chip_rt, img, batch))
        if cards > 1:
            ranks = dataclasses.replace(chip_rt, world_size=cards, sync_bn=True)
            add(distributed_graph(cards), *training_step(cfg, ranks, img, batch))
        eval_net = InferenceNet(build_model(cfg.model, NUM_CLASSES))
        eval_net.set_train(False)
        add("eval", eval_net, images)
        nms = build_nms(cfg.eval, NUM_CLASSES, on_host=chip_rt.host_nms)
        nms_cell = nms.candidates if chip_rt.host_nms else nms
        anchors = sum((img // s) ** 2 for s in (8, 16, 32))
        preds = ms.Tensor(np.zeros((batch, anchors, 5 + NUM_CLASSES), np.float32))
        add("nms", nms_cell, preds)
    else:
        exported = InferenceNet(build_model(cfg.model, NUM_CLASSES))
        exported.set_train(False)
        add("export", exported, ms.Tensor(np.zeros((1, 3, img, img), np.float32)))
    return rows


def distributed_graph(cards: int) -> str:
    """The name of the data-parallel training graph of ``cards`` cards."""
    return f"train_{cards}p"


def sync_batchnorm_primitives(network: Any, cards: int) -> int:
    """Give every BatchNorm of ``network`` the ``SyncBatchNorm`` primitive that
    ``nn.SyncBatchNorm`` builds on Ascend over all ``cards`` (MindSpore 2.10
    ``nn/layer/normalization.py``), without asking a launcher for the rank as
    ``models.sync_batchnorm`` does; returns how many."""
    from mindspore import nn
    from mindspore.ops.operations import _inner_ops as inner

    count = 0
    for _, cell in network.cells_and_names():
        if type(cell) is nn.BatchNorm2d:
            cell.bn_train = inner.SyncBatchNorm(epsilon=cell.eps, momentum=cell.momentum,
                                                group="hccl_world_group", device_num=cards)  # fmt: skip
            count += 1
    return count


def gradient_reducer(cfg: Any, cards: int) -> Any:
    """The gradient mean ``runtime.loop``'s loop builds over ``cards`` cards (None for one):
    the jit loop's buckets or ``Model.train``'s reducer, each given the card count, so no
    rank has to run here."""
    if cards <= 1:
        return None
    from msdet.engine.training.plan import Loop

    if Loop.parse(cfg.runtime.get("loop", "model")) is Loop.JIT:
        from msdet.engine.runtime.distributed import world_group
        from msdet.engine.training.jit_loop import GradientMean

        return lambda params: GradientMean(cards, world_group(), [p.shape for p in params])
    from mindspore import nn

    return lambda params: nn.DistributedGradReducer(params, mean=True, degree=cards)


def training_step(cfg: Any, rt: Any, img: int, batch: int) -> tuple:
    """train.py's training step for ``rt`` and a batch of its inputs (uint8 HWC images)."""
    import mindspore as ms

    from msdet.engine.runtime.amp import apply_amp
    from msdet.engine.training.schedule import yolox_lr_schedule
    from msdet.engine.training.step import build_train_step
    from msdet.models.loss import YOLOXLoss
    from msdet.models.yolox import build_model

    net = build_model(cfg.model, NUM_CLASSES)
    if rt.sync_bn:
        sync_batchnorm_primitives(net, rt.world_size)
    net = apply_amp(net, rt)
    loss = YOLOXLoss(NUM_CLASSES, assigner_rule=str(cfg.train.assigner.rule))
    step = build_train_step(
        net, loss, yolox_lr_schedule(0.01, 10, 1, 0, 0), cfg.train, rt,
        skip_nonfinite=bool(cfg.runtime.check_finite),
        grad_reducer=gradient_reducer(cfg, rt.world_size),
    )  # fmt: skip
    rows = int(cfg.data.max_objects)
    images = ms.Tensor(np.zeros((batch, img, img, 3), np.uint8))
    targets = ms.Tensor(np.zeros((batch, rows, 5), np.float32))
    mask = ms.Tensor(np.zeros((batch, rows), np.float32))
    return step, images, targets, mask
