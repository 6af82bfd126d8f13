"""engine.training.run_folder: a run folder that never loses a run's work, and that a run
killed before its first checkpoint does not block."""

from __future__ import annotations

import os
from types import SimpleNamespace

import pytest

from msdet.common.runs import claim_run_folder
from msdet.common.schema import ConfigError
from msdet.engine.training.run_folder import accept_train_folder, locate_resumed_run


def accept(run_dir, resume=None, overwrite=False, main=True) -> None:
    """train.py's rule for its run folder, as the command line applies it."""
    cfg = SimpleNamespace(train=SimpleNamespace(resume=resume, overwrite=overwrite))
    folder = SimpleNamespace(path=str(run_dir), lock=object() if main else None)
    accept_train_folder(SimpleNamespace(cfg=cfg, dir=str(run_dir), folder=folder))


def a_run(folder, *checkpoints: str, results: bool = True):
    """A run folder as training leaves it: checkpoint files (their contents do not matter
    to these rules) and results.csv."""
    (folder / "checkpoints").mkdir(parents=True, exist_ok=True)
    for name in checkpoints:
        (folder / "checkpoints" / name).write_bytes(b"ckpt")
    if results:
        (folder / "results.csv").write_text("epoch\n1\n")
    return folder


def test_a_fresh_run_is_refused_in_a_folder_that_holds_a_run(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "train.log").write_text("an earlier command's log")
    accept(run)  # a log alone is not a run: still fresh
    a_run(run, "epoch_0001.ckpt", "last.ckpt")
    with pytest.raises(ValueError, match="train.resume=auto.*train.overwrite=true.*run.dir"):
        accept(run)
    accept(run, resume="auto")  # continuing it
    # Another rank of the same job finds rank 0's first files: not its call to make.
    accept(run, main=False)
    assert (run / "results.csv").is_file()


def test_overwrite_removes_every_output_of_the_old_run_plots_included(tmp_path):
    run = a_run(tmp_path / "run", "last.ckpt")
    for name in ("val_predictions.jpg", "PR_curve.png", "F1_curve.png", "metrics.json"):
        (run / name).write_bytes(b"old")
    (run / "eval").mkdir()
    (run / "notes.txt").write_text("the user's own file")
    accept(run, overwrite=True)
    assert sorted(p.name for p in run.iterdir()) == ["notes.txt"]


def test_resume_of_another_run_into_a_used_folder_is_refused(tmp_path):
    """Issue: train.resume=PATH into a folder holding another run replaced its checkpoints."""
    a = a_run(tmp_path / "A", "epoch_0003.ckpt", "last.ckpt", "best.ckpt")
    b = a_run(tmp_path / "B", "epoch_0001.ckpt", "last.ckpt")
    other = str(b / "checkpoints" / "epoch_0001.ckpt")
    with pytest.raises(ValueError, match=r"already holds a run .*would continue another run"):
        accept(a, resume=other)
    assert sorted(os.listdir(a / "checkpoints")) == ["best.ckpt", "epoch_0003.ckpt", "last.ckpt"]
    accept(a, resume=str(a / "checkpoints" / "epoch_0003.ckpt"))  # its own: as auto
    fresh = tmp_path / "C"
    fresh.mkdir()
    accept(fresh, resume=other)  # another run's checkpoint into an unused folder: fine


def test_a_run_killed_before_its_first_checkpoint_blocks_nothing(tmp_path):
    """Issue: killed before the first last.ckpt, neither resume nor a fresh run could start
    (only overwrite, which also deleted intact files)."""
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    (run / "checkpoints" / "epoch_0001.partial.tmp").write_bytes(b"half a file")
    (run / "train.log").write_text("the dead run's log")
    (run / "tensorboard").mkdir()
    with pytest.raises(ValueError, match="nothing to resume.*a fresh run may start"):
        accept(run, resume="auto")
    accept(run)  # a fresh run: allowed, and the leftovers cleared
    assert sorted(p.name for p in run.iterdir()) == ["train.log"]


def test_a_kill_between_the_epoch_file_and_last_ckpt_resumes(tmp_path):
    run = a_run(tmp_path / "run", "epoch_0001.ckpt", results=False)
    accept(run, resume="auto")  # an epoch file and no last.ckpt: resumable
    with pytest.raises(ValueError, match="already holds a run"):
        accept(run)


def test_resume_auto_without_a_folder_takes_the_latest_resumable_run(tmp_path):
    root = tmp_path / "runs"
    older = a_run(root / "train" / "exp", "last.ckpt")
    newer = root / "train" / "exp2"
    (newer / "checkpoints").mkdir(parents=True)  # killed before its first checkpoint
    os.utime(older, (1, 1))
    cfg = SimpleNamespace(
        train=SimpleNamespace(resume="auto"),
        run=SimpleNamespace(dir=None, name=None, root=str(root)),
    )
    locate_resumed_run(cfg)
    assert cfg.run.dir == str(older)
    cfg.run.dir, cfg.run.root = None, str(tmp_path / "empty")
    with pytest.raises(ValueError, match="no run with a checkpoint under"):
        locate_resumed_run(cfg)


def test_a_run_folder_that_cannot_be_written_is_refused_before_anything_runs():
    # /sys refuses new files even to root, whose permission bits say it may write
    if not os.path.isdir("/sys"):
        pytest.skip("no /sys here")
    run_cfg = SimpleNamespace(dir="/sys", name=None, root="runs")
    with pytest.raises(ConfigError, match="run folder /sys is not writable"):
        claim_run_folder(run_cfg, "train")


def test_resume_of_a_run_that_never_existed_says_so_and_how_to_start_it(tmp_path):
    """Issue 65: train.resume=auto into a folder no run ever wrote described a run that
    "stopped before its first epoch ended"."""
    folder = tmp_path / "runs" / "train" / "nano"
    cfg = SimpleNamespace(train=SimpleNamespace(resume="auto", overwrite=False))
    argv = ["run.name=nano", "data=my/set", "train.resume=auto"]
    claimed = SimpleNamespace(path=str(folder), lock=object(), created=True)
    folder.mkdir(parents=True)  # as claim_run_folder made it
    with pytest.raises(ValueError) as err:
        accept_train_folder(SimpleNamespace(cfg=cfg, dir=str(folder), folder=claimed, argv=argv))
    assert str(err.value) == (
        f"train.resume=auto: no run to continue in {folder} (the folder was created now): "
        "start one there with: msdet train run.name=nano data=my/set"
    )


def test_the_resume_command_repeats_the_runs_settings_in_its_folder():
    from msdet.engine.training.run_folder import fresh_command, resume_command

    argv = ["model=yolox_s", "run.name=a", "train.epochs=30", "train.overwrite=true"]
    assert resume_command(argv, "/r/runs/train/a") == (
        "msdet train model=yolox_s train.epochs=30 run.dir=/r/runs/train/a train.resume=auto"
    )
    assert fresh_command(["+train.resume=auto", "run.dir=/x"]) == "msdet train run.dir=/x"
