"""What a run keeps after each epoch: the checkpoint with the run's state, results.csv and
TensorBoard's scalars, and nothing more once the run has failed."""

from __future__ import annotations

import logging
import math

from msdet.engine.training.callbacks.records import (
    CheckpointCallback,
    ResultsCallback,
    TensorBoardCallback,
)
from msdet.engine.training.checkpoints import (
    META_BAD_EVALS,
    META_BEST,
    META_EPOCH,
    META_STEPS_PER_EPOCH,
)
from msdet.engine.training.run_record import read_results
from msdet.models.weights import CheckpointError
from tests.support.training import RunContext, tensorboard_scalars, train_state


class RecordingManager:
    """Records what the callback asks the checkpoint manager to save; ``fail``: raise as a
    full disk makes the real one raise."""

    def __init__(self, fail: str | None = None):
        self.saved = []
        self.fail = fail

    def save_epoch(self, cell, meta, epoch, is_best):
        if self.fail:
            raise CheckpointError(self.fail)
        self.saved.append((cell, meta, epoch, is_best))


def test_the_checkpoint_holds_the_runs_state_beside_the_description():
    st = train_state(epochs=5, steps=4, best_map=0.4, bad_evals=1)
    st.is_best = True
    manager = RecordingManager()
    CheckpointCallback(st, manager, "the train cell", {"msdet_model": "nano"}).end_epoch(3, None)
    assert manager.saved == [
        (
            "the train cell",
            {"msdet_model": "nano", META_EPOCH: 3, META_BEST: 0.4, META_BAD_EVALS: 1,
             META_STEPS_PER_EPOCH: 4},
            3,
            True,
        )
    ]  # fmt: skip


def test_a_failed_save_stops_the_run_with_its_error_and_a_failed_run_saves_nothing(caplog):
    st = train_state()
    ctx = RunContext()
    with caplog.at_level(logging.ERROR, logger="train"):
        CheckpointCallback(st, RecordingManager(fail="disk full"), None, {}).end_epoch(2, ctx)
    assert ctx.stopped and st.failure == "disk full"
    assert [r.getMessage() for r in caplog.records] == ["disk full"]
    manager = RecordingManager()
    CheckpointCallback(st, manager, None, {}).end_epoch(3, RunContext())
    assert manager.saved == []  # the last good checkpoint stays the last one


def test_results_csv_gets_every_row_until_the_run_fails(tmp_path):
    st = train_state()
    results = ResultsCallback(st, str(tmp_path))
    st.history = [{"epoch": 1, "loss_total": 3.0, "mAP": 0.25}]
    results.end_epoch(1, None)
    st.history.append({"epoch": 2, "loss_total": 2.5, "mAP": float("nan")})
    results.end_epoch(2, None)
    rows = read_results(str(tmp_path))
    assert [(r["epoch"], r["loss_total"]) for r in rows] == [(1, 3.0), (2, 2.5)]
    assert rows[0]["mAP"] == 0.25 and math.isnan(rows[1]["mAP"])
    st.failure = "non-finite loss"
    st.history.append({"epoch": 3, "loss_total": float("nan")})
    results.end_epoch(3, None)
    assert len(read_results(str(tmp_path))) == 2


def test_tensorboard_groups_the_rows_figures_and_skips_what_was_not_measured(tmp_path):
    st = train_state()
    board = TensorBoardCallback(st, str(tmp_path))
    st.history = [{"epoch": 1, "loss_total": 3.0, "lr": 0.01, "mAP": 0.25}]
    board.end_epoch(1, None)
    st.history.append({"epoch": 2, "loss_total": 2.0, "lr": 0.005, "mAP": float("nan")})
    board.end_epoch(2, None)
    st.failure = "non-finite loss"
    st.history.append({"epoch": 3, "loss_total": 9.0, "lr": 0.001, "mAP": 0.5})
    board.end_epoch(3, None)
    board.on_train_end(None)
    scalars = tensorboard_scalars(tmp_path)
    assert sorted(scalars) == ["loss/loss_total", "metrics/mAP", "train/lr"]
    assert scalars["loss/loss_total"] == [(1, 3.0), (2, 2.0)]
    assert scalars["metrics/mAP"] == [(1, 0.25)]  # epoch 2 was not evaluated
    assert [step for step, _ in scalars["train/lr"]] == [1, 2]
