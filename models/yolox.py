"""The YOLOX detector Cell and its builder."""

from __future__ import annotations

import os
from typing import Any

from mindspore import nn
from omegaconf import DictConfig, OmegaConf

from models.head import YOLOXHead
from models.neck import YOLOPAFPN

MODEL_CONFIG_DIR = os.path.join(os.path.dirname(os.path.dirname(__file__)), "configs", "model")


def model_names() -> list[str]:
    """The model sizes msdet knows (configs/model/*.yaml): yolox_nano ... yolox_x."""
    return sorted(f[:-5] for f in os.listdir(MODEL_CONFIG_DIR) if f.endswith(".yaml"))


def load_model_config(name: str) -> DictConfig:
    """The ``model`` config group entry for ``name`` (for tools that run without Hydra)."""
    path = os.path.join(MODEL_CONFIG_DIR, f"{name}.yaml")
    if not os.path.isfile(path):
        raise ValueError(f"unknown model {name!r}; choose one of {model_names()}")
    return OmegaConf.load(path)


class YOLOX(nn.Cell):
    """Backbone + PAFPN (``backbone``) and decoupled head (``head``), as in YOLOX.

    See :class:`models.head.YOLOXHead` for what ``construct`` returns in training and
    inference mode.
    """

    def __init__(
        self,
        num_classes: int,
        depth: float,
        width: float,
        depthwise: bool = False,
        act: str = "silu",
        prior_prob: float = 0.01,
    ):
        super().__init__()
        self.num_classes = num_classes
        self.backbone = YOLOPAFPN(depth, width, depthwise=depthwise, act=act)
        self.head = YOLOXHead(
            num_classes, width, act=act, depthwise=depthwise, prior_prob=prior_prob
        )

    def construct(self, x):
        return self.head(self.backbone(x))


def build_model(cfg: Any, num_classes: int | None = None) -> YOLOX:
    """Build a YOLOX from the ``model`` config group.

    ``num_classes`` (from the dataset) is used when ``cfg.num_classes`` is null.
    """
    classes = cfg.num_classes if cfg.get("num_classes") is not None else num_classes
    if classes is None or int(classes) < 1:
        raise ValueError("model.num_classes is null and no dataset gave a class count")
    return YOLOX(
        num_classes=int(classes),
        depth=float(cfg.depth),
        width=float(cfg.width),
        depthwise=bool(cfg.depthwise),
        act=str(cfg.get("act", "silu")),
        prior_prob=float(cfg.get("prior_prob", 0.01)),
    )
