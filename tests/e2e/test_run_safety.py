"""The fault suite: what a run gets when it is resumed wrongly, killed at a write, out of disk
space or pointed at data it cannot read (docs/run-safety.md lists every fault and its
outcome). Each case starts from one finished tiny run, copied, so only the cases that must
train do."""

from __future__ import annotations

import json
import os
import resource
import shutil
import signal

import pytest

from tests.support.tiny_run import read_results, run_entry

pytestmark = pytest.mark.slow

# One epoch at a near-zero LR: the model keeps its prior scores (~1e-4), so a confidence
# threshold under them gives detections to compare (its mAP is about 0).
QUIET = [
    "train.tensorboard=false",
    "train.epochs=1",
    "train.warmup_epochs=0",
    "train.no_aug_epochs=0",
    "eval.conf_thresh=0.00001",
]


@pytest.fixture(scope="module")
def finished(tmp_path_factory, cache_dir):
    """One run of one epoch, trained to the end (metrics.json written)."""
    run_dir = tmp_path_factory.mktemp("finished") / "run"
    out = run_entry("train.py", run_dir, cache_dir, *QUIET)
    assert out.returncode == 0, out.stderr[-3000:]
    return run_dir


def copy_of(finished, tmp_path):
    run_dir = tmp_path / "run"
    shutil.copytree(finished, run_dir)
    return run_dir


def output(out) -> str:
    return out.stdout + out.stderr


def test_a_finished_run_resumed_says_it_is_finished(finished, tmp_path, cache_dir):
    run_dir = copy_of(finished, tmp_path)
    before = (run_dir / "metrics.json").read_text()
    out = run_entry("train.py", run_dir, cache_dir, *QUIET, "train.resume=auto")
    assert out.returncode == 0, output(out)[-3000:]
    assert "this run is finished: all 1 epochs trained" in output(out)
    assert (run_dir / "metrics.json").read_text() == before
    assert [r["epoch"] for r in read_results(run_dir)] == [1]


def test_a_run_killed_in_its_final_evaluation_completes_it_on_resume(finished, tmp_path, cache_dir):
    run_dir = copy_of(finished, tmp_path)
    want = json.loads((run_dir / "metrics.json").read_text())
    detections = json.loads((run_dir / "detections.json").read_text())
    for name in ("metrics.json", "detections.json"):
        os.remove(run_dir / name)
    out = run_entry("train.py", run_dir, cache_dir, *QUIET, "train.resume=auto")
    assert out.returncode == 0, output(out)[-3000:]
    assert "the final evaluation is missing: evaluating now" in output(out)
    # The same evaluation of the same best.ckpt: the same detections (a one-epoch model
    # scores near 0 mAP, but it detects), the same figures.
    got = json.loads((run_dir / "metrics.json").read_text())
    assert len(detections) > 0 and got["detections"] == len(detections)
    assert json.loads((run_dir / "detections.json").read_text()) == detections
    assert got["mAP"] == pytest.approx(want["mAP"], abs=1e-9)


def record_of(run_dir) -> dict[str, str]:
    """The run's config record: what a refused command must leave as it was."""
    return {n: (run_dir / n).read_text() for n in ("config.yaml", "overrides.txt")}


def test_resume_with_other_classes_or_size_is_refused_naming_both(finished, tmp_path, cache_dir):
    run_dir = copy_of(finished, tmp_path)
    listing = sorted(os.listdir(run_dir / "checkpoints"))
    record = record_of(run_dir)
    out = run_entry(
        "train.py", run_dir, cache_dir, *QUIET, "train.resume=auto", "data=shapes_stars"
    )
    assert out.returncode == 1, output(out)[-3000:]
    assert (
        "classes: checkpoint ['disc', 'rectangle', 'triangle'], dataset shapes ['star', 'cross', "
        "'ring']" in output(out)
    )
    out = run_entry(
        "train.py", run_dir, cache_dir, *QUIET, "train.resume=auto", "data.img_size=[160,160]"
    )
    assert out.returncode == 1
    assert (
        "train.input_size (data.img_size x train.img_scale): checkpoint [128, 128], config "
        "[160, 160]" in output(out)
    )
    assert sorted(os.listdir(run_dir / "checkpoints")) == listing
    assert record_of(run_dir) == record  # the refused commands' settings are not the run's


def test_resume_with_more_epochs_and_another_lr_logs_the_changes_and_fewer_is_refused(
    finished, tmp_path, cache_dir
):
    """YOLOX users extend a finished run by resuming with a larger train.epochs (it used to
    stop on the LR Parameter's shape). The schedule is the new config's (its epochs and its
    rate), evaluated from the step reached: epoch 2 ends at the new schedule's LR."""
    from msdet.common.config import load_config
    from msdet.engine.training.schedule import scaled_lr, yolox_lr_schedule

    run_dir = copy_of(finished, tmp_path)
    out = run_entry(
        "train.py", run_dir, cache_dir, *QUIET, "train.resume=auto", "train.epochs=3",
        "train.lr_per_img=0.002",
    )  # fmt: skip
    assert out.returncode == 0, output(out)[-3000:]
    log = (run_dir / "train.log").read_text()
    assert "resume: train.epochs changed from 1 to 3" in log
    assert "resume: train.lr_per_img changed from" in log and "to 0.002" in log
    rows = read_results(run_dir)
    assert [r["epoch"] for r in rows] == [1, 2, 3]
    assert "epochs: 3" in (run_dir / "config.yaml").read_text()
    steps = 24 // 4  # the tiny set: 24 images, batch 4
    min_lr_ratio = float(load_config("train").train.min_lr_ratio)
    new = yolox_lr_schedule(scaled_lr(0.002, 4), steps, 3, 0, 0, min_lr_ratio=min_lr_ratio)
    assert rows[1]["lr"] == pytest.approx(float(new[2 * steps - 1]), rel=1e-6)
    assert rows[2]["lr"] == pytest.approx(float(new[-1]), rel=1e-6)
    assert "after epoch 1 of 3 (best mAP" in log and f"at step {steps} with lr" in log
    # Issue: train.epochs=1 on this 3-epoch run said "all 1 epochs trained" and rewrote
    # the record.
    record = record_of(run_dir)
    out = run_entry("train.py", run_dir, cache_dir, *QUIET, "train.resume=auto")
    assert out.returncode == 1, output(out)[-3000:]
    assert "has trained 3 epochs already, more than train.epochs=1 asks for" in output(out)
    assert "all 1 epochs trained" not in output(out)
    assert record_of(run_dir) == record
    assert [r["epoch"] for r in read_results(run_dir)] == [1, 2, 3]


def test_a_kill_before_last_ckpt_resumes_from_the_epoch_file(finished, tmp_path, cache_dir):
    """Killed after epoch_0001.ckpt and before last.ckpt: nothing after them was written."""
    run_dir = copy_of(finished, tmp_path)
    for name in ("checkpoints/last.ckpt", "results.csv", "metrics.json"):
        os.remove(run_dir / name)
    out = run_entry("train.py", run_dir, cache_dir, *QUIET, "train.resume=auto", "train.epochs=2")
    assert out.returncode == 0, output(out)[-3000:]
    said = " ".join(output(out).split())  # the console wraps lines over 160 characters
    assert "epoch_0001.ckpt is there and checkpoints/last.ckpt is not" in said
    assert "after epoch 1 of 2" in (run_dir / "train.log").read_text()
    assert [r["epoch"] for r in read_results(run_dir)] == [2]


def test_resume_of_another_run_into_a_used_folder_leaves_it_untouched(
    finished, tmp_path, cache_dir
):
    a = copy_of(finished, tmp_path)
    b = tmp_path / "b"
    shutil.copytree(finished, b)
    before = {n: (a / "checkpoints" / n).read_bytes() for n in os.listdir(a / "checkpoints")}
    out = run_entry(
        "train.py", a, cache_dir, *QUIET, f"train.resume={b}/checkpoints/epoch_0001.ckpt"
    )
    assert out.returncode == 1 and "would continue another run over it" in output(out)
    assert {
        n: (a / "checkpoints" / n).read_bytes() for n in os.listdir(a / "checkpoints")
    } == before


def limit_file_size(limit: int):
    """A file-size limit: every write past ``limit`` bytes fails (EFBIG)."""

    def apply():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return apply


def test_a_file_size_limit_stops_the_run_cleanly_and_writes_nothing_after(tmp_path, cache_dir):
    """A checkpoint (about 11 MB for this model) cannot be written; the run's small files
    can. The run stops naming the limit (not as a full disk) and the space it needs,
    leaves no partial file, and records no epoch it has no checkpoint of."""
    run_dir = tmp_path / "full"
    out = run_entry("train.py", run_dir, cache_dir, *QUIET, preexec_fn=limit_file_size(4 * 2**20))
    assert out.returncode == 1, output(out)[-3000:]
    text = output(out)
    assert "could not write" in text and "a checkpoint needs about" in text
    assert "a file-size limit: this process may write files of at most 4 MiB" in text
    assert "MiB are free" not in text
    assert "Traceback" not in out.stderr.split("error:")[0]
    assert os.listdir(run_dir / "checkpoints") == []  # no partial file of any name
    assert not (run_dir / "results.csv").exists() and not (run_dir / "metrics.json").exists()


def test_a_wrong_image_folder_is_one_line_before_any_step(tmp_path, cache_dir):
    out = run_entry("train.py", tmp_path / "run", cache_dir, "data.train.img_dir=annotations")
    assert out.returncode == 1
    errors = [line for line in output(out).splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "check data.train.img_dir" in errors[0]
    assert "Traceback" not in output(out)
    assert not (tmp_path / "run").exists()  # a failed command leaves no folder
