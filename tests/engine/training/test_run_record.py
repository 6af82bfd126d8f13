"""engine.training.run_record: results.csv written and read in one place, old runs included."""

from __future__ import annotations

import math

import pytest

from msdet.engine.training.run_record import COLUMNS, read_results, results_path, write_results

# Every test here takes seconds: it compiles, trains or starts a process.
pytestmark = pytest.mark.slow


def header_of(run_dir) -> list[str]:
    with open(results_path(str(run_dir)), encoding="utf-8") as f:
        return f.readline().strip().split(",")


def row(epoch: int, **extra) -> dict:
    base = {c: float(epoch) for c in COLUMNS}
    base["epoch"] = epoch
    base["mAP"] = float("nan")
    return {**base, **extra}


def test_rows_round_trip_with_nan_and_the_columns_first(tmp_path):
    rows = [row(1), row(2, mAP=0.25)]
    write_results(rows, str(tmp_path))
    back = read_results(str(tmp_path))
    assert [r["epoch"] for r in back] == [1, 2] and isinstance(back[0]["epoch"], int)
    assert math.isnan(back[0]["mAP"]) and back[1]["mAP"] == 0.25
    assert header_of(tmp_path) == list(COLUMNS)
    assert (tmp_path / "results.png").stat().st_size > 0


def test_a_run_written_before_the_loss_scale_columns_resumes_with_them(tmp_path):
    """A results.csv from before ``loss_scale`` / ``skipped_steps`` existed is read back and
    extended by a resumed run with them: the old rows get empty cells, read as NaN."""
    write_results([row(1)], str(tmp_path))  # the old format: no AMP columns
    old = read_results(str(tmp_path))
    write_results([*old, row(2, loss_scale=512.0, skipped_steps=3.0)], str(tmp_path))
    back = read_results(str(tmp_path))
    assert header_of(tmp_path) == [*COLUMNS, "loss_scale", "skipped_steps"]
    assert math.isnan(back[0]["loss_scale"]) and math.isnan(back[0]["skipped_steps"])
    assert back[1]["loss_scale"] == 512.0 and back[1]["skipped_steps"] == 3.0


def test_the_l1_terms_epochs_are_shaded_and_named_in_the_legend():
    import matplotlib.pyplot as plt

    from msdet.engine.training.run_record import NO_AUG_LABEL, no_aug_start, results_figure

    rows = [row(e, loss_l1=0.0) for e in (1, 2, 3)] + [row(e, loss_l1=1.5) for e in (4, 5)]
    for r in rows:
        r.update({f"val_loss_{k}": math.nan for k in ("total", "iou", "obj", "cls")})
    rows[1]["val_loss_total"], rows[4]["val_loss_total"] = 7.0, 6.0
    assert no_aug_start(rows) == 4 and no_aug_start(rows[:3]) is None
    fig = results_figure(rows)
    try:
        total, l1 = fig.axes[0], fig.axes[4]
        assert total.get_title() == "loss_total"
        assert l1.get_title() == "loss_l1 (YOLOX: no-aug epochs only)"
        legend = [t.get_text() for t in total.get_legend().get_texts()]
        assert legend == ["training batches", "val split (no L1 term)", NO_AUG_LABEL]
        assert NO_AUG_LABEL == "mosaic/mixup off, L1 term on"
        # The val loss where evaluated (epochs 2 and 5), in the panels of its terms only.
        (val,) = [line for line in total.lines if line.get_label() == "val split (no L1 term)"]
        assert list(val.get_xdata()) == [2, 5] and list(val.get_ydata()) == [7.0, 6.0]
        assert [line.get_label() for line in l1.lines] == ["training batches"]
        (span,) = [p for p in l1.patches if p.get_label() == NO_AUG_LABEL]
        assert span.get_x() == 3.5 and span.get_x() + span.get_width() == 5.5
        assert not [p for p in fig.axes[5].patches]  # mAP: not a loss, no shading
    finally:
        plt.close(fig)
    rows[1]["val_loss_total"] = math.nan
    fig = results_figure(rows[:3])  # before the switch, no val loss: no shading, no legend
    try:
        assert fig.axes[0].get_legend() is None and not fig.axes[0].patches
    finally:
        plt.close(fig)


def test_val_losses_in_the_thousands_do_not_flatten_the_loss_panels():
    """Issue 65: a short run from scratch scores val losses in the thousands before
    BatchNorm settles, and results.png's loss panels showed the training curve as a flat
    line at the bottom. The axis is cut at 2x the training loss's 95th percentile, the val
    points above it marked at its top edge, and the panel says so."""
    import matplotlib.pyplot as plt

    from msdet.engine.training.run_record import clipped_top, results_figure

    rows = [row(e, loss_total=t, loss_l1=0.0) for e, t in zip((1, 2, 3, 4), (11.0, 9.5, 8.8, 8.3))]
    for r, val in zip(rows, (4312.0, 806.0, 9.1, 8.9)):
        r.update(val_loss_total=val, val_loss_iou=math.nan, val_loss_obj=math.nan,
                 val_loss_cls=math.nan)  # fmt: skip
    top = clipped_top([11.0, 9.5, 8.8, 8.3], [4312.0, 806.0, 9.1, 8.9])
    assert top == pytest.approx(2 * (9.5 + 0.85 * (11.0 - 9.5)))  # numpy's 95th percentile
    assert clipped_top([11.0, 9.5], [9.1, 12.0]) is None  # val losses that fit: no cut
    fig = results_figure(rows)
    try:
        total = fig.axes[0]
        low, high = total.get_ylim()
        assert high == pytest.approx(top) and 7.5 < low < 8.3  # the training curve fills it
        assert total.get_xlabel() == (
            "epoch\nval above the axis (^) at epoch 1, 2, max 4,312:\n"
            "axis cut at 2x the training loss's 95th percentile"
        )
        (val,) = [line for line in total.lines if line.get_label() == "val split (no L1 term)"]
        assert list(val.get_ydata()) == [4312.0, 806.0, 9.1, 8.9]  # the values, not clipped
        assert fig.axes[1].get_ylim()[1] > 4  # a panel without val losses: as it was
        assert fig.axes[1].get_xlabel() == "epoch"
    finally:
        plt.close(fig)
