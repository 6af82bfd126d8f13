"""A run stopped by SIGTERM (a scheduler, ``kill``, a container stop) or Ctrl+C (SIGINT):
where it stopped, the last checkpoint it wrote, and the command that resumes it, on the
console and in train.log, instead of nothing.

:func:`reported_interruption` wraps the training loop: SIGTERM raises :class:`Terminated`
there as Ctrl+C raises ``KeyboardInterrupt``; either one is reported
(:func:`interruption_report`) and leaves as :class:`RunInterrupted`, which train.py turns
into the exit status of a process stopped by that signal (128 + its number). The
checkpoints written before it are intact (``engine.training.checkpoints`` writes each one
atomically), so ``train.resume=auto`` continues from the last one.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
from collections.abc import Iterator, Sequence
from typing import Any

from msdet.engine.training.checkpoint_files import CHECKPOINTS, LAST
from msdet.engine.training.run_folder import fresh_command, resume_command

log = logging.getLogger("train")

OVERRIDES = "overrides.txt"  # the run's command line (engine.cli.Run.write_record)
SIGTERM_NAME = "SIGTERM (a kill, a scheduler, or Ctrl+C during a graph run: MindSpore passes it on)"


class Terminated(BaseException):
    """SIGTERM arrived: raised by the handler :func:`reported_interruption` installs, as
    Python raises ``KeyboardInterrupt`` for SIGINT (a ``BaseException``: no ``except
    Exception`` on the way swallows it)."""


class RunInterrupted(BaseException):
    """The run stopped on a signal, reported already; ``signum``: which."""

    def __init__(self, signum: int, message: str):
        super().__init__(message)
        self.signum = int(signum)


def interruption_report(
    state: Any, run_dir: str, signal_name: str, argv: Sequence[str]
) -> list[str]:
    """The lines that say where a run stopped: the epoch and step reached (``state``: the
    callbacks' ``TrainState``), the last checkpoint in ``run_dir`` and the epoch it holds,
    and the command that resumes the run (``argv``: its command line), or the one that
    starts it again when no checkpoint was written yet."""
    saved = max(int(getattr(state, "saved_epoch", 0)), int(state.start_epoch))
    if not state.epoch:
        where = "before its first epoch"
    elif saved >= state.epoch:  # between the epoch's checkpoint and the next epoch's steps
        where = f"after epoch {state.epoch} of {state.epochs}"
    else:
        where = f"in epoch {state.epoch} of {state.epochs}" + (
            f" (after step {state.steps} of {state.steps_per_epoch})" if state.steps else ""
        )
    last = os.path.join(run_dir, CHECKPOINTS, LAST)
    if os.path.isfile(last) and saved:
        return [
            f"stopped by {signal_name} {where}; the last checkpoint: {last} (after epoch {saved}, "
            f"{saved} of {state.epochs} epochs trained)",
            f"resume with: {resume_command(argv, run_dir)}",
        ]
    return [
        f"stopped by {signal_name} {where}, before its first checkpoint (written when epoch "
        f"{state.start_epoch + 1} ends): nothing to resume",
        f"start it again with: {fresh_command(argv)}",
    ]


def run_argv(run_dir: str) -> list[str]:
    """The run's command line, as its folder records it (``overrides.txt``); [] without."""
    try:
        with open(os.path.join(run_dir, OVERRIDES), encoding="utf-8") as f:
            return [line.strip() for line in f if line.strip()]
    except OSError:
        return []


@contextlib.contextmanager
def reported_interruption(state: Any, run_dir: str, report: bool = True) -> Iterator[None]:
    """Run the body with SIGTERM raising :class:`Terminated`; SIGTERM or Ctrl+C in it is
    reported (``report``: this process writes the run's log; the other ranks stay quiet)
    and leaves as :class:`RunInterrupted`. Outside the main thread signals cannot be
    handled: the body runs as it is."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def terminate(signum: int, frame: Any) -> None:
        raise Terminated()

    def interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, terminate)
    # MindSpore (2.10, measured) installs a SIGINT handler of its own that sends the process
    # a SIGTERM, at start-up and again at each graph run: Python's, installed again here,
    # names a Ctrl+C outside a graph run; one during a graph run arrives as SIGTERM.
    previous_int = signal.signal(signal.SIGINT, interrupt)
    try:
        yield
    except (KeyboardInterrupt, Terminated) as err:
        signum = signal.SIGINT if isinstance(err, KeyboardInterrupt) else signal.SIGTERM
        name = "Ctrl+C (SIGINT)" if signum == signal.SIGINT else SIGTERM_NAME
        lines = interruption_report(state, run_dir, name, run_argv(run_dir))
        if report:
            for line in lines:
                log.warning("%s", line)
        raise RunInterrupted(signum, "; ".join(lines)) from None
    finally:
        signal.signal(signal.SIGTERM, previous)
        signal.signal(signal.SIGINT, previous_int)
