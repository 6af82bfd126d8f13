"""EpochSummary and EpochLine: the epoch's row in the history, and its line in the log once the
epoch's checkpoint is written."""

from __future__ import annotations

import logging
import math

from msdet.engine.training.callbacks.console import EpochLine, EpochSummary
from tests.support.training import RunContext, train_state


def test_epoch_summary_row_and_the_latest_evaluation_in_the_log(caplog):
    st = train_state(epochs=3, steps=2)
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
    st = train_state(epochs=300, steps=2)
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


def test_the_epoch_row_has_loss_scale_and_skipped_steps_under_amp_only():
    for amp in (True, False):
        st = train_state(epochs=1, steps=4, amp=amp)
        st.reset_epoch(1)
        st.steps, st.overflow_steps, st.loss_scale = 4, 3, 128.0
        EpochSummary(st).end_epoch(1, RunContext())
        row = st.history[-1]
        if amp:
            assert row["loss_scale"] == 128.0 and row["skipped_steps"] == 3.0
        else:
            assert "loss_scale" not in row and "skipped_steps" not in row
