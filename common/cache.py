"""msdet's one cache root, and errors that say which setting put a cache folder where it is.

Everything msdet keeps between runs lives under one root: ``$MSDET_CACHE_DIR`` when set,
else ``$XDG_CACHE_HOME/msdet`` (``~/.cache/msdet``), whatever the current folder is. Under it:
``weights/`` (official weights), ``kernels/`` (msdet's compiled CPU kernels), ``graphs/`` and
``fusion/`` (MindSpore's compile caches), and the datasets' own entries (``shapes-*``: the
generated sets; ``folders/``: a dataset folder's labels converted to COCO json), which
``data.cache_dir`` moves elsewhere when set.

A cache folder that cannot be made or written (a read-only disk, a full one, a file where
the folder should be) is a :class:`CacheFolderError` naming the path, the reason and the
setting that chose it, instead of a bare errno message.
"""

from __future__ import annotations

import errno
import os

CACHE_VAR = "MSDET_CACHE_DIR"


class CacheFolderError(OSError):
    """A cache folder cannot be created or written; the message names the path, why, and
    the setting that chose it."""


def cache_root() -> str:
    """``$MSDET_CACHE_DIR``, else ``$XDG_CACHE_HOME/msdet``, else ``~/.cache/msdet``
    (absolute: the current folder never moves it)."""
    if os.environ.get(CACHE_VAR):
        return os.path.abspath(os.environ[CACHE_VAR])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(os.path.abspath(base), "msdet")


def user_cache_dir(name: str) -> str:
    """``<cache root>/<name>`` (:func:`cache_root`)."""
    return os.path.join(cache_root(), name)


def dataset_cache_dir(value: object) -> str:
    """``data.cache_dir`` as a folder: the value when set (a relative one from the current
    folder), else :func:`cache_root`."""
    return os.path.abspath(str(value)) if value else cache_root()


def chosen_by(setting: str | None = None) -> str:
    """What put the cache where it is, as a user changes it: ``setting`` (e.g.
    ``data.cache_dir``) when given, else ``$MSDET_CACHE_DIR`` or the default root."""
    if setting:
        return f"{setting} (default: {CACHE_VAR}, else ~/.cache/msdet)"
    if os.environ.get(CACHE_VAR):
        return f"{CACHE_VAR}={os.environ[CACHE_VAR]}"
    return f"msdet's cache root {cache_root()} (set {CACHE_VAR} to move it)"


def cache_error(path: str, err: OSError, setting: str | None = None) -> CacheFolderError:
    """The one-line error for ``err`` met while writing ``path`` in a cache: the path, the
    reason in words, and the setting to change."""
    reason = err.strerror or str(err)
    if err.errno == errno.ENOSPC:
        reason = "the disk is full"
    elif err.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
        reason = f"not writable: {reason}"
    elif err.errno in (errno.ENOTDIR, errno.EEXIST) or _file_on_the_way(path):
        reason = f"a file is where a folder should be: {_file_on_the_way(path) or path}"
    elif err.errno == errno.EISDIR:
        reason = "a folder is where the file should be: remove it"
    return CacheFolderError(
        err.errno,
        f"cannot write {path} ({reason}): it is in the cache chosen by "
        f"{chosen_by(setting)}; point that at a writable folder with free space",
    )


def make_cache_folder(path: str, setting: str | None = None) -> str:
    """Create ``path`` (and its parents) unless it exists; :func:`cache_error` if it
    cannot be."""
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as err:
        raise cache_error(path, err, setting) from err
    if not os.path.isdir(path):
        raise cache_error(path, NotADirectoryError(errno.ENOTDIR, "not a folder"), setting)
    return path


def _file_on_the_way(path: str) -> str | None:
    """The first part of ``path`` that is a file where a folder should be, or None."""
    head = os.path.abspath(path)
    parts = []
    while head and head != os.path.dirname(head):
        parts.append(head)
        head = os.path.dirname(head)
    for part in reversed(parts[1:]):  # parents, from the root down (path itself excluded)
        if os.path.isfile(part):
            return part
    return None
