"""Fine-tuning set-up: freezing the backbone (or backbone and neck) of a pretrained model.

A frozen parameter is excluded from the optimizer (``requires_grad=False``): it gets no
gradient, no update and no weight decay, and the optimizer holds no momentum for it.
Its BatchNorm layers normalise with their running statistics and stop updating them
(``use_batch_statistics=False``), so a frozen part computes exactly what it computed in
the pretrained model. The EMA still averages frozen tensors; they never change, so their
averages stay equal to them. Checkpoints hold every parameter as before; the freeze
level is stored in them (``msdet_freeze``) so that a resumed run keeps it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import mindspore as ms
from mindspore import nn

from msdet.models.pretrained import load_pretrained

log = logging.getLogger(__name__)

META_FREEZE = "msdet_freeze"
# train.freeze -> parameter-name prefixes of the frozen part of models.yolox.YOLOX
# (``backbone`` is the PAFPN Cell; its ``backbone`` is CSPDarknet, the rest is the neck).
FREEZE_PREFIXES: dict[str, tuple[str, ...]] = {
    "none": (),
    "backbone": ("backbone.backbone.",),
    "backbone+neck": ("backbone.",),
}
FREEZE_LEVELS = tuple(FREEZE_PREFIXES)


@dataclass
class FreezeReport:
    """How many parameters and BatchNorm layers a freeze covered."""

    level: str
    frozen_params: int = 0
    trainable_params: int = 0
    frozen_bn: int = 0

    def summary(self) -> str:
        """One log line."""
        return (
            f"train.freeze={self.level}: {self.frozen_params} parameters frozen "
            f"({self.frozen_bn} BatchNorm layers on running statistics), "
            f"{self.trainable_params} trainable"
        )


def check_freeze(level: str) -> str:
    """``level`` if it is a known ``train.freeze`` value, else a clear error."""
    level = "none" if level is None else str(level)
    if level not in FREEZE_PREFIXES:
        raise ValueError(f"train.freeze must be one of {', '.join(FREEZE_LEVELS)}, got {level!r}")
    return level


def freeze_level_code(level: str) -> int:
    """The freeze level as stored in checkpoints (an int: its position in FREEZE_LEVELS)."""
    return FREEZE_LEVELS.index(check_freeze(level))


def freeze_level_from_code(code: int) -> str:
    """Inverse of :func:`freeze_level_code`."""
    if not 0 <= int(code) < len(FREEZE_LEVELS):
        raise ValueError(f"checkpoint {META_FREEZE}={code} is not a known freeze level")
    return FREEZE_LEVELS[int(code)]


def _frozen(name: str, prefixes: tuple[str, ...]) -> bool:
    return bool(prefixes) and name.startswith(prefixes)


def freeze(net: nn.Cell, level: str) -> FreezeReport:
    """Freeze the part of ``net`` that ``level`` names, in place; call before building the
    optimizer (which takes only trainable parameters)."""
    level = check_freeze(level)
    prefixes = FREEZE_PREFIXES[level]
    report = FreezeReport(level)
    for param in net.get_parameters():
        if _frozen(param.name, prefixes):
            param.requires_grad = False
            report.frozen_params += 1
        elif param.requires_grad:
            report.trainable_params += 1
    for _, cell in net.cells_and_names():
        if isinstance(cell, (nn.BatchNorm2d, nn.SyncBatchNorm)) and _frozen(
            cell.gamma.name, prefixes
        ):
            cell.use_batch_statistics = False
            report.frozen_bn += 1
    return report


def resolve_freeze(configured: str, resume_path: str | None) -> str:
    """The freeze level of this run: a resumed run keeps the one its checkpoint trained with.

    A checkpoint without ``msdet_freeze`` (written before freezing existed) keeps the
    configured level.
    """
    level = check_freeze(configured)
    if not resume_path:
        return level
    try:
        stored = ms.load_checkpoint(resume_path, choice_func=lambda name: name == META_FREEZE)
    except ValueError:  # MindSpore refuses an empty selection: no freeze stored
        return level
    kept = freeze_level_from_code(int(stored[META_FREEZE].asnumpy()))
    if kept != level:
        log.warning(
            "train.freeze=%s, but %s was trained with train.freeze=%s: resuming keeps %s "
            "(to change the freeze, start a new run with train.pretrained=%s)",
            level,
            resume_path,
            kept,
            kept,
            resume_path,
        )
    return kept


def prepare_fine_tuning(net: nn.Cell, tcfg, resume_path: str | None = None) -> str:
    """``train.pretrained`` and ``train.freeze`` applied to a freshly built network.

    Call before building the optimizer and EMA (the EMA starts from the loaded weights).
    Returns the freeze level in force (a resumed run keeps its checkpoint's).
    """
    if tcfg.pretrained:
        strict = bool(tcfg.pretrained_strict)
        log.info("%s", load_pretrained(net, str(tcfg.pretrained), strict).table())
    level = resolve_freeze(tcfg.freeze, resume_path)
    if level != "none":
        log.info("%s", freeze(net, level).summary())
        if not tcfg.pretrained and not resume_path:
            log.warning("train.freeze=%s without train.pretrained freezes random weights", level)
    return level
