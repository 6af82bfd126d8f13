"""The YOLOX detector Cell and its builder."""

from __future__ import annotations

import os
from typing import Any

from mindspore import nn, ops
from omegaconf import DictConfig, OmegaConf

from msdet.common.config import CONFIG_DIR
from msdet.models.head import YOLOXHead
from msdet.models.neck import YOLOFPN, YOLOPAFPN
from msdet.ops.batchnorm_silu import BatchNormSiLU
from msdet.ops.cpu_kernels import NATIVE, CpuKernels

MODEL_CONFIG_DIR = os.path.join(CONFIG_DIR, "model")


def model_names() -> list[str]:
    """The models msdet knows (configs/model/*.yaml): yolox_nano ... yolox_x, yolox_darknet53."""
    return sorted(f[:-5] for f in os.listdir(MODEL_CONFIG_DIR) if f.endswith(".yaml"))


def load_model_config(name: str) -> DictConfig:
    """The ``model`` config group entry for ``name`` (for tools that run without Hydra)."""
    path = os.path.join(MODEL_CONFIG_DIR, f"{name}.yaml")
    if not os.path.isfile(path):
        raise ValueError(f"unknown model {name!r}; choose one of {model_names()}")
    return OmegaConf.load(path)


# Architecture fields that checkpoint descriptions written before YOLOX-Darknet53 leave out:
# what nano ... x are, so those checkpoints build the same network. (Every model config
# names them.)
ARCHITECTURE_DEFAULTS: dict[str, Any] = {
    "backbone": "cspdarknet",
    "neck": "pafpn",
    "act": "silu",
    "in_channels": [256, 512, 1024],
}


def architecture(cfg: Any) -> dict[str, Any]:
    """The fields of a ``model`` config that fix the network, as plain values.

    backbone/neck: ``cspdarknet``/``pafpn`` (nano ... x) or ``darknet53``/``yolofpn``;
    depth, width, depthwise, act; in_channels: the head's input channels before ``width``
    (YOLOX's ``in_channels``). Fields a config leaves out take ``ARCHITECTURE_DEFAULTS``.
    """
    d = ARCHITECTURE_DEFAULTS
    return {
        "backbone": str(cfg.get("backbone", d["backbone"])),
        "neck": str(cfg.get("neck", d["neck"])),
        "depth": float(cfg.depth),
        "width": float(cfg.width),
        "depthwise": bool(cfg.depthwise),
        "act": str(cfg.get("act", d["act"])),
        "in_channels": [int(c) for c in cfg.get("in_channels", d["in_channels"])],
    }


class YOLOX(nn.Cell):
    """Backbone + neck (``backbone``) and decoupled head (``head``), as in YOLOX.

    See :class:`models.head.YOLOXHead` for what ``construct`` returns in training and
    inference mode.
    """

    def __init__(self, backbone: nn.Cell, head: YOLOXHead):
        super().__init__()
        self.num_classes = head.num_classes
        self.backbone = backbone
        self.head = head

    def construct(self, x):
        return self.head(self.backbone(x))


def build_model(cfg: Any, num_classes: int | None = None, kernels: CpuKernels = NATIVE) -> YOLOX:
    """Build a YOLOX from the ``model`` config group (see :func:`architecture`).

    ``num_classes`` (from the dataset) is used when ``cfg.num_classes`` is null;
    ``kernels`` are msdet's CPU kernels its layers run on (``Runtime.kernels``; none by
    default: MindSpore's operators, as an exported model needs).
    """
    classes = cfg.num_classes if cfg.get("num_classes") is not None else num_classes
    if classes is None or int(classes) < 1:
        raise ValueError("model.num_classes is null and no dataset gave a class count")
    arch = architecture(cfg)
    kind = (arch["backbone"], arch["neck"])
    if kind == ("cspdarknet", "pafpn"):
        neck = YOLOPAFPN(
            arch["depth"],
            arch["width"],
            in_channels=tuple(arch["in_channels"]),
            depthwise=arch["depthwise"],
            act=arch["act"],
            kernels=kernels,
        )
    elif kind == ("darknet53", "yolofpn"):
        # Darknet53 has one size: a multiplier here would silently not apply to it.
        fixed = {"depth": 1.0, "width": 1.0, "depthwise": False}
        fixed["in_channels"] = list(YOLOFPN.OUT_CHANNELS)
        wrong = {k: arch[k] for k, v in fixed.items() if arch[k] != v}
        if wrong:
            raise ValueError(f"model.backbone=darknet53 needs {fixed}; got {wrong}")
        neck = YOLOFPN(act=arch["act"], kernels=kernels)
    else:
        raise ValueError(
            "model.backbone/model.neck must be cspdarknet/pafpn or darknet53/yolofpn, "
            f"got {kind[0]}/{kind[1]}"
        )
    head = YOLOXHead(
        int(classes),
        arch["width"],
        in_channels=tuple(arch["in_channels"]),
        act=arch["act"],
        depthwise=arch["depthwise"],
        prior_prob=float(cfg.prior_prob),
        kernels=kernels,
    )
    return YOLOX(neck, head)


RECOMPUTE_LEVELS = ("none", "backbone", "all")
HEAD_BRANCHES = ("stems", "cls_convs", "reg_convs")  # per level; the 1x1 preds are single ops


def set_recompute(net: nn.Cell, level: str) -> list[str]:
    """Mark cells for MindSpore's recomputation (``Cell.recompute()``); returns their paths
    relative to the detector.

    ``backbone``: each backbone stage (stem, dark2 .. dark5) on its own; ``all``: those,
    each block of the neck, and the head's per-level stem, class and box branches. A cell
    marked keeps its output; the activations inside it are not kept for the backward pass
    but computed again there (one more forward of the cell). The stage outputs are kept
    anyway (the neck reads dark3 .. dark5), so per-stage marking saves the same as marking
    the whole backbone while recomputing no more at once than one stage. ``net`` may be
    the detector or what mixed precision returned for it (O1 rewrites the classes, O2
    wraps the detector): cells are found by their attribute names.
    """
    if level not in RECOMPUTE_LEVELS:
        raise ValueError(f"train.recompute must be one of {RECOMPUTE_LEVELS}, got {level!r}")
    if level == "none":
        return []
    detector = next(
        (c for _, c in net.cells_and_names() if hasattr(c, "backbone") and hasattr(c, "head")),
        None,
    )
    if detector is None:
        raise ValueError(f"train.recompute={level}: no YOLOX detector (backbone + head) in {net}")
    neck = detector.backbone
    cells = [(f"backbone.backbone.{n}", c) for n, c in neck.backbone.name_cells().items()]
    if level == "all":
        cells += [(f"backbone.{n}", getattr(neck, n)) for n in neck.BLOCKS]  # not upsample
        for branch in HEAD_BRANCHES:
            cells += [
                (f"head.{branch}.{i}", c) for i, c in enumerate(getattr(detector.head, branch))
            ]
    for _, cell in cells:
        cell.recompute()
        _keep_batchnorm_forward(cell)
    return [name for name, _ in cells]


def _keep_batchnorm_forward(cell: nn.Cell) -> None:
    """Exclude the training BatchNorm operators inside ``cell`` from recomputation.

    The operator updates the running statistics in place: recomputed in the backward pass
    it updates them a second time (measured, MindSpore 2.10 graph mode on CPU: running
    means 1.94x too far from their start after two steps at momentum 0.97, while losses and
    gradients were bit-identical). Its output is stored instead; the convolutions and
    activations around it are still recomputed.
    """
    for _, sub in cell.cells_and_names():
        bn_train = getattr(sub, "bn_train", None)  # nn.BatchNorm2d, nn.SyncBatchNorm
        if isinstance(bn_train, ops.Primitive):
            bn_train.recompute(False)
        if isinstance(sub, BatchNormSiLU):  # msdet's fused CPU kernel
            sub.op.recompute(False)
