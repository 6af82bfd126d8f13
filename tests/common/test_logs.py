"""common.logs: what reaches the console, and how wide it is."""

from __future__ import annotations

import io
import logging

import pytest

from msdet.common import logs


@pytest.fixture
def console(tmp_path):
    """msdet's logging set up on a string console and a log file; both read back."""
    stream = io.StringIO()
    logs.setup_logging(str(tmp_path / "run.log"), stream=stream)
    yield stream, tmp_path / "run.log"
    logs.close_log_files()
    logs.setup_logging()


def test_long_lines_wrap_at_spaces_and_errors_stay_whole(console):
    stream, log_file = console
    words = " ".join(f"word{i:03d}" for i in range(40))  # 319 characters
    path = "/data/" + "x" * 170 + ".json"
    logging.getLogger("train").info("%s", words)
    logging.getLogger("train").warning("cannot read %s: skipped", path)
    logging.getLogger("msdet").error("error: %s", words)
    lines = stream.getvalue().splitlines()
    assert lines[0].startswith("word000 word001") and len(lines[0]) <= logs.CONSOLE_WIDTH
    assert lines[1].startswith("  word0") and len(lines[1]) <= logs.CONSOLE_WIDTH
    wrapped_info = lines[0] + " " + " ".join(line.strip() for line in lines[1:3])
    assert wrapped_info == words  # every word, in order, none cut
    assert lines[3] == "warning: cannot read"  # a path longer than a line is never cut
    assert lines[4:6] == [f"  {path}:", "  skipped"]
    assert lines[6] == f"error: {words}"  # one line a script can grep
    assert len(lines) == 7
    # The log file keeps each record on one line.
    assert f"INFO train: {words}" in log_file.read_text()


def test_a_library_logger_that_prints_for_itself_speaks_through_the_log_file(console):
    stream, log_file = console
    own = logging.getLogger("ME.test_logs")  # as MindSpore's: its own stderr handler
    own.propagate = False
    own.setLevel(logging.WARNING)
    own_console = io.StringIO()
    own.addHandler(logging.StreamHandler(own_console))
    own_file = log_file.with_suffix(".own")
    kept = logging.FileHandler(own_file)  # GLOG_logtostderr=0: MindSpore's own file
    own.addHandler(kept)
    try:
        logs.speak_through_msdet(own)
        own.warning("mindspore.export(file_format='ONNX') will be deleted")
        own.error("the graph could not be compiled")
    finally:
        own.removeHandler(kept)
        kept.close()
    assert own_console.getvalue() == ""
    assert stream.getvalue() == "error: the graph could not be compiled\n"
    text = log_file.read_text()
    assert "WARNING ME.test_logs: mindspore.export(file_format='ONNX') will be deleted" in text
    assert "ERROR ME.test_logs: the graph could not be compiled" in text
    assert "will be deleted" in own_file.read_text()
