"""Early stopping, a stop at a given epoch and the time limit, epoch by epoch."""

from __future__ import annotations

from msdet.engine.training.callbacks import base as cbs
from msdet.engine.training.callbacks.evaluation import EvalCallback
from msdet.engine.training.callbacks.stopping import EarlyStopping, StopAtEpoch, TimeLimit
from tests.support.training import RunContext, train_state


def _stop_epoch(st, maps: dict[int, float], patience: int = 2) -> int | None:
    """The epoch early stopping ends a run at, when epoch e's evaluation gives maps[e]."""
    # evaluated only where a mAP is given
    evaluation = EvalCallback(st, lambda e: {"mAP": maps[e], "mAP50": maps[e]}, maps)
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
    assert _stop_epoch(train_state(epochs=10), {1: 0.3, 2: 0.2, 4: 0.25}) == 4
    assert _stop_epoch(train_state(epochs=10), {1: 0.3, 2: 0.2, 4: 0.35, 5: 0.1}) is None


def test_a_resumed_run_continues_the_early_stopping_count():
    """The counter is run state (checkpoints keep it): one bad evaluation before the resume
    and one after stop a patience-2 run; restarting the count would not."""
    resumed = train_state(epochs=10, best_map=0.3, bad_evals=1)
    assert _stop_epoch(resumed, {1: 0.2}) == 1
    assert _stop_epoch(train_state(epochs=10, best_map=0.3), {1: 0.2}) is None


def test_stop_at_epoch_leaves_the_last_epoch_alone():
    st = train_state(epochs=5)
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
    limit = TimeLimit(train_state(epochs=10), minutes=10)
    stopped = []
    for epoch in range(1, 6):
        now[0] += 180.0  # 3 minutes per epoch: epochs 1-3 fit in 10 minutes, a 4th does not
        ctx = RunContext()
        limit.end_epoch(epoch, ctx)
        stopped.append(ctx.stopped)
        if ctx.stopped:
            break
    assert stopped == [False, False, True]
