"""Reading network weights from a checkpoint into a model, with errors that say what is wrong,
and building a checkpoint's detector from the description it carries.

A msdet checkpoint holds the bare network's parameters under their own names, and may
hold the EMA weights under ``ema.<name>``, optimizer state and training metadata (see
:mod:`msdet.engine.training.checkpoints`). A checkpoint converted from PyTorch holds only
the weights.
"""

from __future__ import annotations

import os
from typing import Any

import mindspore as ms
import numpy as np

from msdet.common.paths import windows_path_hint
from msdet.models.description import Description, DescriptionError, contradictions, read_description
from msdet.models.yolox import YOLOX, build_model
from msdet.ops.cpu_kernels import NATIVE, CpuKernels

EMA_PREFIX = "ema."


class CheckpointError(ValueError):
    """A checkpoint file cannot be read or does not fit the model."""


# Files export.py writes (and the Ascend toolchain makes of them): models for inference.
EXPORTED = {".mindir": "MINDIR", ".onnx": "ONNX", ".om": "OM", ".air": "AIR"}


def read_checkpoint(path: str) -> dict[str, ms.Parameter]:
    """Load a ``.ckpt`` file into a name -> Parameter dict, or raise a clear error."""
    kind = EXPORTED.get(os.path.splitext(path)[1].lower())
    if kind:
        raise CheckpointError(
            f"{path} is an exported {kind} model, for inference (eval.py and predict.py take "
            "it), not a checkpoint to train from: pass the .ckpt it was exported from (export.py "
            "writes the file beside it)"
        )
    if not os.path.isfile(path):
        hint = windows_path_hint(path)
        raise CheckpointError(f"checkpoint not found: {path}" + (f" ({hint})" if hint else ""))
    if os.path.getsize(path) == 0:
        raise CheckpointError(f"checkpoint is empty (0 bytes): {path}")
    try:
        return ms.load_checkpoint(path)
    except Exception as err:  # MindSpore raises ValueError/RuntimeError for bad files
        raise CheckpointError(
            f"checkpoint {path} is corrupt, truncated or not a MindSpore checkpoint "
            f"({type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''})"
        ) from err


def network_weights(
    params: dict[str, ms.Parameter], use_ema: bool = True
) -> dict[str, ms.Parameter]:
    """The network's weights from a checkpoint dict: EMA weights when present and asked for."""
    ema = {k[len(EMA_PREFIX) :]: v for k, v in params.items() if k.startswith(EMA_PREFIX)}
    if use_ema and ema:
        return ema
    return {k: v for k, v in params.items() if not k.startswith(EMA_PREFIX)}


def check_compatible(net: ms.nn.Cell, weights: dict[str, ms.Parameter], source: str) -> None:
    """Raise :class:`CheckpointError` naming the first missing or mis-shaped parameter.

    Parameters are matched by their own names (what checkpoints store), not by cell paths,
    which mixed precision changes by wrapping cells.
    """
    for param in net.get_parameters():
        name = param.name
        if name not in weights:
            raise CheckpointError(
                f"{source}: parameter {name!r} of the model is missing from the checkpoint "
                "(a different architecture? check model=...)"
            )
        have = tuple(weights[name].shape)
        want = tuple(param.shape)
        if have != want:
            hint = " (a different architecture? check model=...)"
            if ".cls_preds." in name:
                hint = f" (the checkpoint has {have[0]} classes, the model {want[0]})"
            raise CheckpointError(
                f"{source}: parameter {name!r} has shape {have} in the checkpoint but "
                f"{want} in the model{hint}"
            )


def load_weights(
    net: ms.nn.Cell, path: str, use_ema: bool = True, params: dict | None = None
) -> bool:
    """Load a checkpoint's network (or EMA) weights into ``net`` with strict checking
    (``params``: the file already read with :func:`read_checkpoint`).

    Returns True when EMA weights were used.
    """
    params = params if params is not None else read_checkpoint(path)
    weights = network_weights(params, use_ema)
    used_ema = use_ema and any(k.startswith(EMA_PREFIX) for k in params)
    check_compatible(net, weights, path)
    wanted = {p.name for p in net.get_parameters()}
    not_loaded, _ = ms.load_param_into_net(
        net, {k: v for k, v in weights.items() if k in wanted}, strict_load=True
    )
    if not_loaded:
        raise CheckpointError(f"{path}: parameters not loaded: {not_loaded[:5]}")
    return used_ema


def checkpoint_num_classes(path: str) -> int:
    """Number of classes a checkpoint's head predicts (from ``head.cls_preds.0.weight``)."""
    params = read_checkpoint(path)
    for key in ("head.cls_preds.0.weight", EMA_PREFIX + "head.cls_preds.0.weight"):
        if key in params:
            return int(np.asarray(params[key].shape)[0])
    raise CheckpointError(f"{path}: no head.cls_preds.0.weight, not a YOLOX checkpoint")


def load_detector(
    model_cfg: Any,
    ckpt: str,
    num_classes: int | None = None,
    use_ema: bool = True,
    kernels: CpuKernels = NATIVE,
) -> tuple[YOLOX, bool]:
    """A YOLOX with a checkpoint's weights (EMA when present), in inference mode.

    The class count comes from ``model.num_classes``, else ``num_classes`` (the dataset),
    else the checkpoint's head. Returns the network and whether EMA weights were loaded.
    """
    if model_cfg.get("num_classes") is None and num_classes is None:
        num_classes = checkpoint_num_classes(ckpt)
    net = build_model(model_cfg, num_classes, kernels)
    used_ema = load_weights(net, ckpt, use_ema=use_ema)
    net.set_train(False)
    return net, used_ema


def load_described_detector(
    ckpt: str,
    fallback_model_cfg: Any,
    typed_overrides: dict[str, str] | None = None,
    num_classes: int | None = None,
    use_ema: bool = True,
    kernels: CpuKernels = NATIVE,
) -> tuple[YOLOX, bool, Description | None]:
    """A checkpoint's detector built from its own description, in inference mode.

    ``typed_overrides``: the command line's ``key -> value`` as typed; a ``model`` override
    that contradicts the description is a :class:`DescriptionError` naming both (the
    composed ``model`` config cannot tell a default from a choice). A checkpoint without a
    description (written before msdet had them) is built from ``fallback_model_cfg`` and
    ``num_classes`` (else its head's class count), as before. Returns the network, whether
    EMA weights were loaded, and the description (None for such a checkpoint). ``kernels``:
    msdet's CPU kernels the network runs on (none by default).
    """
    params = read_checkpoint(ckpt)
    description = read_description(params, ckpt)
    if description is None:
        net, used_ema = load_detector(fallback_model_cfg, ckpt, num_classes, use_ema, kernels)
        return net, used_ema, None
    problems = contradictions(description, typed_overrides or {})
    if problems:
        raise DescriptionError(f"{ckpt}: " + "; ".join(problems) + " (leave model=... out)")
    if num_classes is not None and num_classes != description.num_classes:
        raise DescriptionError(
            f"{ckpt} predicts {description.num_classes} classes, the data has {num_classes}"
        )
    net = build_model(description.model_config(), description.num_classes, kernels)
    used_ema = load_weights(net, ckpt, use_ema=use_ema, params=params)
    net.set_train(False)
    return net, used_ema, description
