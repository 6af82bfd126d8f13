"""engine.training.trainer: the data's class count, what checkpoints record, and the notes of
the run's header."""

from __future__ import annotations

import pytest


def test_checkpoints_describe_the_size_they_are_evaluated_at():
    """A checkpoint's described input size is eval.img_size, the size its mAP was measured
    at and that predict.py and eval.py then run it at, not the training size."""
    from types import SimpleNamespace

    from msdet.common.config import load_config
    from msdet.engine.training.trainer import checkpoint_meta
    from msdet.models.description import DESCRIPTION_KEY, read_description

    cfg = load_config("train", ["train.img_scale=0.7", "eval.img_size=[288,352]"])
    source = SimpleNamespace(num_classes=3, class_names=["a", "b", "c"], category_ids=[1, 2, 3])
    meta = checkpoint_meta(cfg, source, "none")
    description = read_description({DESCRIPTION_KEY: meta[DESCRIPTION_KEY]})
    assert description.input_size == [288, 352]
    assert description.config["train"]["img_scale"] == 0.7
    assert description.config["train"]["input_size"] == [224, 224]  # what it trained at


def _plan(interval: int):
    """A 40-epoch plan of 8 steps an epoch, evaluated every ``interval`` epochs."""
    from msdet.common.config import load_config
    from msdet.engine.runtime.process import Runtime
    from msdet.engine.training.plan import DataSummary, plan_run

    cfg = load_config("train", ["train.epochs=40", f"train.eval_interval={interval}",
                                "train.no_aug_epochs=0", "train.batch_size=8"])  # fmt: skip
    cpu = Runtime(device="CPU", mode="graph", amp_level="O0", sink=False, sink_size=-1)
    return cfg, cpu, plan_run(cfg, cpu, DataSummary("shapes", 64, 8, ("a",)), environ={})


@pytest.mark.parametrize(
    "start_epoch,interval,note",
    [
        # 8 steps an epoch: steps 8..96 are epochs 1..12, epoch 13 ends at step 104
        (0, 1, "the evaluations of epochs 1 to 12 score a network"),
        (0, 5, "the evaluations of epochs 5, 10 score a network"),
        (10, 1, "the evaluations of epochs 11, 12 score a network"),
        (0, 13, None),  # the first evaluation is after step 99
        (12, 1, None),  # resumed past it
    ],
)
def test_early_evaluations_from_scratch_are_named(start_epoch, interval, note, caplog):
    """A run from scratch says which evaluations come before BatchNorm's running
    statistics settle (what made a short run's val loss ~1000 and mAP 0 with a training
    loss falling as usual)."""
    import logging

    from msdet.engine.training.trainer import _note_early_evaluations

    _, _, plan = _plan(interval)
    assert plan.schedule.steps_per_epoch == 8
    with caplog.at_level(logging.INFO, logger="train"):
        _note_early_evaluations(plan, start_epoch)
    lines = [r.getMessage() for r in caplog.records]
    if note is None:
        assert lines == []
    else:
        assert len(lines) == 1 and note in lines[0], lines
        assert "over 5% of their initial values for 98 training batches" in lines[0]


def test_the_header_notes_early_evaluations_from_scratch_only(caplog):
    """From pretrained weights the statistics are the pretrained network's: no note."""
    import logging

    from msdet.engine.training.fine_tuning import Start
    from msdet.engine.training.trainer import log_header

    cfg, cpu, plan = _plan(1)
    with caplog.at_level(logging.INFO, logger="train"):
        log_header(cfg, plan, cpu, Start(None, "from scratch"), 0)
        scratch = caplog.text
        caplog.clear()
        log_header(cfg, plan, cpu, Start("pretrained.ckpt", "the weights of pretrained.ckpt"), 0)
    assert "BatchNorm's running statistics" in scratch and "start: from scratch" in scratch
    assert "BatchNorm's running statistics" not in caplog.text
    assert "start: the weights of pretrained.ckpt" in caplog.text
    assert "graphs to compile: 1 training" in caplog.text


def test_the_header_says_which_recipe_which_start_and_why(tmp_path, caplog):
    """Issue 65: the header named the start only; the recipe and why it was chosen were
    nowhere."""
    import logging

    from msdet.common.config import load_config
    from msdet.engine.runtime.process import Runtime
    from msdet.engine.training.fine_tuning import Start
    from msdet.engine.training.plan import DataSummary, plan_run
    from msdet.engine.training.trainer import log_header

    cfg = load_config("train", [f"data={tmp_path}", "train.epochs=2", "train.batch_size=8"])
    cpu = Runtime(device="CPU", mode="graph", amp_level="O0", sink=False, sink_size=-1)
    plan = plan_run(cfg, cpu, DataSummary("mine", 64, 8, ("a",)), environ={})
    weights = "the original's official COCO weights of yolox_nano (nano.pth), from the cache"
    with caplog.at_level(logging.INFO, logger="train"):
        log_header(cfg, plan, cpu, Start("nano.pth", weights), 0)
    assert f"recipe: yolox (own data: data={tmp_path}), start: {weights}" in caplog.text
