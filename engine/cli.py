"""What every Hydra entry point (train.py, eval.py, predict.py, export.py) does around its
work: normalise the config as users type it, and report a user's mistake in one line.

Free of MindSpore imports: it runs before :func:`engine.runtime.setup_runtime`.
"""

from __future__ import annotations

import contextlib
import logging
import sys
from collections.abc import Iterator
from typing import Any

from omegaconf import open_dict

from msdet.data.config import input_size

log = logging.getLogger("msdet")

# Errors that describe bad input (a config value, a path, a checkpoint, a stopped run):
# msdet's messages name the file or key, so one line says it all and the traceback only
# goes to the run's log file. Anything else is a bug and keeps Hydra's traceback.
USER_ERRORS: tuple[type[BaseException], ...] = (ValueError, FileNotFoundError, PermissionError)


def prepare_config(cfg: Any) -> Any:
    """Normalise settings users may type in short form, in place; returns ``cfg``.

    ``data.img_size`` and ``eval.img_size`` become ``[h, w]`` (one number means a
    square); a size that is not a multiple of 32 raises ``ValueError`` naming its key.
    """
    with open_dict(cfg):
        if "data" in cfg and "img_size" in cfg.data:
            cfg.data.img_size = list(input_size(cfg.data.img_size, "data.img_size"))
        if "eval" in cfg and "img_size" in cfg.eval:
            cfg.eval.img_size = list(input_size(cfg.eval.img_size, "eval.img_size"))
    return cfg


def typed_overrides() -> dict[str, str]:
    """The command line's overrides as typed (``key -> value``, Hydra's ``+``/``~`` prefixes
    dropped); {} outside a Hydra run. The composed config cannot say whether
    ``model=yolox_nano`` was the default or the user's choice; this can."""
    try:
        from hydra.core.hydra_config import HydraConfig

        task = list(HydraConfig.get().overrides.task)
    except (ImportError, ValueError):
        return {}
    typed = {}
    for item in task:
        key, sep, value = item.partition("=")
        if sep:
            typed[key.lstrip("+~")] = value
    return typed


def apply_described_size(cfg: Any, description: Any, typed: dict[str, str]) -> None:
    """``eval.img_size`` from a checkpoint's description unless the command line set it."""
    if description is None or not description.input_size or "eval.img_size" in typed:
        return
    with open_dict(cfg):
        cfg.eval.img_size = list(input_size(list(description.input_size), "eval.img_size"))


@contextlib.contextmanager
def user_errors(extra: tuple[type[BaseException], ...] = ()) -> Iterator[None]:
    """Run an entry point's body; a bad-input error becomes one ``error:`` line and exit 1.

    The traceback of such an error still reaches the run folder's log file. Other
    exceptions get the same first line, then propagate (Hydra prints their traceback).
    """
    try:
        yield
    except (*USER_ERRORS, *extra) as err:
        log.error("error: %s", _one_line(err))
        _traceback_to_log_files(err)
        sys.exit(1)
    except Exception as err:
        first = next((ln.strip() for ln in str(err).splitlines() if ln.strip()), "")
        log.error("error: %s: %s (traceback below)", type(err).__name__, first)
        raise


def _one_line(err: BaseException) -> str:
    text = str(err).strip() or type(err).__name__
    return " ".join(line.strip() for line in text.splitlines())


def _traceback_to_log_files(err: BaseException) -> None:
    record = log.makeRecord(
        log.name, logging.DEBUG, __file__, 0, "traceback of the error above", (), None
    )
    record.exc_info = (type(err), err, err.__traceback__)
    for handler in logging.getLogger().handlers:
        if isinstance(handler, logging.FileHandler):
            handler.handle(record)
