"""The graphs a training run compiles, counted per kind, and their cost at jit level O2."""

from __future__ import annotations

from msdet.engine.training.graphs import GE_TRAIN_GRAPH_SECONDS, compile_budget, describe_budget
from msdet.engine.training.schedule import all_sizes


def test_yolox_defaults_on_the_910a_compile_eleven_training_graphs_through_ge():
    sizes = len(all_sizes((640, 640), 5))  # train.multiscale_range 5 at 640: 480..800
    budget = compile_budget(sizes, 0, device_nms=False, backend="GE graph sink")
    assert (budget["train"], budget["eval"], budget["nms_check"], budget["total"]) == (11, 2, 0, 13)
    assert budget["train_seconds"] == (
        11 * GE_TRAIN_GRAPH_SECONDS[0],
        11 * GE_TRAIN_GRAPH_SECONDS[1],
    )
    line = describe_budget(budget)
    assert "11 training" in line and "31-63 min over the run" in line


def test_kernel_by_kernel_with_device_nms_and_buckets():
    budget = compile_budget(1, 3, device_nms=True, backend="kernel by kernel")
    assert (budget["train"], budget["nms_check"], budget["total"]) == (3, 2, 7)
    assert budget["train_seconds"] is None
    assert "2 for the NMS check" in describe_budget(budget) and "min" not in describe_budget(budget)
