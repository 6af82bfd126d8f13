"""Training checkpoints: atomic writes in a safe order, keep-last-k, best/last, and resume.

A training checkpoint is ``mindspore.save_checkpoint`` of the whole training step Cell: the
network's weights under their own names, the EMA weights (``ema.<name>``), the optimizer
state (momentum buffers; ``global_step``, the position in the LR schedule), the loss-scale
state and the L1 switch, plus the run's state (:data:`META_EPOCH` completed epochs,
:data:`META_BEST` best mAP, :data:`META_BAD_EVALS` the early-stopping counter, the freeze
level) and the checkpoint's description (``models.description``: architecture, classes,
input size, config, versions). The LR schedule itself is not saved: it is computed from the
config, and the checkpoint holds the position in it (see :func:`restore_training_state`).
eval.py/predict.py/export.py read the same file (EMA weights preferred).

Writes survive a kill and a full disk: every file is written under a temporary name and
renamed; ``best.ckpt`` and the epoch file are written before ``last.ckpt``, so ``last.ckpt``
never names a best mAP whose ``best.ckpt`` is missing; a failed write removes its partial
files (msdet's and MindSpore's own), raises :class:`CheckpointError` saying how much space a
checkpoint needs, and leaves the earlier files as they were.
"""

from __future__ import annotations

import errno
import logging
import os
import shutil
from dataclasses import dataclass

import mindspore as ms
import numpy as np
from mindspore import nn

from msdet.engine.runtime.mindspore_compat import write_parameter
from msdet.engine.training.checkpoint_files import BEST, LAST, PARTIAL, epoch_files
from msdet.engine.training.ema import EMA_BUFFER, ModelEMA
from msdet.engine.training.step import ACCUMULATE_PREFIX
from msdet.engine.training.step_stats import NOT_SAVED
from msdet.models.weights import CheckpointError, check_compatible, read_checkpoint

log = logging.getLogger(__name__)

META_EPOCH = "msdet_epoch"
META_BEST = "msdet_best_map"
META_BAD_EVALS = "msdet_bad_evals"
META_STEPS_PER_EPOCH = "msdet_steps_per_epoch"  # optimizer steps per epoch of the run that saved
# Derived from the config, never restored: the per-step LR list becomes a Parameter of
# length total_steps (nn/optim/optimizer.py), whose shape changes with the epoch count.
SCHEDULE_PARAMS = ("learning_rate",)
GLOBAL_STEP = "global_step"


@dataclass
class ResumeState:
    """Where a resumed run continues: completed epochs, the best mAP and the early-stopping
    counter so far, and the optimizer step the checkpoint had reached."""

    path: str
    epoch: int
    best_map: float
    bad_evals: int = 0
    global_step: int = 0


def not_saved(name: str) -> bool:
    """What a training checkpoint leaves out: per-sink counters and the LR schedule."""
    return name in NOT_SAVED or name in SCHEDULE_PARAMS


def find_ema(cell: nn.Cell) -> ModelEMA | None:
    """The training step's :class:`ModelEMA`, if it has one."""
    return next((c for _, c in cell.cells_and_names() if isinstance(c, ModelEMA)), None)


def checkpoint_extras(cell: nn.Cell, meta: dict) -> dict:
    """What a checkpoint of ``cell`` holds besides its parameters: ``meta`` and, when the
    training step has an EMA, its flat buffer split into one ``ema.<name>`` entry per
    weight (a copy of every average: computed once per epoch, for all its files)."""
    ema = find_ema(cell)
    return {**meta, **(ema.checkpoint_entries() if ema is not None else {})}


def save_atomic(cell: nn.Cell, path: str, extra: dict) -> None:
    """Write a checkpoint so that ``path`` is either the old file or the complete new one.

    ``extra`` (:func:`checkpoint_extras`) is appended to the parameters; the EMA's flat
    buffer itself is left out. MindSpore appends ``.ckpt`` to names without it, so the
    temporary file keeps it too. A failed write (a full disk, a read-only folder) raises
    :class:`CheckpointError` and leaves no partial file.
    """
    tmp = path[: -len(".ckpt")] + PARTIAL
    try:
        ms.save_checkpoint(
            cell,
            tmp,
            append_dict=extra,
            choice_func=lambda n: not (not_saved(n) or n == EMA_BUFFER),
        )
        os.replace(tmp, path)
    except (OSError, RuntimeError, ValueError) as err:
        for partial in (tmp, tmp[: -len(".ckpt")] + ".tmp"):  # MindSpore writes <name>.tmp first
            if os.path.exists(partial):
                os.remove(partial)
        raise CheckpointError(
            f"could not write {path} ({type(err).__name__}: {err}){_space_note(cell, path, err)}; "
            "the checkpoints written before it are intact"
        ) from err


def _space_note(cell: nn.Cell, path: str, err: BaseException) -> str:
    """For a full disk: what one checkpoint needs and what is free where it goes; for a
    file larger than a file may be (EFBIG), the file-size limit instead."""
    need = sum(int(p.data.nbytes) for p in cell.get_parameters() if not not_saved(p.name))
    needs = f"a checkpoint needs about {need / 2**20:.1f} MiB"
    if isinstance(err, OSError) and err.errno == errno.EFBIG:
        return f": {_file_size_limit()}; {needs}"
    text = str(err).lower()
    full = isinstance(err, OSError) and err.errno in (errno.ENOSPC, errno.EDQUOT)
    if not (full or "no space" in text or "disk full" in text or "quota" in text):
        return ""
    try:
        free = shutil.disk_usage(os.path.dirname(os.path.abspath(path))).free
    except OSError:
        return f": {needs}"
    return (
        f": {needs} and {free / 2**20:.0f} MiB are free "
        "there (a run keeps last, best and train.keep_last epoch files: free that many times "
        "a checkpoint's size)"
    )


def _file_size_limit() -> str:
    """Why a file may not grow (EFBIG): this process's file-size limit when it has one,
    else the file system's largest file."""
    try:
        import resource  # POSIX only
    except ImportError:
        limit = None
    else:
        limit, _ = resource.getrlimit(resource.RLIMIT_FSIZE)
        limit = None if limit == resource.RLIM_INFINITY else limit
    if limit is not None:
        return (
            f"a file-size limit: this process may write files of at most {limit / 2**20:.0f} "
            "MiB (ulimit -f); raise it (ulimit -f unlimited) where the run is started"
        )
    return (
        "the file is larger than the file system there allows (FAT32, for one, stops at "
        "4 GiB): write the run to another file system (run.dir=...)"
    )


class CheckpointManager:
    """``best.ckpt`` on a new best mAP, ``epoch_N.ckpt`` keeping the last ``keep_last``,
    ``last.ckpt`` every epoch, in that order."""

    def __init__(self, directory: str, keep_last: int = 3):
        self.directory = directory
        self.keep_last = max(int(keep_last), 0)
        os.makedirs(directory, exist_ok=True)

    def path(self, name: str) -> str:
        return os.path.join(self.directory, name)

    def save_epoch(self, cell: nn.Cell, meta: dict, epoch: int, is_best: bool) -> list[str]:
        """Save the state after ``epoch`` (1-based); returns the files written."""
        written = []
        extra = checkpoint_extras(cell, meta)
        if is_best:
            written.append(self.path(BEST))
            save_atomic(cell, self.path(BEST), extra)
        if self.keep_last:
            numbered = self.path(f"epoch_{epoch:04d}.ckpt")
            save_atomic(cell, numbered, extra)
            written.append(numbered)
        save_atomic(cell, self.path(LAST), extra)  # the commit point: written last
        written.append(self.path(LAST))
        if self.keep_last:
            for old in epoch_files(self.directory)[: -self.keep_last]:
                os.remove(old)
        return written


def restore_training_state(
    train_cell: nn.Cell, path: str, steps_per_epoch: int, params: dict | None = None
) -> ResumeState:
    """Load every parameter of the training step (weights, EMA, optimizer, loss scale) but
    the LR schedule, from the checkpoint ``path`` (``params``: its contents, when already
    read), and put the optimizer at the
    start of the next epoch of this run's schedule.

    Resuming with the same config is exact. With another ``train.epochs`` the schedule is
    the new config's (YOLOX recomputes its cosine over the new total), continued from the
    epoch reached; with another batch size or card count (another number of steps per
    epoch) the position is the completed epochs times this run's steps per epoch. Fails,
    naming the parameter, when the checkpoint does not fit the training set-up.
    """
    params = dict(read_checkpoint(path) if params is None else params)
    if META_EPOCH not in params:
        raise CheckpointError(
            f"{path} has no training state ({META_EPOCH}); to start from its weights use "
            "train.pretrained=PATH instead of train.resume"
        )
    for name in SCHEDULE_PARAMS:  # a checkpoint written before the schedule was left out
        params.pop(name, None)
    ema = find_ema(train_cell)
    if ema is not None:
        ema.pack(params, path)  # ema.<name> entries -> the flat buffer
    for param in train_cell.get_parameters():  # not training state: keep the cell's own
        # An accumulation window's buffers are empty at an epoch's end: a checkpoint of a run
        # without train.accumulate resumes with it (they start at zero).
        if not_saved(param.name) or param.name.startswith(ACCUMULATE_PREFIX):
            params.setdefault(param.name, param)
    check_compatible(train_cell, params, path)
    epoch = int(params[META_EPOCH].asnumpy())
    saved_step = int(params[GLOBAL_STEP].asnumpy().ravel()[0]) if GLOBAL_STEP in params else 0
    saved_per_epoch = params.get(META_STEPS_PER_EPOCH)
    ms.load_param_into_net(train_cell, params, strict_load=True)
    step = saved_step
    if saved_per_epoch is not None and int(saved_per_epoch.asnumpy()) != int(steps_per_epoch):
        step = epoch * int(steps_per_epoch)
        log.warning(
            "resume: %s reached step %d after %d epochs of %d steps; this run has %d steps "
            "per epoch (another batch size, card count or accumulation), so it continues "
            "at step %d",
            path,
            saved_step,
            epoch,
            int(saved_per_epoch.asnumpy()),
            steps_per_epoch,
            step,
        )
        for param in train_cell.get_parameters():
            if param.name == GLOBAL_STEP:
                write_parameter(param, np.full(param.shape, step))
    return ResumeState(
        path=path,
        epoch=epoch,
        best_map=float(params[META_BEST].asnumpy()) if META_BEST in params else -1.0,
        bad_evals=int(params[META_BAD_EVALS].asnumpy()) if META_BAD_EVALS in params else 0,
        global_step=step,
    )
