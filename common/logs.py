"""One voice in the console: msdet's own lines, plainly; everything else to the log file.

The console shows msdet's messages (loggers ``msdet.*`` and the commands' ``train``,
``eval``, ``predict``, ``export``, ``selftest``) as they are, warnings and errors with a
prefix, lines over :data:`CONSOLE_WIDTH` characters wrapped at a space (an ``error:`` stays
one line, whole); other libraries' records (matplotlib's font cache, pycocotools, MindSpore's
Python warnings and its logger's ``[WARNING]`` lines, :func:`speak_through_msdet`) reach
the console only as errors. The run folder's log file gets every record with its time,
level and logger.
"""

from __future__ import annotations

import logging
import sys
import textwrap
import warnings

MSDET_LOGGERS = ("msdet", "train", "eval", "predict", "export", "selftest", "chip_check")
CONSOLE_FORMAT = "%(message)s"
FILE_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
# The longest console line: wider ones wrap (a terminal of 160 columns shows them whole).
CONSOLE_WIDTH = 160
# Libraries whose INFO lines are noise in a user's console (matplotlib logs its font cache
# rebuild at INFO/WARNING; PIL its plugins at DEBUG).
QUIET = ("matplotlib", "PIL", "h5py", "numexpr")


def is_msdet(name: str) -> bool:
    """Whether a logger of this name speaks for msdet."""
    return any(name == n or name.startswith(n + ".") for n in MSDET_LOGGERS)


def printable(text: str) -> str:
    """``text`` with the bytes of a file name that is not valid UTF-8 (held by Python as
    surrogates) written as ``\\udcXX``: a stream that takes UTF-8 would refuse the line."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


class FileFormatter(logging.Formatter):
    """The log file's lines (:data:`FILE_FORMAT`), made :func:`printable`."""

    def format(self, record: logging.LogRecord) -> str:
        return printable(super().format(record))


class ConsoleFormatter(logging.Formatter):
    """msdet's lines as they are; ``warning:`` / ``error:`` before the others; lines longer
    than :data:`CONSOLE_WIDTH` wrapped at spaces, the rest indented (errors excepted: one
    line a script can grep; a word longer than the width, a path, is never cut)."""

    def format(self, record: logging.LogRecord) -> str:
        text = printable(super().format(record))
        if record.levelno >= logging.ERROR:
            return text if text.startswith("error:") else f"error: {text}"
        if record.levelno >= logging.WARNING:
            text = text if text.startswith("warning:") else f"warning: {text}"
        return "\n".join(wrapped(line) for line in text.split("\n"))


def wrapped(line: str, width: int = CONSOLE_WIDTH) -> str:
    """``line`` broken at spaces into lines of at most ``width`` characters (those after
    the first indented by two spaces), unless a single word is longer."""
    if len(line) <= width:
        return line
    return "\n".join(
        textwrap.wrap(
            line,
            width=width,
            subsequent_indent="  ",
            break_long_words=False,
            break_on_hyphens=False,
        )
    )


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


def speak_through_msdet(logger: logging.Logger) -> None:
    """A library logger that prints for itself (MindSpore's: its own stderr handler, not
    propagating) hands its records to msdet's handlers instead: the log file takes them
    all, the console its errors (:class:`ConsoleFilter`). Its file handlers stay."""
    for handler in list(logger.handlers):
        if type(handler) is logging.StreamHandler:
            logger.removeHandler(handler)
    logger.propagate = True


def add_log_file(path: str) -> logging.Handler:
    """Every record from now on also goes to ``path`` (appended), with time and logger."""
    handler = logging.FileHandler(path, encoding="utf-8")
    handler.setFormatter(FileFormatter(FILE_FORMAT))
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
