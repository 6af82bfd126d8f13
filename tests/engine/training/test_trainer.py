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


def test_the_training_size_is_the_datas_times_the_recipes_scale():
    """data.img_size x train.img_scale, each side rounded to a multiple of 32: the default
    recipe trains at 256 and evaluates at 320; a typed data.img_size moves both."""
    from msdet.common.config import ConfigError, load_config
    from msdet.data.config import scaled_size
    from msdet.engine.training.trainer import training_size

    default = load_config("train")
    assert training_size(default) == (256, 256)  # the shapes recipe's 0.8
    assert list(default.eval.img_size) == [320, 320]  # evaluated at the data's size
    assert training_size(load_config("train", ["train=yolox"])) == (320, 320)
    assert training_size(load_config("train", ["train=parity"])) == (320, 320)  # the original's
    assert training_size(load_config("train", ["train.img_scale=1"])) == (320, 320)
    bigger = load_config("train", ["data.img_size=[416,640]"])
    assert training_size(bigger) == (320, 512) and list(bigger.eval.img_size) == [416, 640]
    assert scaled_size((64, 128), 0.8) == (64, 96)  # 51.2 -> 64, 102.4 -> 96
    assert scaled_size((64, 64), 0.2) == (32, 32)  # never below one stride
    assert scaled_size((320, 320), 1.5) == (480, 480)
    with pytest.raises(ConfigError, match="train.img_scale"):
        load_config("train", ["train.img_scale=0"])


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
