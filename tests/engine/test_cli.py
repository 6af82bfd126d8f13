"""Entry-point glue: short-form settings normalised, a user's mistake reported in one line."""

from __future__ import annotations

import logging
import os
import subprocess
import sys

import pytest
from hydra import compose, initialize_config_dir

from msdet.engine.cli import prepare_config, user_errors
from tests.support import ROOT


def composed(*overrides: str):
    with initialize_config_dir(config_dir=os.path.join(ROOT, "configs"), version_base="1.3"):
        return compose("config", overrides=list(overrides))


def test_square_sizes_become_pairs():
    cfg = prepare_config(composed("data.img_size=256"))
    assert list(cfg.data.img_size) == [256, 256] and list(cfg.eval.img_size) == [256, 256]
    cfg = prepare_config(composed("eval.img_size=416"))
    assert list(cfg.data.img_size) == [320, 320] and list(cfg.eval.img_size) == [416, 416]


def test_a_size_off_the_stride_names_its_key():
    with pytest.raises(ValueError, match=r"eval\.img_size.*250"):
        prepare_config(composed("eval.img_size=250"))
    with pytest.raises(ValueError, match=r"data\.img_size"):
        prepare_config(composed("data.img_size=[320,100]"))


def test_user_errors_exit_with_one_line(caplog):
    with (
        caplog.at_level(logging.ERROR, logger="msdet"),
        pytest.raises(SystemExit) as stop,
        user_errors(),
    ):
        raise ValueError("train.pretrained: no such file x.ckpt\nsecond line")
    assert stop.value.code == 1
    assert [r.getMessage() for r in caplog.records] == [
        "error: train.pretrained: no such file x.ckpt second line"
    ]


def test_other_errors_keep_their_traceback(caplog):
    with caplog.at_level(logging.ERROR, logger="msdet"), pytest.raises(KeyError), user_errors():
        raise KeyError("gamma")
    assert caplog.records[0].getMessage().startswith("error: KeyError: 'gamma'")


def test_entry_point_prints_the_message_first(tmp_path):
    """eval.py with a size off the stride: the first stderr line is msdet's, no traceback."""
    out = subprocess.run(
        [
            sys.executable,
            "eval.py",
            "ckpt=none.ckpt",
            "eval.img_size=250",
            f"hydra.run.dir={tmp_path}",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 1
    lines = (out.stdout + out.stderr).strip().splitlines()
    assert len(lines) == 1 and "error: eval.img_size must be a positive multiple of 32" in lines[0]
    assert "Traceback" not in out.stderr
    assert "Traceback" in (tmp_path / "eval.log").read_text()  # kept in the run's log
