"""Training checkpoints: atomic writes, keep-last-k, best/last, and resume.

A training checkpoint is ``mindspore.save_checkpoint`` of the whole training step Cell:
the network's weights under their own names, the EMA weights (``ema.<name>``), the
optimizer state (momentum buffers, ``global_step``, which positions the LR schedule), the
loss-scale state and the L1 switch, plus metadata (``msdet_epoch`` = completed epochs,
``msdet_best_map``, model name and class count). eval.py/predict.py read the same file
through :func:`models.checkpoint.load_weights` (EMA weights preferred).
"""

from __future__ import annotations

import glob
import logging
import os
from dataclasses import dataclass

import mindspore as ms
from mindspore import nn

from engine.step_stats import NOT_SAVED
from models.checkpoint import CheckpointError, check_compatible, read_checkpoint

log = logging.getLogger(__name__)

META_EPOCH = "msdet_epoch"
META_BEST = "msdet_best_map"
META_MODEL = "msdet_model"
META_CLASSES = "msdet_num_classes"
LAST = "last.ckpt"
BEST = "best.ckpt"


@dataclass
class ResumeState:
    """Where a resumed run continues: completed epochs and the best mAP so far."""

    path: str
    epoch: int
    best_map: float


def save_atomic(cell: nn.Cell, path: str, meta: dict) -> None:
    """Write a checkpoint so that ``path`` is either the old file or the complete new one.

    MindSpore appends ``.ckpt`` to names without it, so the temporary file keeps it too.
    """
    tmp = path[: -len(".ckpt")] + ".partial.ckpt"
    ms.save_checkpoint(cell, tmp, append_dict=meta, choice_func=lambda name: name not in NOT_SAVED)
    os.replace(tmp, path)


class CheckpointManager:
    """``last.ckpt`` every epoch, ``epoch_N.ckpt`` keeping the last ``keep_last``, ``best.ckpt``."""

    def __init__(self, directory: str, keep_last: int = 3):
        self.directory = directory
        self.keep_last = max(int(keep_last), 0)
        os.makedirs(directory, exist_ok=True)

    def path(self, name: str) -> str:
        return os.path.join(self.directory, name)

    def save_epoch(self, cell: nn.Cell, meta: dict, epoch: int, is_best: bool) -> list[str]:
        """Save the state after ``epoch`` (1-based); returns the files written."""
        written = [self.path(LAST)]
        save_atomic(cell, self.path(LAST), meta)
        if self.keep_last:
            numbered = self.path(f"epoch_{epoch:04d}.ckpt")
            save_atomic(cell, numbered, meta)
            written.append(numbered)
            for old in self.epoch_files()[: -self.keep_last]:
                os.remove(old)
        if is_best:
            save_atomic(cell, self.path(BEST), meta)
            written.append(self.path(BEST))
        return written

    def epoch_files(self) -> list[str]:
        return sorted(glob.glob(self.path("epoch_*.ckpt")))


def find_resume_checkpoint(resume: str, run_dir: str, outputs_root: str = "outputs") -> str:
    """The checkpoint ``train.resume`` points at.

    ``auto``: this run folder's ``checkpoints/last.ckpt`` when it exists (rerun with the
    same ``hydra.run.dir``), else the most recently written ``checkpoints/last.ckpt``
    under ``outputs_root``. Anything else is a path.
    """
    if resume != "auto":
        if not os.path.isfile(resume):
            raise CheckpointError(f"train.resume: checkpoint not found: {resume}")
        return resume
    own = os.path.join(run_dir, "checkpoints", LAST)
    if os.path.isfile(own):
        return own
    found = glob.glob(os.path.join(outputs_root, "**", "checkpoints", LAST), recursive=True)
    if not found:
        raise CheckpointError(
            f"train.resume=auto: no checkpoints/{LAST} in {run_dir} or under {outputs_root}/"
        )
    return max(found, key=os.path.getmtime)


def restore_training_state(train_cell: nn.Cell, path: str) -> ResumeState:
    """Load every parameter of the training step (weights, EMA, optimizer, loss scale).

    Fails, naming the parameter, when the checkpoint does not fit the training set-up.
    """
    params = read_checkpoint(path)
    if META_EPOCH not in params:
        raise CheckpointError(
            f"{path} has no training state ({META_EPOCH}); to start from its weights use "
            "train.pretrained=PATH instead of train.resume"
        )
    for param in train_cell.get_parameters():  # per-sink counters are not training state
        if param.name in NOT_SAVED:
            params.setdefault(param.name, param)
    check_compatible(train_cell, params, path)
    ms.load_param_into_net(train_cell, params, strict_load=True)
    return ResumeState(
        path=path,
        epoch=int(params[META_EPOCH].asnumpy()),
        best_map=float(params[META_BEST].asnumpy()) if META_BEST in params else -1.0,
    )
