"""Entry-point glue: --help per command, a bad command line stopped before any folder
exists, run folders named and owned, a user's mistake reported in one line."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import threading
from types import SimpleNamespace

import pytest

from msdet.common.runs import LOCK_FILE, RunFolderBusyError, RunLock, claim_run_folder
from msdet.engine.cli import help_text, run_command, typed_overrides, user_errors
from tests.support import ROOT


def entry(script: str, *args: str, cwd=ROOT, timeout=120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, os.path.join(ROOT, script), *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.mark.slow
@pytest.mark.parametrize(
    "script,first,takes,not_takes",
    [
        (
            "train.py",
            "model.",
            ["train.epochs=", "model=yolox_nano", "run.name="],
            ["predict.conf", "source="],
        ),
        (
            "predict.py",
            "source=",
            ["predict.conf=0.25", "source=", "eval.nms_iou="],
            ["train.epochs"],
        ),
        ("eval.py", "ckpt=", ["ckpt=", "eval.conf_thresh="], ["train.", "predict."]),
        ("export.py", "ckpt=", ["export.format=MINDIR", "ckpt="], ["train.", "predict."]),
    ],
)
def test_help_shows_what_the_command_takes_with_examples(script, first, takes, not_takes):
    out = entry(script, "--help")
    assert out.returncode == 0, out.stderr
    command = script.removesuffix(".py")
    usage = out.stdout.splitlines()[:2]
    assert usage[0] == f"usage: msdet {command} [key=value ...]"
    assert usage[1].split()[:3] == ["python", script, "[key=value"]
    assert "examples:" in out.stdout and f"python {script}" in out.stdout.split("examples:")[1]
    for key in takes:
        assert f"  {key}" in out.stdout, key
    for key in not_takes:
        assert f"  {key}" not in out.stdout, key
    assert out.stdout.strip().splitlines()[-1].startswith("All ")  # where the rest is
    # --help all: every setting, the command's own first (predict.py: what source takes).
    out = entry(script, "--help", "all")
    assert out.returncode == 0, out.stderr
    settings = out.stdout.split("the command's own first:\n", 1)[1]
    assert settings.startswith(f"  {first}"), settings[:200]


@pytest.mark.parametrize("command", ["train", "eval", "predict", "export"])
def test_help_is_short_the_main_settings_then_where_the_rest_is(command):
    from msdet.common.config import COMMANDS

    spec = COMMANDS[command]
    short, full = help_text(command), help_text(command, full=True)
    lines = short.splitlines()
    assert len(lines) <= 40 and max(len(line) for line in lines) <= 160
    settings = short.split("main settings (key=value; the value shown is the default):\n")[1]
    listed = [line.split("=")[0].strip() for line in settings.split("\n\n")[0].splitlines()]
    assert listed == list(spec.settings) and 8 <= len(listed) <= 20
    every = full.split("the command's own first:\n")[1].split("\n\n")[0].splitlines()
    assert set(listed) < {line.split("=")[0].strip() for line in every}
    assert lines[-1] == (
        f"All {len(every)} settings: msdet {command} --help all (python {command}.py --help all)"
        f"; the guide: {spec.guide} in the msdet repository"
    )
    assert len(full.splitlines()) > 60
    assert "data=shapes   (options: coco, shapes, shapes_stars; or a dataset folder" in short


def test_help_takes_all_after_it_or_as_one_option():
    from msdet.engine.cli import help_wanted

    assert help_wanted(["--help"]) == help_wanted(["model=yolox_s", "-h"]) == "short"
    assert help_wanted(["--help", "all"]) == help_wanted(["--help-all"]) == "all"
    assert help_wanted(["all", "--help"]) == "short"
    assert help_wanted(["train.epochs=3"]) is None


@pytest.mark.slow
def test_a_bad_setting_stops_before_any_folder_exists(tmp_path):
    out = entry("train.py", "train.epoch=3", cwd=tmp_path)
    assert out.returncode == 2
    assert out.stdout.strip() == (
        "error: unknown setting train.epoch; did you mean train.epochs?"
    ), out.stdout + out.stderr
    assert os.listdir(tmp_path) == []  # no runs/ folder


@pytest.mark.slow
def test_a_failed_command_leaves_no_folder_but_keeps_one_that_was_there(tmp_path):
    """eval.py with a missing checkpoint: one error line, and the folder it made is gone;
    a folder that was there before stays, with the traceback in its log."""
    out = entry("eval.py", "ckpt=none.ckpt", "data.num_train=8", "data.num_val=4",
                f"data.cache_dir={tmp_path / 'cache'}", cwd=tmp_path)  # fmt: skip
    assert out.returncode == 1, out.stdout + out.stderr
    assert "error: " in out.stdout and "none.ckpt" in out.stdout
    assert "Traceback" not in out.stdout + out.stderr
    assert not (tmp_path / "runs" / "eval" / "exp").exists()
    named = tmp_path / "mine"
    named.mkdir()
    out = entry("eval.py", "ckpt=none.ckpt", f"run.dir={named}", "data.num_train=8",
                "data.num_val=4", f"data.cache_dir={tmp_path / 'cache'}", cwd=tmp_path)  # fmt: skip
    assert out.returncode == 1
    assert "Traceback" in (named / "eval.log").read_text()


def claim(tmp_path, *argv, accept=None, command="tool"):
    seen = {}

    def body(run):
        seen["dir"] = run.dir
        seen["files"] = sorted(os.listdir(run.dir))
        with open(os.path.join(run.dir, "result.txt"), "w") as f:
            f.write("done")

    run_command(command, body, argv=[f"run.root={tmp_path}", *argv], accept=accept, main_rank=True)
    return seen


@pytest.mark.slow
def test_default_folders_take_the_next_free_name_and_named_ones_are_kept(tmp_path):
    first, second = claim(tmp_path), claim(tmp_path)
    assert first["dir"] == str(tmp_path / "tool" / "exp")
    assert second["dir"] == str(tmp_path / "tool" / "exp2")
    named = claim(tmp_path, "run.name=nano")
    assert named["dir"] == str(tmp_path / "tool" / "nano")
    # the record and the lock are there while the command runs, the lock is gone after
    assert named["files"] == [LOCK_FILE, "config.yaml", "overrides.txt", "tool.log"]
    assert sorted(os.listdir(named["dir"])) == ["config.yaml", "overrides.txt", "result.txt",
                                                "tool.log"]  # fmt: skip


@pytest.mark.slow
def test_a_refused_folder_keeps_its_record(tmp_path):
    """``accept`` refuses before anything is written: the folder's config.yaml still
    describes the run that made it."""
    claim(tmp_path, "run.name=a")
    folder = tmp_path / "tool" / "a"
    before = (folder / "config.yaml").read_text()

    def refuse(run):
        raise ValueError(f"{run.dir} already holds a run")

    with pytest.raises(SystemExit):
        claim(tmp_path, "run.name=a", "data.num_train=7", accept=refuse)
    assert (folder / "config.yaml").read_text() == before
    assert (folder / "result.txt").exists()


def test_the_run_folders_config_shows_the_resolved_sizes(tmp_path):
    """config.yaml is written from the loaded config: the sizes the run used."""
    from omegaconf import OmegaConf

    seen = claim(tmp_path, "run.name=sized", "data.img_size=416", command="train")
    written = OmegaConf.load(os.path.join(seen["dir"], "config.yaml"))
    assert list(written.train.input_size) == [320, 320]  # 0.8 x 416 = 332.8 -> 320
    assert list(written.eval.img_size) == list(written.data.img_size) == [416, 416]


def test_a_folder_is_owned_by_one_command_at_a_time(tmp_path):
    lock = RunLock(str(tmp_path), "train")
    try:
        with pytest.raises(RunFolderBusyError, match=rf"in use by train \(pid {os.getpid()}"):
            RunLock(str(tmp_path), "train")
    finally:
        lock.release()
    RunLock(str(tmp_path), "eval").release()  # free again
    assert not (tmp_path / LOCK_FILE).exists()


def test_a_lock_left_by_a_killed_process_is_free(tmp_path):
    code = (
        "import os, sys, time; from msdet.common.runs import RunLock; "
        f"RunLock({str(tmp_path)!r}, 'train'); print('locked', flush=True); time.sleep(60)"
    )
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "locked"
        holder = json.loads((tmp_path / LOCK_FILE).read_text())
        assert holder["pid"] == child.pid
        with pytest.raises(RunFolderBusyError, match=f"pid {child.pid}"):
            RunLock(str(tmp_path), "train")
    finally:
        child.kill()
        child.wait()
    RunLock(str(tmp_path), "train").release()  # the kernel dropped the dead one's lock


def test_two_commands_started_together_get_two_folders(tmp_path):
    dirs, errors = [], []

    run_cfg = SimpleNamespace(root=str(tmp_path), name=None, dir=None)

    def start():
        try:
            folder = claim_run_folder(run_cfg, "train")
            dirs.append(folder.path)
        except BaseException as err:  # noqa: BLE001 (report any failure of the thread)
            errors.append(err)

    threads = [threading.Thread(target=start) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and len(set(dirs)) == 4


def test_typed_overrides_keep_what_was_typed():
    assert typed_overrides(["model=yolox_s", "+eval.img_size=416", "x"]) == {
        "model": "yolox_s",
        "eval.img_size": "416",
    }


def test_help_shows_the_derived_training_size_apart_from_the_settings():
    settings, derived = help_text("train").split("derived from the settings (not typed):\n")
    assert "  eval.img_size=[320, 320]" in settings and "  train.input_size" not in settings
    assert derived.startswith("  train.input_size=[256, 256]   # the training input")
    assert "derived" not in help_text("eval")  # eval.py takes no train section


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


def test_options_that_are_not_settings_are_refused(tmp_path):
    out = entry("predict.py", "--conf", "0.5", cwd=tmp_path)
    assert out.returncode == 2
    assert "--conf: predict.py takes settings as key=value" in out.stdout


@pytest.mark.slow
def test_a_deferred_record_is_written_only_once_the_body_accepts_the_run(tmp_path):
    """train.py decides late (a resume that is another model is refused once the data is
    read): until its body says so, the folder's config.yaml and overrides.txt stay those of
    the run that made it."""
    claim(tmp_path, "run.name=a")
    folder = tmp_path / "tool" / "a"
    before = {n: (folder / n).read_text() for n in ("config.yaml", "overrides.txt")}
    argv = [f"run.root={tmp_path}", "run.name=a", "data.num_train=7"]

    def refuse(run):
        raise ValueError("another model")

    with pytest.raises(SystemExit):
        run_command("tool", refuse, argv=argv, main_rank=True, defer_record=True)
    assert {n: (folder / n).read_text() for n in before} == before
    assert "error: another model" in (folder / "tool.log").read_text()  # the log has it

    def accept(run):
        run.write_record()
        run.write_record()  # once is enough: a second call writes nothing new

    run_command("tool", accept, argv=argv, main_rank=True, defer_record=True)
    assert "num_train: 7" in (folder / "config.yaml").read_text()
    assert (folder / "overrides.txt").read_text() == "\n".join(argv) + "\n"
