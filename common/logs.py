"""One voice in the console: msdet's own lines, plainly; everything else to the log file.

The console shows msdet's messages (loggers ``msdet.*`` and the commands' ``train``,
``eval``, ``predict``, ``export``, ``selftest``) as they are, warnings and errors with a
prefix; other libraries' records (matplotlib's font cache, pycocotools, MindSpore's Python
warnings) reach the console only as errors. The run folder's log file gets every record
with its time, level and logger.
"""

from __future__ import annotations

import logging
import sys
import warnings

MSDET_LOGGERS = ("msdet", "train", "eval", "predict", "export", "selftest", "chip_check")
CONSOLE_FORMAT = "%(message)s"
FILE_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
# Libraries whose INFO lines are noise in a user's console (matplotlib logs its font cache
# rebuild at INFO/WARNING; PIL its plugins at DEBUG).
QUIET = ("matplotlib", "PIL", "h5py", "numexpr")


def is_msdet(name: str) -> bool:
    """Whether a logger of this name speaks for msdet."""
    return any(name == n or name.startswith(n + ".") for n in MSDET_LOGGERS)


class ConsoleFormatter(logging.Formatter):
    """msdet's lines as they are; ``warning:`` / ``error:`` before the others."""

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        if record.levelno >= logging.ERROR:
            return text if text.startswith("error:") else f"error: {text}"
        if record.levelno >= logging.WARNING:
            return text if text.startswith("warning:") else f"warning: {text}"
        return text


class ConsoleFilter(logging.Filter):
    """msdet's records at INFO and above; other libraries' at ERROR and above."""

    def filter(self, record: logging.LogRecord) -> bool:
        if is_msdet(record.name):
            return record.levelno >= logging.INFO
        return record.levelno >= logging.ERROR


def setup_logging(log_file: str | None = None, stream=None) -> None:
    """Console handler (``stream``, default stdout) and, with ``log_file``, a file handler
    that takes every record; replaces handlers an earlier call installed."""
    root = logging.getLogger()
    for handler in list(root.handlers):
        if getattr(handler, "msdet", False):
            root.removeHandler(handler)
            handler.close()
    root.setLevel(logging.INFO)
    for name in MSDET_LOGGERS:  # msdet's DEBUG records reach the log file (not the console)
        logging.getLogger(name).setLevel(logging.DEBUG)
    console = logging.StreamHandler(stream or sys.stdout)
    console.setFormatter(ConsoleFormatter(CONSOLE_FORMAT))
    console.addFilter(ConsoleFilter())
    console.msdet = True
    root.addHandler(console)
    if log_file:
        add_log_file(log_file)
    for name in QUIET:
        logging.getLogger(name).setLevel(logging.WARNING)
    # Python warnings (deprecations of libraries) become log records: file, not console.
    logging.captureWarnings(True)
    warnings.simplefilter("default")


def add_log_file(path: str) -> logging.Handler:
    """Every record from now on also goes to ``path`` (appended), with time and logger."""
    handler = logging.FileHandler(path, encoding="utf-8")
    handler.setFormatter(logging.Formatter(FILE_FORMAT))
    handler.setLevel(logging.DEBUG)
    handler.msdet = True
    logging.getLogger().addHandler(handler)
    return handler


def close_log_files() -> None:
    """Close msdet's file handlers (the run folder may be removed after)."""
    root = logging.getLogger()
    for handler in list(root.handlers):
        if getattr(handler, "msdet", False) and isinstance(handler, logging.FileHandler):
            root.removeHandler(handler)
            handler.close()
