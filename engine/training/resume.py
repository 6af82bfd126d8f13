"""Resuming a run: the checkpoint to start from, and whether it fits the requested config.

``train.resume=auto`` takes the newest intact checkpoint of the run folder
(:func:`~msdet.engine.training.checkpoint_files.resume_candidates`: a ``last.ckpt`` that a
kill truncated, or one that a kill before its write never produced, gives way to the newest
epoch file, with a warning); ``train.resume=PATH`` takes that file and names an intact one
beside it when it is not.

Before anything is built the checkpoint's description (``models.description``) is held
against the config: what makes it another model (the architecture, the classes, the input
size and its multi-scale range) is an error naming both values; what a resumed run may
change (epochs, learning rate, batch size, augmentation, ...) is logged, one line per key.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from omegaconf import OmegaConf

from msdet.common.config import flatten, scaled_size
from msdet.engine.training.checkpoint_files import LAST, epoch_files, resume_candidates
from msdet.engine.training.checkpoints import META_EPOCH
from msdet.models.description import Description, read_description
from msdet.models.weights import CheckpointError, read_checkpoint
from msdet.models.yolox import architecture

log = logging.getLogger("train")

# Settings that say where and how this invocation runs, not what the run is: never reported.
NOT_COMPARED = ("run.", "train.resume", "train.overwrite", "train.stop_at_epoch",
                "data.cache_dir", "data.root")  # fmt: skip
# The training input as load_config resolved it, and its multi-scale range: another one
# trains another model (other graphs, other anchors' scale). The evaluation size may change.
SIZE_KEYS = ("train.input_size", "train.multiscale_range")
_SET_BY = {"train.input_size": "data.img_size x train.img_scale"}  # what a user types to move it


class ResumeMismatchError(CheckpointError):
    """The checkpoint to resume is another model than the config asks for."""


@dataclass
class ResumeSource:
    """A checkpoint to resume: its path, its contents and its description (None for a
    checkpoint written before descriptions existed)."""

    path: str
    params: dict
    description: Description | None


def load_resume_source(resume: str, run_dir: str) -> ResumeSource:
    """The checkpoint ``train.resume`` names (``auto``: the run folder's newest intact one)."""
    if resume == "auto":
        path, params = _newest_intact(run_dir)
    else:
        if not os.path.isfile(resume):
            raise CheckpointError(f"train.resume: checkpoint not found: {resume}")
        path, params = resume, _read_or_name_intact(resume)
    return ResumeSource(path, params, read_description(params, path))


def _newest_intact(run_dir: str) -> tuple[str, dict]:
    candidates = resume_candidates(run_dir)
    if not candidates:
        raise CheckpointError(
            f"train.resume=auto: no checkpoint in {os.path.join(run_dir, 'checkpoints')} to "
            "resume; a fresh run may start there (the same command without train.resume)"
        )
    failures = []
    for path in candidates:
        try:
            params = read_checkpoint(path)
        except CheckpointError as err:
            failures.append(str(err))
            continue
        if failures:
            log.warning("resume: %s; resuming from %s instead", "; ".join(failures), path)
        elif os.path.basename(path) != LAST:
            log.warning(
                "resume: %s is %s (the run stopped while writing its epoch's checkpoints): "
                "resuming from it",
                path,
                "newer than checkpoints/last.ckpt"
                if os.path.isfile(os.path.join(os.path.dirname(path), LAST))
                else "there and checkpoints/last.ckpt is not",
            )
        return path, params
    raise CheckpointError(
        f"train.resume=auto: no intact checkpoint in {run_dir} ({'; '.join(failures)}); a fresh "
        "run may start there with train.overwrite=true"
    )


def _read_or_name_intact(path: str) -> dict:
    """The checkpoint's contents; a truncated or corrupt file is an error that names the
    newest intact epoch checkpoint beside it to resume from instead."""
    try:
        return read_checkpoint(path)
    except CheckpointError as err:
        folder = os.path.dirname(os.path.abspath(path))
        for candidate in reversed(epoch_files(folder)):
            try:
                read_checkpoint(candidate)
            except CheckpointError:
                continue
            raise CheckpointError(
                f"{err}; the newest intact checkpoint beside it is {candidate}: resume with "
                f"train.resume={candidate}"
            ) from err
        raise CheckpointError(f"{err}; no intact epoch checkpoint beside it") from err


def check_resume_fits(
    source: ResumeSource, cfg: Any, class_names: Sequence[str]
) -> list[tuple[str, Any, Any]]:
    """Hold the checkpoint's description against ``cfg`` (and the dataset's
    ``class_names``): raise :class:`ResumeMismatchError` listing everything that makes it
    another model; return the other settings that changed, as (key, was, now), after
    logging them. A checkpoint without a description (or without its config) is checked
    by its parameters' shapes alone, later, as before."""
    description = source.description
    if description is None:
        log.warning(
            "resume: %s has no description (written before msdet recorded one): only its "
            "parameters' shapes are checked against this config",
            source.path,
        )
        return []
    mismatches = _model_mismatches(description, cfg, class_names)
    was = _described_config(description)
    now = flatten(OmegaConf.to_container(cfg, resolve=True))
    for key in SIZE_KEYS:
        if key in was and _norm(was[key]) != _norm(now.get(key)):
            what = f" ({_SET_BY[key]})" if key in _SET_BY else ""
            mismatches.append(f"{key}{what}: checkpoint {was[key]}, config {now.get(key)}")
    if mismatches:
        raise ResumeMismatchError(
            f"train.resume: {source.path} is another model than this config asks for: "
            + "; ".join(mismatches)
            + ". Resume with the checkpoint's settings, or start a new run from its weights "
            "with train.pretrained=PATH"
        )
    changes = [
        (key, was[key], now.get(key))
        for key in sorted(set(was) | set(now))
        if key in was and key in now and not key.startswith(NOT_COMPARED)
        and not key.startswith("model.") and _norm(was[key]) != _norm(now[key])
    ]  # fmt: skip
    for key, old, new in changes:
        log.info("resume: %s changed from %s to %s", key, old, new)
    return changes


def _described_config(description: Description) -> dict[str, Any]:
    """The checkpoint's config, flattened, with ``train.input_size``: a description written
    by msdet 0.2.0 holds only what it derives from, resolved here by the same rule."""
    was = flatten(description.config or {})
    if "train.input_size" not in was and "data.img_size" in was:
        scale = float(was.get("train.img_scale", 1.0))
        was["train.input_size"] = scaled_size(was["data.img_size"], scale)
    return was


def check_epochs_left(source: ResumeSource, epochs: int) -> None:
    """Refuse to resume a run that trained more epochs than ``train.epochs`` asks for (its
    schedule cannot be shortened after the fact), saying how many it has and what to ask."""
    value = source.params.get(META_EPOCH)
    if value is None:  # no training state: restoring it says so
        return
    trained = int(value.asnumpy())
    if trained <= epochs:
        return
    own = (source.description.config or {}).get("train", {}) if source.description else {}
    theirs = f" (its own schedule is {own['epochs']})" if "epochs" in own else ""
    raise ValueError(
        f"train.resume: {source.path} has trained {trained} epochs already, more than "
        f"train.epochs={epochs} asks for{theirs}: resume with train.epochs={trained} or more "
        "(or leave train.epochs out to keep the run's own); nothing was changed"
    )


def _model_mismatches(description: Description, cfg: Any, class_names: Sequence[str]) -> list[str]:
    found = []
    saved = description.model
    if saved.get("name") != str(cfg.model.name):
        found.append(f"model: checkpoint {saved.get('name')}, config {cfg.model.name}")
    for key, value in architecture(cfg.model).items():
        if key in saved and _norm(saved[key]) != _norm(value):
            found.append(f"model.{key}: checkpoint {saved[key]}, config {value}")
    if list(description.class_names) != list(class_names):
        found.append(
            f"classes: checkpoint {list(description.class_names)}, dataset "
            f"{cfg.data.name} {list(class_names)}"
        )
    return found


def _norm(value: Any) -> Any:
    """Values as comparable plain data (lists of numbers as floats, strings as they are)."""
    if isinstance(value, Mapping):
        return {k: _norm(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_norm(v) for v in value]
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, int | float):
        return float(value)
    return value
