"""engine.training.resume: the checkpoint a resume starts from, and whether it fits."""

from __future__ import annotations

import logging

import numpy as np
import pytest
from mindspore import Parameter, Tensor, nn
from omegaconf import OmegaConf

from msdet.common.config import load_config
from msdet.engine.training.checkpoint_files import LAST
from msdet.engine.training.checkpoints import META_EPOCH, CheckpointManager
from msdet.engine.training.resume import (
    ResumeMismatchError,
    ResumeSource,
    check_epochs_left,
    check_resume_fits,
    load_resume_source,
)
from msdet.models.description import DESCRIPTION_KEY, Description, describe
from msdet.models.weights import CheckpointError

SHAPES = ["disc", "rectangle", "triangle"]


class Weights(nn.Cell):
    def __init__(self, value: float):
        super().__init__()
        self.w = Parameter(Tensor(np.full(4, value, np.float32)), name="w")


def three_epochs(run_dir) -> None:
    manager = CheckpointManager(str(run_dir / "checkpoints"), keep_last=3)
    for epoch in (1, 2, 3):
        manager.save_epoch(Weights(float(epoch)), {META_EPOCH: epoch}, epoch, is_best=False)


def epoch_in(source: ResumeSource) -> int:
    return int(source.params[META_EPOCH].asnumpy())


def test_a_truncated_last_checkpoint_names_the_newest_intact_one(tmp_path):
    three_epochs(tmp_path)
    folder = tmp_path / "checkpoints"
    data = (folder / LAST).read_bytes()
    (folder / LAST).write_bytes(data[: len(data) // 2])
    (folder / "epoch_0003.ckpt").write_bytes(b"")  # damaged too
    with pytest.raises(
        CheckpointError, match=r"newest intact checkpoint beside it is .*epoch_0002\.ckpt"
    ):
        load_resume_source(str(folder / LAST), str(tmp_path))


def test_resume_auto_takes_the_newest_intact_checkpoint_and_says_so(tmp_path, caplog):
    three_epochs(tmp_path)
    folder = tmp_path / "checkpoints"
    assert epoch_in(load_resume_source("auto", str(tmp_path))) == 3
    data = (folder / LAST).read_bytes()
    (folder / LAST).write_bytes(data[: len(data) // 2])
    (folder / "epoch_0003.ckpt").write_bytes(data[:10])
    with caplog.at_level(logging.WARNING, logger="train"):
        source = load_resume_source("auto", str(tmp_path))
    assert source.path.endswith("epoch_0002.ckpt") and epoch_in(source) == 2
    assert "resuming from" in caplog.text and "last.ckpt" in caplog.text


def test_a_kill_before_last_ckpt_resumes_from_the_epoch_file_written_before_it(tmp_path):
    """Within an epoch the epoch file is written before last.ckpt: killed between them,
    the epoch file is the newest state."""
    three_epochs(tmp_path)
    folder = tmp_path / "checkpoints"
    (folder / "epoch_0003.ckpt").touch()  # written after last.ckpt's epoch 3 (mtime)
    (folder / LAST).unlink()
    source = load_resume_source("auto", str(tmp_path))
    assert source.path.endswith("epoch_0003.ckpt") and epoch_in(source) == 3


def test_nothing_to_resume_says_a_fresh_run_may_start(tmp_path):
    (tmp_path / "checkpoints").mkdir()
    with pytest.raises(CheckpointError, match="a fresh run may start there"):
        load_resume_source("auto", str(tmp_path))


def description_of(cfg, class_names=SHAPES) -> ResumeSource:
    """A ResumeSource whose description is what training with ``cfg`` writes."""
    description = describe(
        cfg.model,
        len(class_names),
        class_names,
        list(range(len(class_names))),
        list(cfg.data.img_size),
        "train",
        OmegaConf.to_container(cfg, resolve=True),
    )
    return ResumeSource("runs/train/exp/checkpoints/last.ckpt", {DESCRIPTION_KEY: ""}, description)


@pytest.mark.slow
def test_resume_refuses_another_model_naming_both_values():
    """Issue: resume=auto accepted other classes and another size without a word."""
    saved = description_of(load_config("train", ["data.img_size=[320,320]"]))
    stars = load_config("train", ["data=shapes_stars", "data.img_size=[320,320]"])
    with pytest.raises(ResumeMismatchError, match=r"classes: checkpoint \['disc'.*\['star'"):
        check_resume_fits(saved, stars, ["star", "cross", "ring"])
    bigger = load_config("train", ["data.img_size=[416,416]", "model=yolox_s"])
    with pytest.raises(ResumeMismatchError) as err:
        check_resume_fits(saved, bigger, SHAPES)
    text = str(err.value)
    assert "model: checkpoint yolox_nano, config yolox_s" in text
    assert (
        "train.input_size (data.img_size x train.img_scale): checkpoint [256, 256], config "
        "[320, 320]" in text
    )
    assert "train.pretrained=PATH" in text


@pytest.mark.slow
def test_resume_compares_the_training_size_not_the_evaluation_size(caplog):
    """What the weights were trained at decides: another data.img_size with the same
    training input resumes (logged), and a description without train.input_size has it
    resolved from its data.img_size and train.img_scale."""
    saved = description_of(load_config("train", []))  # 256 of 320
    same = load_config("train", ["data.img_size=288", "train.img_scale=0.9"])  # 259.2 -> 256
    with caplog.at_level(logging.INFO, logger="train"):
        changes = check_resume_fits(saved, same, SHAPES)
    assert ("data.img_size", [320, 320], [288, 288]) in changes
    assert "resume: data.img_size changed from [320, 320] to [288, 288]" in caplog.text
    del saved.description.config["train"]["input_size"]
    with pytest.raises(ResumeMismatchError, match=r"checkpoint \[256, 256\], config \[320, 320\]"):
        check_resume_fits(saved, load_config("train", ["train.img_scale=1"]), SHAPES)
    assert check_resume_fits(saved, same, SHAPES)  # the resolved 256 fits


@pytest.mark.slow
def test_resume_logs_what_may_change(caplog):
    saved = description_of(load_config("train", []))
    more = load_config("train", ["train.epochs=12", "train.lr_per_img=0.01", "train.resume=auto"])
    with caplog.at_level(logging.INFO, logger="train"):
        changes = check_resume_fits(saved, more, SHAPES)
    was = load_config("train", [])
    assert changes == [
        ("train.epochs", was.train.epochs, 12),
        ("train.lr_per_img", was.train.lr_per_img, 0.01),
    ]
    assert f"train.epochs changed from {was.train.epochs} to 12" in caplog.text


def test_a_run_of_more_epochs_than_asked_is_refused_saying_how_many_it_has(tmp_path):
    """Issue: train.resume=auto train.epochs=1 on a finished 2-epoch run said "all 1 epochs
    trained" and rewrote its config record."""
    three_epochs(tmp_path)
    source = load_resume_source("auto", str(tmp_path))
    check_epochs_left(source, 3)  # a finished run resumed as it was: fine
    check_epochs_left(source, 5)
    with pytest.raises(ValueError) as err:
        check_epochs_left(source, 2)
    text = str(err.value)
    assert "last.ckpt has trained 3 epochs already, more than train.epochs=2 asks for" in text
    assert "train.epochs=3 or more" in text
    described = ResumeSource(
        source.path, source.params, Description({}, [], [], config={"train": {"epochs": 4}})
    )
    with pytest.raises(ValueError, match=r"train.epochs=2 asks for \(its own schedule is 4\)"):
        check_epochs_left(described, 2)
