"""A run's checkpoint files by name, and which of them a resume can start from.

Free of MindSpore: the run-folder rules (:mod:`~msdet.engine.training.run_folder`) decide
with these before the runtime is set up; :mod:`~msdet.engine.training.checkpoints` writes
and reads the files.

Every checkpoint is written under a temporary name and renamed (``checkpoints.save_atomic``),
so a file under its final name is complete. Within an epoch the order is ``best.ckpt``, then
``epoch_N.ckpt``, then ``last.ckpt``: a run killed between them has a newer epoch file than
``last.ckpt`` (or no ``last.ckpt`` yet), and a resume takes the newest of them.
"""

from __future__ import annotations

import os
import re

CHECKPOINTS = "checkpoints"  # the folder, under the run folder
LAST = "last.ckpt"
BEST = "best.ckpt"
# The temporary names: msdet's own, and the one MindSpore writes first (it turns the
# ``.ckpt`` suffix of the name it is given into ``.tmp``).
PARTIAL = ".partial.ckpt"
PARTIAL_NAMES = re.compile(r".*\.partial\.(ckpt|tmp)$")
EPOCH_FILE = re.compile(r"^epoch_(\d+)\.ckpt$")


def checkpoint_dir(run_dir: str) -> str:
    """``<run_dir>/checkpoints``."""
    return os.path.join(run_dir, CHECKPOINTS)


def epoch_files(directory: str) -> list[str]:
    """``epoch_N.ckpt`` files in ``directory``, oldest epoch first (no partial files)."""
    found = [
        (int(m.group(1)), os.path.join(directory, name))
        for name in os.listdir(directory) if (m := EPOCH_FILE.match(name))
    ] if os.path.isdir(directory) else []  # fmt: skip
    return [path for _, path in sorted(found)]


def epoch_of(path: str) -> int | None:
    """N of an ``epoch_N.ckpt`` path, else None."""
    m = EPOCH_FILE.match(os.path.basename(path))
    return int(m.group(1)) if m else None


def resume_candidates(run_dir: str) -> list[str]:
    """The files a resume of the run in ``run_dir`` may start from, best first: the newest
    epoch file when it is ahead of ``last.ckpt`` (a kill between the two writes) or there
    is no ``last.ckpt``, then ``last.ckpt``, then the other epoch files, newest first."""
    directory = checkpoint_dir(run_dir)
    last = os.path.join(directory, LAST)
    epochs = list(reversed(epoch_files(directory)))
    if not os.path.isfile(last):
        return epochs
    if epochs and os.path.getmtime(epochs[0]) > os.path.getmtime(last):
        return [epochs[0], last, *epochs[1:]]
    return [last, *epochs]


def saved_checkpoints(run_dir: str) -> list[str]:
    """Every complete checkpoint file of the run in ``run_dir`` (``best.ckpt`` included)."""
    directory = checkpoint_dir(run_dir)
    best = os.path.join(directory, BEST)
    return resume_candidates(run_dir) + ([best] if os.path.isfile(best) else [])


def partial_files(directory: str) -> list[str]:
    """Temporary files a killed or failed checkpoint write left in ``directory``."""
    if not os.path.isdir(directory):
        return []
    return [os.path.join(directory, n) for n in sorted(os.listdir(directory))
            if PARTIAL_NAMES.match(n)]  # fmt: skip


def inside_run(path: str, run_dir: str) -> bool:
    """Whether the checkpoint ``path`` is one of ``run_dir``'s own."""
    folder = os.path.dirname(os.path.abspath(path))
    return os.path.abspath(folder) == os.path.abspath(checkpoint_dir(run_dir))
