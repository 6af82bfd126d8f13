"""Progress: a line every few percent when the output is not a terminal, one final line."""

from __future__ import annotations

import io
import logging
import re
import sys

import pytest

from msdet.common import progress as progress_module
from msdet.common.progress import ENV_VAR, Progress, progress, progress_mode
from msdet.data.synthetic import generate_shapes

log = logging.getLogger("test_progress")


@pytest.fixture(autouse=True)
def no_line_interval(monkeypatch):
    """Lines as fast as the work goes (a real run keeps them 5 s apart at least)."""
    monkeypatch.setattr(progress_module, "MIN_INTERVAL", 0.0)


def percents(lines: list[str]) -> list[int]:
    return [int(re.search(r": +(\d+)% ", line).group(1)) for line in lines]


def test_lines_every_ten_percent_and_the_final_line_once(caplog):
    caplog.set_level(logging.INFO, logger="test_progress")
    with Progress(40, "work", "img", every=10, mode="lines", logger=log) as bar:
        for _ in range(40):
            bar.update()
    assert percents(bar.lines) == [10, 20, 30, 40, 50, 60, 70, 80, 90, 100]
    assert bar.lines[-1].startswith("work: 100% 40/40 [")
    assert "img/s]" in bar.lines[-1]
    # Every line reached the log (train.log, predict.log), closing added none.
    assert [r.getMessage() for r in caplog.records if r.name == "test_progress"] == bar.lines


def test_lines_keep_their_interval_but_the_final_line_comes_at_once():
    bar = Progress(100, "quick", every=5, mode="lines", logger=log, min_interval=60)
    bar.update(30)
    bar.update(70)
    assert [line.split(" [")[0] for line in bar.lines] == ["quick: 100% 100/100"]


def test_a_large_update_crossing_several_steps_gives_one_line():
    bar = Progress(7, "sinks", every=5, mode="lines", logger=log)
    bar.update(3)  # 43%: one line, the next at 45%
    bar.update(1)  # 57%
    bar.update(3)  # 100%
    bar.close()
    assert percents(bar.lines) == [43, 57, 100]
    assert [line.split(" [")[0] for line in bar.lines] == [
        "sinks: 43% 3/7",
        "sinks: 57% 4/7",
        "sinks: 100% 7/7",
    ]


def test_stopped_early_the_final_line_says_how_far(caplog):
    caplog.set_level(logging.INFO, logger="test_progress")
    items = progress(range(10), 10, "early", every=50, mode="lines", logger=log)
    for k in items:
        if k == 6:  # 6 items counted (the 7th is taken, not yet done)
            break
    items.close()  # what dropping the loop's generator does
    lines = [r.getMessage().split(" [")[0] for r in caplog.records if r.name == "test_progress"]
    assert lines == ["early: 50% 5/10", "early: 60% 6/10"]


def test_close_logs_once():
    bar = Progress(10, "once", every=50, mode="lines", logger=log)
    bar.update(7)
    bar.close()
    bar.close()
    assert [line.split(" [")[0] for line in bar.lines] == ["once: 70% 7/10"]


def test_unknown_total_counts_and_ends_with_the_count():
    bar = Progress(None, "camera 0", "frame", mode="lines", logger=log)
    bar.update(5)
    bar.close()
    assert len(bar.lines) == 1 and bar.lines[0].startswith("camera 0: 5 frame [")
    for total in (0, None):  # nothing to do, nothing done: no line
        bar = Progress(total, "no videos", mode="lines", logger=log)
        bar.close()
        assert bar.lines == []


def test_mode_auto_is_a_bar_on_a_terminal_only(monkeypatch):
    class Terminal(io.StringIO):
        def isatty(self):
            return True

    monkeypatch.delenv(ENV_VAR, raising=False)
    assert progress_mode(stream=Terminal()) == "bar"
    assert progress_mode(stream=io.StringIO()) == "lines"
    monkeypatch.setenv(ENV_VAR, "off")
    assert progress_mode(stream=Terminal()) == "off"
    bar = Progress(3, "quiet", logger=log)
    bar.update(3)
    bar.close()
    assert bar.lines == []
    monkeypatch.setenv(ENV_VAR, "sometimes")
    with pytest.raises(ValueError, match=ENV_VAR):
        progress_mode()


def test_a_bar_ends_at_100_percent_and_keeps_prints_above_it(capsys):
    screen, stdout = io.StringIO(), sys.stdout
    with Progress(6, "epoch 1/2", "step", mode="bar", logger=log, file=screen) as bar:
        assert sys.stdout is not stdout  # print writes above the bar (it clears, redraws)
        print("epoch: 1 step: 3, loss is 1.0")  # as LossMonitor prints
        bar.update(3)  # a sink of 3 steps
        bar.update(3)
    assert sys.stdout is stdout
    assert (bar.n, bar.total) == (6, 6)
    assert bar.lines[-1].startswith("epoch 1/2: 100% 6/6 [")
    assert "epoch: 1 step: 3, loss is 1.0\n" in capsys.readouterr().out
    assert "epoch 1/2:" in screen.getvalue()  # the bar was drawn, then cleared (leave=False)


def test_generation_reports_progress_per_split(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="msdet.data.synthetic")
    generate_shapes(str(tmp_path), 4, 2, seed=0, workers=1)
    lines = [r.getMessage() for r in caplog.records if r.name == "msdet.data.synthetic"]
    assert [line.split(" [")[0] for line in lines if "100%" in line] == [
        "shapes train: 100% 4/4",
        "shapes val: 100% 2/2",
    ]


def test_a_print_lands_above_the_bar_not_glued_to_it(monkeypatch):
    screen = io.StringIO()  # one terminal: the bar and stdout
    monkeypatch.setattr(sys, "stdout", screen)
    with Progress(4, "epoch 1/1", "step", mode="bar", logger=log, file=screen) as bar:
        bar.update(1)
        print("epoch: 1 step: 1, loss is 1.0")
        bar.update(3)
    drawn = screen.getvalue().split("epoch: 1 step: 1, loss is 1.0\n")
    assert len(drawn) == 2 and "epoch 1/1:" in drawn[0]
    assert drawn[0].endswith("\r")  # the bar was cleared before the line, then redrawn
