"""Run folders: where a command writes, and one owner at a time.

A command writes into ``run.dir`` when given, else into ``<run.root>/<command>/<run.name>``.
Without a name it takes the next free one (``exp``, ``exp2``, ...: claimed with an atomic
``mkdir``, so two commands started together never share one); a name or folder the user
gives is used as given. The command that writes into a folder holds its lock
(:class:`RunLock`, an ``flock`` on ``.msdet.lock``) from before its first write until it
exits: a second command on the same folder is refused while the first runs, and a lock
left by a killed process is free again (the kernel drops it with the process).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from msdet.common.schema import ConfigError

LOCK_FILE = ".msdet.lock"
DEFAULT_NAME = "exp"
# What a command writes about itself: a folder holding only these has no results in it.
BOOKKEEPING = (LOCK_FILE, "config.yaml", "overrides.txt", "train.log", "eval.log",
               "predict.log", "export.log")  # fmt: skip


class RunFolderBusyError(ConfigError):
    """Another live process holds the run folder's lock."""


@dataclass
class RunFolder:
    """A claimed run folder: its path, whether this process created it, and its lock."""

    path: str
    created: bool
    explicit: bool
    lock: RunLock | None = None

    def release(self, failed: bool) -> None:
        """Drop the lock; a folder this process created that holds nothing but its own
        bookkeeping after a failure is removed (a failed command leaves no empty folder)."""
        if self.lock is not None:
            self.lock.release()
            self.lock = None
        if failed and self.created and holds_no_results(self.path):
            shutil.rmtree(self.path, ignore_errors=True)


def holds_no_results(path: str) -> bool:
    """Whether ``path`` holds nothing but a command's bookkeeping (or nothing at all)."""
    try:
        return all(name in BOOKKEEPING for name in os.listdir(path))
    except FileNotFoundError:
        return True


def resolve_run_folder(run_cfg: Any, command: str) -> tuple[str, bool]:
    """(the folder ``run_cfg`` names, whether the user named it). A default folder is only
    the pattern's parent here: :func:`claim_run_folder` picks the free name."""
    if run_cfg.dir:
        return os.path.abspath(str(run_cfg.dir)), True
    parent = os.path.abspath(os.path.join(str(run_cfg.root), command))
    if run_cfg.name:
        return os.path.join(parent, str(run_cfg.name)), True
    return parent, False


def claim_run_folder(run_cfg: Any, command: str, lock: bool = True) -> RunFolder:
    """Create (or take) the command's run folder and, with ``lock``, hold its lock.

    Raises :class:`ConfigError` when the folder is a file or cannot be written, and
    :class:`RunFolderBusyError` when another live process holds it."""
    path, explicit = resolve_run_folder(run_cfg, command)
    if explicit:
        created = _make_folder(path)
    else:
        path, created = _next_free(path)
    folder = RunFolder(path, created, explicit)
    if lock:
        try:
            folder.lock = RunLock(path, command)
        except BaseException:
            folder.release(failed=True)
            raise
    return folder


def latest_run(parent: str, holds: Callable[[str], bool]) -> str | None:
    """The most recently modified folder under ``parent`` for which ``holds(folder)`` is
    true (resume=auto without a named run takes the latest run it can resume), or None."""
    try:
        names = os.listdir(parent)
    except OSError:
        return None
    found = [p for n in names if os.path.isdir(p := os.path.join(parent, n)) and holds(p)]
    return max(found, key=os.path.getmtime) if found else None


def _make_folder(path: str) -> bool:
    """Create ``path`` (and its parents) unless it exists; True when created here."""
    if os.path.exists(path) and not os.path.isdir(path):
        raise ConfigError(f"run folder {path} is a file: choose another with run.dir=...")
    try:
        os.makedirs(path)
        return True
    except FileExistsError:
        return False
    except OSError as err:
        raise ConfigError(
            f"run folder {path} cannot be created ({err.strerror}): choose another with run.dir=..."
        ) from err


def _next_free(parent: str) -> tuple[str, bool]:
    """``parent/exp``, ``parent/exp2``, ...: the first that this call creates."""
    if os.path.exists(parent) and not os.path.isdir(parent):
        raise ConfigError(f"{parent} is a file: choose another root with run.root=...")
    for n in range(1, 100_000):
        path = os.path.join(parent, DEFAULT_NAME if n == 1 else f"{DEFAULT_NAME}{n}")
        if os.path.exists(path):
            continue
        try:
            os.makedirs(path)
            return path, True
        except FileExistsError:  # another command claimed it a moment ago
            continue
        except OSError as err:
            raise ConfigError(
                f"run folder {path} cannot be created ({err.strerror}): choose another "
                "with run.root=... or run.dir=..."
            ) from err
    raise ConfigError(f"{parent} holds too many runs: choose a name with run.name=...")


class RunLock:
    """An exclusive ``flock`` on ``<folder>/.msdet.lock``, held until :meth:`release` or the
    process's end; the file says who holds it (pid, host, command, start time)."""

    def __init__(self, folder: str, command: str):
        self.path = os.path.join(folder, LOCK_FILE)
        for _ in range(10):
            fd = self._open(folder)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = _read_holder(fd)
                os.close(fd)
                raise RunFolderBusyError(
                    f"run folder {folder} is in use by {holder}: wait for it to finish, or "
                    "choose another folder with run.dir=... (or run.name=...)"
                ) from None
            # The holder before us may have removed the file between our open and our lock:
            # then ours is a lock on a file nobody else will open. Take the one on disk.
            try:
                same = os.fstat(fd).st_ino == os.stat(self.path).st_ino
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)
        else:
            raise RunFolderBusyError(f"run folder {folder}: its lock keeps changing hands")
        self.fd = fd
        os.ftruncate(fd, 0)
        record = {"pid": os.getpid(), "host": socket.gethostname(), "command": command,
                  "started": time.strftime("%Y-%m-%d %H:%M:%S")}  # fmt: skip
        os.write(fd, json.dumps(record).encode())
        os.fsync(fd)

    def _open(self, folder: str) -> int:
        try:
            return os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as err:
            raise ConfigError(
                f"run folder {folder} is not writable ({err.strerror}): choose another "
                "with run.dir=..."
            ) from err

    def release(self) -> None:
        """Unlock and remove the lock file (the next command takes the folder)."""
        if self.fd is None:
            return
        with contextlib.suppress(OSError):
            os.remove(self.path)
        fcntl.flock(self.fd, fcntl.LOCK_UN)
        os.close(self.fd)
        self.fd = None


def _read_holder(fd: int) -> str:
    try:
        os.lseek(fd, 0, os.SEEK_SET)
        record = json.loads(os.read(fd, 4096).decode() or "{}")
    except (OSError, ValueError):
        record = {}
    if not record:
        return "another process"
    return (
        f"{record.get('command', 'a command')} (pid {record.get('pid')} on "
        f"{record.get('host')}, since {record.get('started')})"
    )
