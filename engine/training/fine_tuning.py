"""Fine-tuning set-up: where a run starts (``train.pretrained``) and freezing the backbone
(or backbone and neck) of a pretrained model.

``train.pretrained``: null starts from scratch; a path loads a msdet ``.ckpt`` or a PyTorch
``.pth`` (:mod:`msdet.models.pretrained`); a model name (``yolox_s``) the original's
official COCO weights of that model, downloaded once (:mod:`msdet.models.release_weights`);
``auto`` those of ``model.name``, or from scratch, said in the log, for a model without
official weights (a config of its own, or an architecture changed on the command line).
A resumed run starts from its checkpoint and ignores ``train.pretrained``.

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
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import mindspore as ms
from mindspore import nn

from msdet.models.pretrained import CLASS_HEAD, load_pretrained
from msdet.models.release_weights import (
    RELEASE_CLASSES,
    RELEASE_FILES,
    ReleaseDownloadError,
    cached_path,
    check_release_fits,
    fetch_release_weights,
    release_for,
)

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


@dataclass
class Start:
    """Where a run's weights start (:func:`resolve_start`): ``path`` (None: from scratch) and
    a phrase for the run's header."""

    path: str | None
    what: str

    @property
    def scratch(self) -> bool:
        return self.path is None


def resolve_start(
    value: Any, model_cfg: Any, net: nn.Cell | None = None, optional: bool = False
) -> Start:
    """The file ``train.pretrained`` names (see the module docstring), official weights
    fetched into the cache; ``net`` (the model to train): the parameter shapes a release
    file without a published sha256 is checked against. ``optional`` (the own-data
    recipe's default ``auto``, ``train.weights_optional``): official weights neither cached
    nor downloadable start the run from scratch, said so, instead of stopping it."""
    if value is None or str(value) == "":
        return Start(None, "from scratch (train.pretrained=null)")
    value = str(value)
    if value == "auto":
        name = release_for(model_cfg)
        if name is None:
            why = (
                "its architecture is changed from the released one"
                if str(model_cfg.name) in RELEASE_FILES
                else f"official weights exist for {', '.join(RELEASE_FILES)} only"
            )
            return Start(None, f"from scratch: no official weights fit {model_cfg.name} ({why})")
        value = name
    if value in RELEASE_FILES:
        check_release_fits(value, model_cfg)
        cached = os.path.isfile(cached_path(value))
        try:
            path = fetch_release_weights(value, _release_shapes(net) if net is not None else None)
        except ReleaseDownloadError as err:
            if not optional:
                raise
            return Start(None, f"from scratch: the original's COCO weights of {value} are not "
                               f"at hand ({err})")  # fmt: skip
        how = "from the cache" if cached else "downloaded now"
        return Start(path, f"the original's official COCO weights of {value} ({path}), {how}")
    if not os.path.exists(value):
        raise ValueError(
            f"train.pretrained={value}: no such file. A model name takes its official COCO "
            f"weights ({', '.join(RELEASE_FILES)}), auto those of model.name, null none"
        )
    return Start(value, f"the weights of {value}")


def _release_shapes(net: nn.Cell) -> dict[str, tuple[int, ...]]:
    """``net``'s parameter shapes with the class head at the release's 80 classes."""
    return {
        p.name: (RELEASE_CLASSES, *p.shape[1:]) if p.name.startswith(CLASS_HEAD) else tuple(p.shape)
        for p in net.get_parameters()
    }


@dataclass
class FineTuning:
    """What :func:`prepare_fine_tuning` set up: the start and the freeze level in force."""

    start: Start
    freeze: str


def prepare_fine_tuning(
    net: nn.Cell,
    tcfg: Any,
    class_names: Sequence[str],
    model_cfg: Any,
    resume_path: str | None = None,
    optional: bool = False,
) -> FineTuning:
    """``train.pretrained`` and ``train.freeze`` applied to a freshly built network whose
    classes are ``class_names``.

    Call before building the optimizer and EMA (the EMA starts from the loaded weights).
    A resumed run keeps its checkpoint's freeze level and loads no pretrained weights (the
    checkpoint replaces them). ``optional``: official weights that cannot be had start from
    scratch (:func:`resolve_start`).
    """
    if resume_path:
        start = Start(resume_path, f"resumed from {resume_path}")
    else:
        start = resolve_start(tcfg.pretrained, model_cfg, net, optional)
        if start.path is not None:
            strict = bool(tcfg.pretrained_strict)
            report = load_pretrained(net, start.path, class_names, strict)
            log.info("%s", report.table())
            log.info("%s", report.classes_line())
    level = resolve_freeze(tcfg.freeze, resume_path)
    if level != "none":
        log.info("%s", freeze(net, level).summary())
        if start.scratch:
            log.warning("train.freeze=%s without train.pretrained freezes random weights", level)
    return FineTuning(start, level)
