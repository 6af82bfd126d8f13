"""The training callbacks, driven by a recorded run context instead of Model.train."""

from __future__ import annotations

import logging
import math
from types import SimpleNamespace

import numpy as np
import pytest
from mindspore import Tensor, mutable, nn

from msdet.engine.training import graphs
from msdet.engine.training.callbacks import base as cbs
from msdet.engine.training.callbacks.base import EpochCallback, TrainState
from msdet.engine.training.callbacks.compile import CompileTrainingGraph
from msdet.engine.training.callbacks.console import EpochLine, EpochSummary
from msdet.engine.training.callbacks.evaluation import EvalCallback
from msdet.engine.training.callbacks.monitoring import StepStats
from msdet.engine.training.callbacks.stopping import EarlyStopping, StopAtEpoch, TimeLimit
from msdet.engine.training.step_stats import StepStatistics


class RunContext:
    """What MindSpore hands a callback: the run's parameters and a stop request."""

    def __init__(self, **params):
        self.params = SimpleNamespace(**params)
        self.stopped = False

    def original_args(self):
        return self.params

    def request_stop(self):
        self.stopped = True


def outputs(lr=0.01, scale=1.0):
    """The training step's outputs, in engine.train_step.TrainStep's order (the callbacks
    read only the last step's lr and loss scale from them)."""
    return [Tensor(np.float32(v)) for v in (0, 0, 0, 0, 0, 0, lr, scale, 0)]


def record(stats: StepStatistics, total, iou=1.0, obj=1.0, cls=1.0, l1=0.0, fg=10.0, skip=0):
    """One training step as the training graph records it."""
    losses = tuple(Tensor(np.float32(v)) for v in (total, iou, obj, cls, l1, fg))
    stats(mutable(losses), mutable(Tensor(bool(skip))))  # variables: no recompile per call


def state(epochs=5, steps=4, **kw) -> TrainState:
    return TrainState(epochs=epochs, steps_per_epoch=steps, total_batch=8, **kw)


def test_sinks_become_epochs():
    class Recorder(EpochCallback):
        def __init__(self, st):
            super().__init__(st)
            self.calls = []

        def begin_epoch(self, epoch, run_context):
            self.calls.append(("begin", epoch))

        def end_epoch(self, epoch, run_context):
            self.calls.append(("end", epoch))

    rec = Recorder(state(epochs=2, sinks_per_epoch=3))
    for sink in range(1, 7):  # 2 epochs of 3 sinks each
        ctx = RunContext(cur_epoch_num=sink)
        rec.on_train_epoch_begin(ctx)
        rec.on_train_epoch_end(ctx)
    assert rec.calls == [("begin", 1), ("end", 1), ("begin", 2), ("end", 2)]


@pytest.mark.slow
def test_step_stats_averages_and_skips_overflowed_steps():
    st = state()
    recorded = StepStatistics()
    stats = StepStats(st, recorded, nn.Dense(2, 2), check_finite=True, dynamic_scale=True)
    stats.begin_epoch(1, RunContext())
    for step, (total, overflow) in enumerate([(4.0, 0), (1e9, 1), (2.0, 0)], start=1):
        record(recorded, total, skip=overflow)
        stats.on_train_step_end(RunContext(cur_step_num=step, net_outputs=outputs()))
    assert st.steps == 3 and st.overflow_steps == 1
    assert st.means()["total"] == pytest.approx(3.0)
    assert st.means()["num_fg"] == pytest.approx(10.0)


@pytest.mark.slow
def test_step_stats_stops_on_a_non_finite_loss_naming_term_and_parameter():
    st = state()
    net = nn.Dense(2, 2)
    net.bias.set_data(Tensor(np.array([0.0, np.nan], np.float32)))
    recorded = StepStatistics()
    stats = StepStats(st, recorded, net, check_finite=True, dynamic_scale=False)
    stats.begin_epoch(2, RunContext())
    record(recorded, float("nan"), obj=float("inf"), skip=1)
    ctx = RunContext(cur_step_num=7, net_outputs=outputs())
    stats.on_train_step_end(ctx)
    assert ctx.stopped
    assert "epoch 2, step 3" in st.failure  # step 7 of 4-step epochs
    assert "total=nan" in st.failure and "obj=inf" in st.failure
    assert net.bias.name in st.failure
    assert st.means()["total"] == 0.0  # the bad step is not averaged in


@pytest.mark.slow
def test_step_stats_names_the_first_skipped_step_of_a_sink():
    st = state(steps=8)
    recorded = StepStatistics()
    stats = StepStats(st, recorded, nn.Dense(2, 2), check_finite=True, dynamic_scale=False)
    stats.begin_epoch(1, RunContext())
    for total, skip in [(1.0, 0), (float("inf"), 1), (float("nan"), 1), (1.0, 0)]:
        record(recorded, total, skip=skip)
    stats.on_train_step_end(RunContext(cur_step_num=4, net_outputs=outputs()))  # one sink
    assert "non-finite loss at epoch 1, step 2: total=inf;" in st.failure


@pytest.mark.slow
def test_step_stats_stops_after_too_many_overflows_in_a_row_across_sinks():
    st = state(steps=100)
    recorded = StepStatistics()
    stats = StepStats(
        st, recorded, nn.Dense(2, 2), check_finite=True, dynamic_scale=True, max_overflows=4
    )
    stats.begin_epoch(1, RunContext())
    stopped = []
    # Sinks of 3 steps: skips 2-3, then 4-5 in the next sink (a run of 4 over two sinks).
    for sink, skips in enumerate([(0, 1, 1), (1, 1, 0), (1, 1, 1)], start=1):
        for skip in skips:
            record(recorded, 1.0, skip=skip)
        ctx = RunContext(cur_step_num=3 * sink, net_outputs=outputs())
        stats.on_train_step_end(ctx)
        stopped.append(ctx.stopped)
    assert stopped == [False, True, False]  # a good step ends a run
    assert st.failure.startswith("4 overflowed steps in a row")
    assert st.overflow_steps == 7 and st.steps == 9


def test_eval_runs_every_interval_and_after_the_last_epoch_and_tracks_the_best():
    st = state(epochs=5)
    maps = iter([0.2, 0.1, 0.3])
    evaluated = []

    def evaluate(epoch):
        evaluated.append(epoch)
        return {"mAP": next(maps), "mAP50": 0.5}

    ev = EvalCallback(st, evaluate, interval=2)
    best = []
    for epoch in range(1, 6):
        st.reset_epoch(epoch)
        ev.end_epoch(epoch, RunContext())
        best.append((st.evaluated, st.is_best, st.best_map))
    assert evaluated == [2, 4, 5]
    assert best == [
        (False, False, -1.0),
        (True, True, 0.2),
        (False, False, 0.2),
        (True, False, 0.2),
        (True, True, 0.3),
    ]


def test_epoch_summary_row_and_the_latest_evaluation_in_the_log(caplog):
    st = state(epochs=3, steps=2)
    summary, line = EpochSummary(st), EpochLine(st)
    caplog.set_level(logging.INFO, logger="train")
    lines = []
    for epoch, metrics in [(1, {"mAP": 0.25, "mAP50": 0.5}), (2, None)]:
        st.reset_epoch(epoch)
        st.sums.update(total=6.0, iou=2.0, num_fg=40.0)
        st.steps = 2
        if metrics:
            st.metrics, st.evaluated = metrics, True
        caplog.clear()
        summary.end_epoch(epoch, RunContext())
        assert not caplog.records  # the row only: the line waits for the checkpoint
        line.end_epoch(epoch, RunContext())
        lines.append(caplog.records[-1].getMessage())
    first, second = st.history
    assert first["loss_total"] == 3.0 and first["loss_iou"] == 1.0 and first["num_fg"] == 20.0
    assert first["mAP"] == 0.25
    assert math.isnan(second["mAP"])  # no evaluation in epoch 2
    assert lines[0].startswith("epoch 1/3  loss 3.000 (iou 1.000")
    assert lines[0].endswith("mAP 0.250 mAP50 0.500")
    assert lines[1].endswith("  mAP 0.250 mAP50 0.500 (epoch 1)")


def test_a_long_runs_epoch_line_fits_the_console(caplog):
    st = state(epochs=300, steps=2)
    st.history = [{"epoch": 290, "mAP": 0.45}]
    st.reset_epoch(295)
    st.epoch_seconds = [4500.0] * 3  # 1:15 per epoch: an ETA of 6:15:00
    st.metrics = {"mAP": 0.451, "mAP50": 0.652}
    st.history.append(
        {"epoch": 295, "loss_total": 12.345, "loss_iou": 4.567, "loss_obj": 6.789,
         "loss_cls": 1.234, "loss_l1": 1.234, "num_fg": 158.8, "lr": 0.01,
         "images_per_s": 1234.5, "epoch_s": 4500.0, "mAP": math.nan}
    )  # fmt: skip
    caplog.set_level(logging.INFO, logger="train")
    EpochLine(st).end_epoch(295, RunContext())
    (text,) = [r.getMessage() for r in caplog.records]
    assert text == (
        "epoch 295/300  loss 12.345 (iou 4.567 obj 6.789 cls 1.234 l1 1.234)  fg 158.8  "
        "lr 1.00e-02  1234.5 img/s  ETA 6:15:00  mAP 0.451 mAP50 0.652 (epoch 290)"
    )
    assert len(text) <= 160


def _stop_epoch(st, maps: dict[int, float], patience: int = 2) -> int | None:
    """The epoch early stopping ends a run at, when epoch e's evaluation gives maps[e]."""
    evaluation = EvalCallback(st, lambda e: {"mAP": maps[e], "mAP50": maps[e]}, interval=1)
    evaluation.due = lambda epoch: epoch in maps  # evaluate only where a mAP is given
    stop = EarlyStopping(st, patience=patience)
    for epoch in range(1, st.epochs + 1):
        st.reset_epoch(epoch)
        ctx = RunContext(cur_epoch_num=epoch)
        evaluation.on_train_epoch_end(ctx)
        stop.on_train_epoch_end(ctx)
        if ctx.stopped:
            return epoch
    return None


def test_early_stopping_counts_evaluations_without_improvement():
    # epochs 2 and 4 evaluated without improvement; 3 not evaluated
    assert _stop_epoch(state(epochs=10), {1: 0.3, 2: 0.2, 4: 0.25}) == 4
    assert _stop_epoch(state(epochs=10), {1: 0.3, 2: 0.2, 4: 0.35, 5: 0.1}) is None


def test_a_resumed_run_continues_the_early_stopping_count():
    """The counter is run state (checkpoints keep it): one bad evaluation before the resume
    and one after stop a patience-2 run; restarting the count would not."""
    resumed = state(epochs=10, best_map=0.3, bad_evals=1)
    assert _stop_epoch(resumed, {1: 0.2}) == 1
    assert _stop_epoch(state(epochs=10, best_map=0.3), {1: 0.2}) is None


def test_stop_at_epoch_leaves_the_last_epoch_alone():
    st = state(epochs=5)
    stop = StopAtEpoch(st, stop_at=3)
    stopped = []
    for epoch in (2, 3):
        ctx = RunContext()
        stop.end_epoch(epoch, ctx)
        stopped.append(ctx.stopped)
    assert stopped == [False, True]
    ctx = RunContext()
    StopAtEpoch(st, stop_at=5).end_epoch(5, ctx)
    assert not ctx.stopped


def test_time_limit_stops_when_the_next_epoch_would_not_fit(monkeypatch):
    now = [1000.0]
    monkeypatch.setattr(cbs.time, "time", lambda: now[0])
    limit = TimeLimit(state(epochs=10), minutes=10)
    stopped = []
    for epoch in range(1, 6):
        now[0] += 180.0  # 3 minutes per epoch: epochs 1-3 fit in 10 minutes, a 4th does not
        ctx = RunContext()
        limit.end_epoch(epoch, ctx)
        stopped.append(ctx.stopped)
        if ctx.stopped:
            break
    assert stopped == [False, False, True]


class RecordingNetwork:
    """Records what the callback asks the training network to compile."""

    def __init__(self):
        self.compiled = []

    def compile(self, *inputs):
        self.compiled.append(inputs)


def test_compile_training_graph_compiles_once_with_the_batch_then_releases_heap(
    monkeypatch, caplog
):
    released = []
    monkeypatch.setattr(graphs, "release_free_heap", lambda: released.append(len(net.compiled)))
    net = RecordingNetwork()
    batch = (Tensor(np.zeros((2, 3), np.float32)), Tensor(np.ones((2, 1), np.float32)))
    ctx = RunContext(train_network=net, train_dataset_element=batch)
    callback = CompileTrainingGraph()
    with caplog.at_level(logging.INFO, logger="train"):
        for _ in range(3):
            callback.on_train_step_begin(ctx)
    assert net.compiled == [batch]  # the first step's inputs, once
    assert released == [1]  # after compiling, before the step runs
    logged = [r.getMessage() for r in caplog.records if "compiled in" in r.getMessage()]
    assert len(logged) == 1 and logged[0].startswith("training graph compiled in")


def training_batch(rows: int, boxes: int = 1):
    targets = np.zeros((2, rows, 5), np.float32)
    targets[:, :boxes] = 7.0
    mask = np.zeros((2, rows), np.float32)
    mask[:, :boxes] = 1.0
    return (Tensor(np.zeros((2, 3, 4, 4), np.uint8)), Tensor(targets), Tensor(mask))


def test_each_target_bucket_compiles_once_when_a_batch_first_needs_it(monkeypatch, caplog):
    monkeypatch.setattr(graphs, "release_free_heap", lambda: None)
    net = RecordingNetwork()
    callback = CompileTrainingGraph(buckets=(8, 16, 50))
    with caplog.at_level(logging.INFO, logger="train"):
        for rows in (16, 8, 16, 16, 8):
            callback.on_train_step_begin(
                RunContext(train_network=net, train_dataset_element=training_batch(rows))
            )
        callback.on_train_end(RunContext())
    assert [inputs[1].shape[1] for inputs in net.compiled] == [16, 8]  # first use, once each
    messages = [r.getMessage() for r in caplog.records]
    assert messages[0].startswith("training graph for 16 target rows compiled in")
    assert "(2 of 3 buckets)" in messages[1]
    assert messages[-1].endswith("steps per bucket: 8 rows: 2, 16 rows: 3, 50 rows: 0")


def test_all_target_buckets_compile_first_in_bucket_order_when_asked(monkeypatch):
    """With the compile cache (graphs found by compile order) or several ranks, every
    bucket compiles before the first step, from all-padding inputs of its shape."""
    monkeypatch.setattr(graphs, "release_free_heap", lambda: None)
    net = RecordingNetwork()
    callback = CompileTrainingGraph(buckets=(8, 16, 50), compile_all_first=True)
    first = training_batch(16, boxes=3)
    for _ in range(2):
        callback.on_train_step_begin(RunContext(train_network=net, train_dataset_element=first))
    assert [inputs[1].shape[1] for inputs in net.compiled] == [8, 16, 50]
    assert net.compiled[0][0] is first[0]  # the batch's own images
    assert not net.compiled[0][1].asnumpy().any() and not net.compiled[2][2].asnumpy().any()


@pytest.mark.slow
def test_callbacks_run_in_phase_order_whatever_order_they_are_listed_in(tmp_path):
    """The epoch's row needs the evaluation's mAP, and results.csv and the checkpoint need
    the row and the best mAP: built in the wrong order, the row would say NaN."""
    from msdet.engine.training.callbacks.base import ordered
    from msdet.engine.training.callbacks.records import ResultsCallback
    from msdet.engine.training.run_record import read_results

    st = state(epochs=1, steps=1)
    st.reset_epoch(1)
    summary = EpochSummary(st)
    results = ResultsCallback(st, str(tmp_path))
    evaluation = EvalCallback(st, lambda epoch: {"mAP": 0.25, "mAP50": 0.5}, interval=1)
    stop = EarlyStopping(st, patience=1)
    listed = [results, stop, summary, evaluation]  # writers after their readers
    run = ordered(listed)
    assert run == [evaluation, summary, results, stop]
    assert [cb.phase for cb in run] == sorted(cb.phase for cb in listed)
    ctx = RunContext(cur_epoch_num=1)
    for cb in run:
        cb.on_train_epoch_end(ctx)
    assert st.history[-1]["mAP"] == 0.25 and st.best_map == 0.25
    assert read_results(str(tmp_path))[0]["mAP50"] == 0.5
    # MindSpore's own callbacks have no phase: they go with the recorders.
    from mindspore.train import LossMonitor

    monitor = LossMonitor()
    assert ordered([stop, monitor, summary]) == [summary, monitor, stop]


def test_the_epoch_row_has_loss_scale_and_skipped_steps_under_amp_only():
    for amp in (True, False):
        st = state(epochs=1, steps=4, amp=amp)
        st.reset_epoch(1)
        st.steps, st.overflow_steps, st.loss_scale = 4, 3, 128.0
        EpochSummary(st).end_epoch(1, RunContext())
        row = st.history[-1]
        if amp:
            assert row["loss_scale"] == 128.0 and row["skipped_steps"] == 3.0
        else:
            assert "loss_scale" not in row and "skipped_steps" not in row
