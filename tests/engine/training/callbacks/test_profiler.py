"""The profiler callback's window and the summary of a profile's busiest operators (the
profiler itself runs in tests/engine/training/test_debugging.py, slow)."""

from __future__ import annotations

import logging

from msdet.engine.training.callbacks.profiler import ProfilerCallback, top_operators
from tests.support.training import RunContext


def test_top_operators_sums_each_type_over_the_cpu_statistics(tmp_path):
    folder = tmp_path / "host_1_2_ascend_ms" / "ASCEND_PROFILER_OUTPUT"
    folder.mkdir(parents=True)
    (folder / "cpu_op_type_info_0.csv").write_text(
        "op_type,total_compute_time\nConv2D,30.0\nMatMul,10.0\nConv2D,10.0\n"
    )
    table = top_operators(str(tmp_path)).splitlines()
    assert table[0] == f"Top operators by time ({folder / 'cpu_op_type_info_0.csv'}):"
    assert table[2].split() == ["Conv2D", "40.0", "80.0%"]
    assert table[3].split() == ["MatMul", "10.0", "20.0%"]
    assert len(table) == 4


def test_top_operators_reads_ascend_microseconds_and_keeps_the_top_n(tmp_path):
    (tmp_path / "op_statistic_0.csv").write_text(
        '"OP Type","Total Time(us)"\nTopK,1500\nAdd,500\nMul,250\n'
    )
    table = top_operators(str(tmp_path), top=2).splitlines()
    assert [line.split()[:2] for line in table[2:]] == [["TopK", "1.5"], ["Add", "0.5"]]


def test_a_folder_without_statistics_says_so(tmp_path):
    assert top_operators(str(tmp_path)) == f"no operator statistics found under {tmp_path}"


def test_profiling_waits_for_the_step_after_the_compile_and_warns_when_never_reached(caplog):
    callback = ProfilerCallback("unused", steps=2, start=1)
    assert callback.start == 2  # step 1 compiles the graph: never profiled
    callback.on_train_step_begin(RunContext(cur_step_num=1))
    callback.on_train_step_end(RunContext(cur_step_num=1))
    assert callback.profiler is None and not callback.done
    with caplog.at_level(logging.WARNING, logger="train"):
        callback.on_train_end(RunContext())
    assert [r.getMessage() for r in caplog.records] == [
        "runtime.profile_steps: the run ended before step 2; nothing was profiled"
    ]
