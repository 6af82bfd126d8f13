"""StepStats: the epoch's means from the training step's in-graph statistics, skipped steps
left out, a non-finite loss and a run of overflows stopping the run (slow: each test
compiles the statistics cell)."""

from __future__ import annotations

import numpy as np
import pytest
from mindspore import Tensor, nn

from msdet.engine.training.callbacks.monitoring import StepStats
from msdet.engine.training.step_stats import StepStatistics
from tests.support.training import RunContext, record_step, step_outputs, train_state


@pytest.mark.slow
def test_step_stats_averages_and_skips_overflowed_steps():
    st = train_state()
    recorded = StepStatistics()
    stats = StepStats(st, recorded, nn.Dense(2, 2), check_finite=True, dynamic_scale=True)
    stats.begin_epoch(1, RunContext())
    for step, (total, overflow) in enumerate([(4.0, 0), (1e9, 1), (2.0, 0)], start=1):
        record_step(recorded, total, skip=overflow)
        stats.on_train_step_end(RunContext(cur_step_num=step, net_outputs=step_outputs()))
    assert st.steps == 3 and st.overflow_steps == 1
    assert st.means()["total"] == pytest.approx(3.0)
    assert st.means()["num_fg"] == pytest.approx(10.0)


@pytest.mark.slow
def test_step_stats_stops_on_a_non_finite_loss_naming_term_and_parameter():
    st = train_state()
    net = nn.Dense(2, 2)
    net.bias.set_data(Tensor(np.array([0.0, np.nan], np.float32)))
    recorded = StepStatistics()
    stats = StepStats(st, recorded, net, check_finite=True, dynamic_scale=False)
    stats.begin_epoch(2, RunContext())
    record_step(recorded, float("nan"), obj=float("inf"), skip=1)
    ctx = RunContext(cur_step_num=7, net_outputs=step_outputs())
    stats.on_train_step_end(ctx)
    assert ctx.stopped
    assert "epoch 2, step 3" in st.failure  # step 7 of 4-step epochs
    assert "total=nan" in st.failure and "obj=inf" in st.failure
    assert net.bias.name in st.failure
    assert st.means()["total"] == 0.0  # the bad step is not averaged in


@pytest.mark.slow
def test_step_stats_names_the_first_skipped_step_of_a_sink():
    st = train_state(steps=8)
    recorded = StepStatistics()
    stats = StepStats(st, recorded, nn.Dense(2, 2), check_finite=True, dynamic_scale=False)
    stats.begin_epoch(1, RunContext())
    for total, skip in [(1.0, 0), (float("inf"), 1), (float("nan"), 1), (1.0, 0)]:
        record_step(recorded, total, skip=skip)
    stats.on_train_step_end(RunContext(cur_step_num=4, net_outputs=step_outputs()))  # one sink
    assert "non-finite loss at epoch 1, step 2: total=inf;" in st.failure


@pytest.mark.slow
def test_step_stats_stops_after_too_many_overflows_in_a_row_across_sinks():
    st = train_state(steps=100)
    recorded = StepStatistics()
    stats = StepStats(
        st, recorded, nn.Dense(2, 2), check_finite=True, dynamic_scale=True, max_overflows=4
    )
    stats.begin_epoch(1, RunContext())
    stopped = []
    # Sinks of 3 steps: skips 2-3, then 4-5 in the next sink (a run of 4 over two sinks).
    for sink, skips in enumerate([(0, 1, 1), (1, 1, 0), (1, 1, 1)], start=1):
        for skip in skips:
            record_step(recorded, 1.0, skip=skip)
        ctx = RunContext(cur_step_num=3 * sink, net_outputs=step_outputs())
        stats.on_train_step_end(ctx)
        stopped.append(ctx.stopped)
    assert stopped == [False, True, False]  # a good step ends a run
    assert st.failure.startswith("4 overflowed steps in a row")
    assert st.overflow_steps == 7 and st.steps == 9
