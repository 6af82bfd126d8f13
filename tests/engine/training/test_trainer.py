"""engine.trainer: how a run's steps are grouped into sinks and epochs."""

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

    cpu = Runtime(device="CPU", mode="graph", amp_level="O0", sink=True, sink_size=-1)
    assert _target_buckets(config([]), cpu) == ()
    assert _target_buckets(config([32, 64], ms_range=5), cpu) == (32, 64, 120)  # 33 graphs
    with pytest.raises(ValueError, match="train.multiscale_range.*data.target_buckets"):
        _target_buckets(config([8, 16, 32, 48, 64, 96], ms_range=5), cpu)  # 77 graphs
    ascend = Runtime(device="Ascend", mode="graph", amp_level="O2", sink=True, sink_size=-1)
    with pytest.raises(
        ValueError, match=r"data.target_buckets=\[32, 64\] needs runtime.sink=false"
    ):
        _target_buckets(config([32, 64]), ascend)
    eight = Runtime(
        device="Ascend", mode="graph", amp_level="O2", sink=False, sink_size=-1, world_size=8
    )
    assert _target_buckets(config([32, 64]), eight) == (32, 64, 120)
    assert _compile_all_first(eight, (32, 64, 120)) and not _compile_all_first(eight, ())
    assert not _compile_all_first(cpu, (32, 64, 120))
