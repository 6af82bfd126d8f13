"""Progress of long work: a bar with ETA on a terminal, a line every few percent elsewhere.

    with Progress(total=len(files), desc="predict", unit="img") as bar:
        for path in files:
            ...
            bar.update()

On a terminal tqdm draws the bar (on stderr, cleared when done). Anywhere else (CI logs,
a pipe, ``train.log``) a bar's carriage returns would pile up into one unreadable line, so
the progress is logged instead: a line each time another ``every`` percent is done, at
most one per ``min_interval`` seconds (5: a short job logs its final line only). Both
end with the same final line, logged, so that the run's log file keeps it; a run stopped
early ends with the percentage it reached. ``MSDET_PROGRESS=bar|lines|off`` forces a mode
(``auto``, the default: a bar when stderr is a terminal).

While a bar is drawn, console logging and ``print`` (MindSpore's LossMonitor prints) write
each line with the bar cleared and redrawn after it (``tqdm.external_write_mode``), so that
their lines appear above the bar instead of glued to it.

This lives in ``common/``, the bottom layer: data generation, the CPU kernel measurement,
downloads of official weights, training steps, evaluation and prediction report through
it. The PyTorch converter (``models.convert_pytorch``, seconds even for yolox_l) logs its
stages with their times instead.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import sys
import time
from collections.abc import Iterable, Iterator
from typing import IO, Any, TypeVar

from tqdm import tqdm

ENV_VAR = "MSDET_PROGRESS"
MODES = ("auto", "bar", "lines", "off")
DEFAULT_EVERY = 5.0  # percent between two lines in line mode
MIN_INTERVAL = 5.0  # seconds at least between two lines in line mode (the final line aside)
UNKNOWN_TOTAL_SECONDS = 30.0  # seconds between two lines when the total is unknown (a camera)
_BAR_FORMAT = "{desc}: {percentage:3.0f}% {n_fmt}/{total_fmt} [{elapsed}<{remaining}, {rate_fmt}]"
_COUNT_FORMAT = "{desc}: {n_fmt} {unit} [{elapsed}, {rate_fmt}]"

T = TypeVar("T")
default_log = logging.getLogger("progress")


def progress_mode(requested: str | None = None, stream: IO | None = None) -> str:
    """``bar``, ``lines`` or ``off``: ``requested``, else ``$MSDET_PROGRESS``, else ``auto``
    (a bar when ``stream``, default stderr, is a terminal)."""
    mode = requested or os.environ.get(ENV_VAR) or "auto"
    if mode not in MODES:
        raise ValueError(f"{ENV_VAR} must be one of {MODES}, got {mode!r}")
    if mode == "auto":
        stream = stream if stream is not None else sys.stderr
        isatty = getattr(stream, "isatty", None)
        mode = "bar" if isatty is not None and isatty() else "lines"
    return mode


class Progress:
    """Progress of ``total`` units of work (None: unknown, e.g. a camera); see the module
    docstring. Line mode: a line every ``every`` percent, ``min_interval`` seconds apart at
    least (default :data:`MIN_INTERVAL`). ``logger``: where lines go (printed to stderr when logging is not set up). A
    context manager: leaving it closes."""

    def __init__(
        self,
        total: int | None,
        desc: str,
        unit: str = "it",
        every: float = DEFAULT_EVERY,
        mode: str | None = None,
        min_interval: float | None = None,
        logger: logging.Logger | None = None,
        file: IO | None = None,
    ):
        self.total = int(total) if total else None
        self.desc, self.unit, self.every = desc, unit, float(every)
        self.min_interval = MIN_INTERVAL if min_interval is None else float(min_interval)
        self.mode = progress_mode(mode, file)
        self.log = logger or default_log
        self.n = 0
        self.postfix = ""
        self.lines: list[str] = []  # what was logged, in order
        self._start = self._last_line = time.monotonic()
        self._next_percent = self.every
        self._logged_n = -1
        self._closed = False
        self._bar: tqdm | None = None
        self._output = contextlib.ExitStack()
        if self.mode == "bar":
            screen = file if file is not None else sys.stderr
            self._output.enter_context(_writes_above_bars(screen))
            self._bar = tqdm(
                total=self.total,
                desc=desc,
                unit=unit,
                leave=False,
                dynamic_ncols=True,
                file=screen,
            )

    def update(self, n: int = 1) -> None:
        """``n`` more units done."""
        self.update_to(self.n + n)

    def update_to(self, n: int) -> None:
        """``n`` units done in all (never less than before, at most ``total``)."""
        n = max(self.n, int(n))
        if self.total is not None:
            n = min(n, self.total)
        step, self.n = n - self.n, n
        if self._bar is not None:
            self._bar.update(step)
        elif self.mode == "lines" and step:
            self._maybe_line()

    def set_postfix(self, text: str) -> None:
        """A short text after the progress (``loss 12.345``): at the bar's end, and at the
        end of each line logged from now on."""
        self.postfix = str(text)
        if self._bar is not None:
            self._bar.set_postfix_str(self.postfix)

    def close(self) -> None:
        """Clear the bar and log the final line (once; nothing in mode ``off``, nor for
        no work at all: a total of 0, or none counted of an unknown total)."""
        if self._closed:
            return
        self._closed = True
        if self._bar is not None:
            self._bar.close()
        self._output.close()
        if self.mode != "off" and self._logged_n != self.n and (self.n or self.total):
            self._line()

    def line(self) -> str:
        """The progress as one line: ``desc: 40% 12/30 [00:12<00:18, 1.00step/s]``, then the
        postfix (:meth:`set_postfix`)."""
        fmt = _BAR_FORMAT if self.total is not None else _COUNT_FORMAT
        text = tqdm.format_meter(
            self.n,
            self.total,
            time.monotonic() - self._start,
            prefix=self.desc,
            unit=self.unit,
            bar_format=fmt,
        )
        return " ".join((text + " " + self.postfix).split())

    def _maybe_line(self) -> None:
        waited = time.monotonic() - self._last_line
        if self.total is None:
            if waited >= max(UNKNOWN_TOTAL_SECONDS, self.min_interval):
                self._line()
            return
        percent = 100.0 * self.n / self.total
        if percent + 1e-9 >= self._next_percent:
            self._next_percent = (math.floor(percent / self.every + 1e-9) + 1) * self.every
            if waited >= self.min_interval or self.n == self.total:
                self._line()

    def _line(self) -> None:
        text = self.line()
        self.lines.append(text)
        self._logged_n, self._last_line = self.n, time.monotonic()
        if self.log.hasHandlers():
            self.log.info("%s", text)
        else:  # a plain script that set up no logging
            print(text, file=sys.stderr, flush=True)

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def progress(
    iterable: Iterable[T], total: int | None, desc: str, unit: str = "it", **kwargs: Any
) -> Iterator[T]:
    """The items of ``iterable``, counting each in a :class:`Progress` (closed at the end,
    also when the loop stops early). ``kwargs``: those of :class:`Progress`."""
    with Progress(total, desc, unit, **kwargs) as bar:
        for item in iterable:
            yield item
            bar.update()


class _AboveBars:
    """A text stream that writes each complete line with the bars on ``bars`` cleared
    first and redrawn after (``tqdm.external_write_mode``), so that it lands above them."""

    def __init__(self, stream: IO, bars: IO):
        self.stream, self.bars, self._pending = stream, bars, ""

    def write(self, text: str) -> int:
        lines, sep, self._pending = (self._pending + text).rpartition("\n")
        if sep:
            with tqdm.external_write_mode(file=self.bars):
                self.stream.write(lines + sep)
                self.stream.flush()
        return len(text)

    def flush(self) -> None:
        if self._pending:
            self.stream.write(self._pending)
            self._pending = ""
        self.stream.flush()

    def __getattr__(self, name: str) -> Any:  # isatty, fileno, encoding, ...
        return getattr(self.stream, name)


@contextlib.contextmanager
def _writes_above_bars(bars: IO) -> Iterator[None]:
    """``print`` and console logging (a root handler on stdout or stderr) write above the
    bars drawn on ``bars`` while in the block."""
    consoles = [
        h
        for h in logging.getLogger().handlers
        if type(h) is logging.StreamHandler and h.stream in (sys.stdout, sys.stderr)
    ]
    stdout, streams = sys.stdout, [h.stream for h in consoles]
    sys.stdout = _AboveBars(stdout, bars)
    for handler in consoles:
        handler.setStream(_AboveBars(handler.stream, bars))
    try:
        yield
    finally:
        for handler, stream in zip(consoles, streams):
            handler.setStream(stream)
        sys.stdout.flush()
        sys.stdout = stdout
