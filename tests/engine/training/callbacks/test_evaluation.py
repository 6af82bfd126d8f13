"""EvalCallback: when the run evaluates, and the best mAP it tracks."""

from __future__ import annotations

from msdet.engine.training.callbacks.evaluation import EvalCallback
from msdet.engine.training.plan import evaluation_epochs
from tests.support.training import RunContext, train_state


def test_eval_runs_every_interval_and_after_the_last_epoch_and_tracks_the_best():
    st = train_state(epochs=5)
    maps = iter([0.2, 0.1, 0.3])
    evaluated = []

    def evaluate(epoch):
        evaluated.append(epoch)
        return {"mAP": next(maps), "mAP50": 0.5}

    ev = EvalCallback(st, evaluate, evaluation_epochs(st.epochs, 2, 0))
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
