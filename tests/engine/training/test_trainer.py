"""engine.training.trainer: how a run's steps are grouped into sinks and epochs."""

from __future__ import annotations

import pytest


def test_sink_plan_profiles_with_one_step_per_sink():
    """With real sinking the step callbacks run once per sink: the profiler, which counts
    steps, gets one step per sink; otherwise sinks follow runtime.sink_size."""
    from msdet.engine.runtime.process import Runtime
    from msdet.engine.training.schedule import sink_plan

    ascend = Runtime(device="Ascend", mode="graph", amp_level="O2", sink=True, sink_size=-1)
    assert sink_plan(ascend, 100) == (100, 1)
    assert sink_plan(ascend, 100, profiling=True) == (1, 100)
    assert sink_plan(Runtime("Ascend", "graph", "O2", True, 25), 100) == (25, 4)
    cpu = Runtime(device="CPU", mode="graph", amp_level="O0", sink=True, sink_size=-1)
    assert sink_plan(cpu, 100, profiling=True) == (100, 1)  # no real sink on CPU
    with pytest.raises(ValueError, match="runtime.sink_size=30 must be -1 or divide"):
        sink_plan(Runtime("Ascend", "graph", "O2", True, 30), 100)


def test_a_class_count_unlike_the_datasets_is_an_error_naming_both():
    from types import SimpleNamespace

    from omegaconf import OmegaConf

    from msdet.engine.training.trainer import check_class_count

    source = SimpleNamespace(num_classes=3, ann_file="annotations/instances_train.json")
    assert check_class_count(OmegaConf.create({"num_classes": None}), source) == 3
    assert check_class_count(OmegaConf.create({"num_classes": 3}), source) == 3
    with pytest.raises(ValueError, match=r"model.num_classes=80 but the dataset .* has 3 classes"):
        check_class_count(OmegaConf.create({"num_classes": 80}), source)


def test_target_buckets_are_checked_against_the_run():
    """data.target_buckets: off by default, refused with real data sinking (one shape per
    sink), bounded with multi-scale, compiled first where ranks could wait on each other."""
    from omegaconf import OmegaConf

    from msdet.engine.runtime.process import Runtime
    from msdet.engine.training.trainer import _compile_all_first, _target_buckets

    def config(buckets, ms_range=0):
        return OmegaConf.create(
            {
                "data": {"max_objects": 120, "target_buckets": buckets, "img_size": [640, 640],
                         "layout": "bgr255"},
                "train": {"multiscale_range": ms_range, "multiscale_interval": 10},
            }
        )  # fmt: skip

    size = (640, 640)  # the training size
    cpu = Runtime(device="CPU", mode="graph", amp_level="O0", sink=True, sink_size=-1)
    assert _target_buckets(config([]), cpu, size) == ()
    assert _target_buckets(config([32, 64], ms_range=5), cpu, size) == (32, 64, 120)  # 33 graphs
    with pytest.raises(ValueError, match="train.multiscale_range.*data.target_buckets"):
        _target_buckets(config([8, 16, 32, 48, 64, 96], ms_range=5), cpu, size)  # 77 graphs
    ascend = Runtime(device="Ascend", mode="graph", amp_level="O2", sink=True, sink_size=-1)
    with pytest.raises(
        ValueError, match=r"data.target_buckets=\[32, 64\] needs runtime.sink=false"
    ):
        _target_buckets(config([32, 64]), ascend, size)
    eight = Runtime(
        device="Ascend", mode="graph", amp_level="O2", sink=False, sink_size=-1, world_size=8
    )
    assert _target_buckets(config([32, 64]), eight, size) == (32, 64, 120)
    assert _compile_all_first(eight, (32, 64, 120)) and not _compile_all_first(eight, ())
    assert not _compile_all_first(cpu, (32, 64, 120))


@pytest.mark.parametrize(
    "overrides,header",
    [
        ([], "training yolox_nano at 256x256 (evaluated at 320x320): "),
        (["train=parity"], "training yolox_nano at 320x320: "),
        (["data.img_size=416"], "training yolox_nano at 320x320 (evaluated at 416x416): "),
        (["eval.img_size=[288,352]"], "training yolox_nano at 256x256 (evaluated at 288x352): "),
    ],
)
def test_the_run_header_shows_the_resolved_sizes(overrides, header, caplog):
    """The header reads the sizes load_config resolved: train.input_size, eval.img_size."""
    import logging

    from msdet.common.config import load_config
    from msdet.engine.runtime.process import Runtime
    from msdet.engine.training.fine_tuning import Start
    from msdet.engine.training.schedule import Schedule
    from msdet.engine.training.trainer import _log_plan

    cfg = load_config("train", overrides)
    cpu = Runtime(device="CPU", mode="graph", amp_level="O0", sink=False, sink_size=-1)
    with caplog.at_level(logging.INFO, logger="train"):
        _log_plan(cfg, cpu, Schedule.from_config(cfg.train, 1, 64), Start(None, "from scratch"))
    assert caplog.records[0].getMessage().startswith(header)
    assert caplog.records[1].getMessage() == "start: from scratch"


def test_checkpoints_describe_the_size_they_are_evaluated_at():
    """A checkpoint's described input size is eval.img_size, the size its mAP was measured
    at and that predict.py and eval.py then run it at, not the training size."""
    from types import SimpleNamespace

    from msdet.common.config import load_config
    from msdet.engine.training.trainer import _checkpoint_meta
    from msdet.models.description import DESCRIPTION_KEY, read_description

    cfg = load_config("train", ["train.img_scale=0.7", "eval.img_size=[288,352]"])
    source = SimpleNamespace(num_classes=3, class_names=["a", "b", "c"], category_ids=[1, 2, 3])
    meta = _checkpoint_meta(cfg, source, "none")
    description = read_description({DESCRIPTION_KEY: meta[DESCRIPTION_KEY]})
    assert description.input_size == [288, 352]
    assert description.config["train"]["img_scale"] == 0.7
    assert description.config["train"]["input_size"] == [224, 224]  # what it trained at


def test_the_epoch_line_is_printed_once_the_epochs_checkpoint_is_on_disk(tmp_path, caplog):
    """Issue: the epoch's loss/mAP line came before its checkpoint was written: a user who
    stopped the run on seeing it lost the epoch. The run's own callbacks, in the order
    training runs them: the line follows the checkpoint (and results.csv)."""
    import logging
    import os
    from types import SimpleNamespace

    import numpy as np
    from mindspore import Parameter, Tensor, nn

    from msdet.common.config import load_config
    from msdet.engine.runtime.process import Runtime
    from msdet.engine.training.callbacks.base import TrainState
    from msdet.engine.training.trainer import _build_callbacks

    class Weights(nn.Cell):
        def __init__(self):
            super().__init__()
            self.w = Parameter(Tensor(np.ones(4, np.float32)), name="w")

    cfg = load_config("train", ["train.tensorboard=false"])
    rt = Runtime("CPU", "pynative", "O0", sink=False, sink_size=-1, run_dir=str(tmp_path))
    state = TrainState(epochs=2, steps_per_epoch=1, total_batch=8)
    metrics = {"mAP": 0.25, "mAP50": 0.5}
    cbs = _build_callbacks(
        cfg,
        rt,
        state,
        train_step=SimpleNamespace(net_with_loss=None, stats=None),
        net=None,
        loss=None,
        train_src=SimpleNamespace(unreadable=None),
        evaluation=SimpleNamespace(evaluate=lambda epoch: metrics, tensorboard_images=None),
        steps_per_sink=1,
        meta={},
    )
    checkpoint = next(cb for cb in cbs if type(cb).__name__ == "CheckpointCallback")
    checkpoint.train_cell = Weights()
    seen = []  # what was on disk when each epoch-end line was logged
    caplog.set_level(logging.INFO, logger="train")
    handler = logging.Handler()
    handler.emit = lambda record: seen.append(
        (record.getMessage(), sorted(os.listdir(tmp_path / "checkpoints")))
    )
    logging.getLogger("train").addHandler(handler)
    try:
        state.reset_epoch(1)
        state.sums.update(total=6.0, num_fg=20.0)
        state.steps = 1
        ctx = SimpleNamespace(original_args=lambda: SimpleNamespace(cur_epoch_num=1))
        for cb in cbs:  # the epoch-end work of the callbacks that need no network
            if type(cb).__module__.endswith((".console", ".records", ".evaluation")):
                cb.on_train_epoch_end(ctx)
    finally:
        logging.getLogger("train").removeHandler(handler)
    line = [(msg, files) for msg, files in seen if msg.startswith("epoch 1/2  loss 6.000")]
    assert len(line) == 1, seen
    assert line[0][1] == ["best.ckpt", "epoch_0001.ckpt", "last.ckpt"]
    assert line[0][0].endswith("mAP 0.250 mAP50 0.500")
    assert (tmp_path / "results.csv").is_file()


@pytest.mark.parametrize(
    "start,start_epoch,interval,note",
    [
        # 8 steps an epoch: steps 8..96 are epochs 1..12, epoch 13 ends at step 104
        (None, 0, 1, "the evaluations of epochs 1 to 12 score a network"),
        (None, 0, 5, "the evaluations of epochs 5, 10 score a network"),
        (None, 10, 1, "the evaluations of epochs 11, 12 score a network"),
        (None, 0, 13, None),  # the first evaluation is after step 99
        (None, 12, 1, None),  # resumed past it
        ("pretrained.ckpt", 0, 1, None),  # the statistics are the pretrained network's
    ],
)
def test_early_evaluations_from_scratch_are_named(start, start_epoch, interval, note, caplog):
    """A run from scratch says which evaluations come before BatchNorm's running
    statistics settle (what made a short run's val loss ~1000 and mAP 0 with a training
    loss falling as usual)."""
    import logging

    from msdet.engine.training.callbacks.base import TrainState
    from msdet.engine.training.callbacks.evaluation import EvalCallback
    from msdet.engine.training.fine_tuning import Start
    from msdet.engine.training.schedule import Schedule
    from msdet.engine.training.trainer import _note_early_evaluations

    plan = Schedule(batch=8, ranks=1, accumulate=1, batches_per_epoch=8, steps_per_epoch=8,
                    epochs=40, base_lr=0.01, lrs=None)  # fmt: skip
    evals = EvalCallback(
        TrainState(epochs=40, steps_per_epoch=8, total_batch=8), lambda e: {}, interval, 0
    )
    with caplog.at_level(logging.INFO, logger="train"):
        _note_early_evaluations([evals], plan, Start(start, "-"), start_epoch)
    lines = [r.getMessage() for r in caplog.records]
    if note is None:
        assert lines == []
    else:
        assert len(lines) == 1 and note in lines[0], lines
        assert "over 5% of their initial values for 98 training batches" in lines[0]
