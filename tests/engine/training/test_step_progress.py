"""StepProgress, the bar over an epoch's steps, driven as Model.train drives it with sinking."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest

from msdet.common import progress as progress_module
from msdet.common.progress import ENV_VAR
from msdet.engine.training.callbacks.base import MEASURE, TrainState
from msdet.engine.training.callbacks.console import StepProgress


class RunContext:
    def __init__(self, **params):
        self.params = SimpleNamespace(**params)

    def original_args(self):
        return self.params


def drive(callback, epochs: int, steps: int, steps_per_sink: int) -> None:
    """MindSpore's calls in sink mode: one 'epoch' per sink, one step end per sink, the
    step count advanced by the sink's steps."""
    sinks_per_epoch = steps // steps_per_sink
    callback.on_train_begin(RunContext())
    for sink in range(1, epochs * sinks_per_epoch + 1):
        ctx = RunContext(cur_epoch_num=sink, cur_step_num=sink * steps_per_sink)
        callback.on_train_epoch_begin(ctx)
        callback.on_train_step_end(ctx)
        callback.on_train_epoch_end(ctx)
    callback.on_train_end(RunContext())


@pytest.fixture(autouse=True)
def no_line_interval(monkeypatch):
    monkeypatch.setattr(progress_module, "MIN_INTERVAL", 0.0)


def progress_lines(caplog) -> list[str]:
    return [r.getMessage().split(" [")[0] for r in caplog.records if r.name == "train"]


@pytest.mark.parametrize("mode", ["bar", "lines"])
def test_a_bar_ends_at_100_percent_for_sinks_of_several_steps(caplog, monkeypatch, mode):
    monkeypatch.setenv(ENV_VAR, mode)
    caplog.set_level(logging.INFO, logger="train")
    state = TrainState(epochs=2, steps_per_epoch=6, total_batch=8, sinks_per_epoch=2)
    callback = StepProgress(state)
    assert callback.phase == MEASURE  # moved before LossMonitor prints
    drive(callback, epochs=2, steps=6, steps_per_sink=3)
    if mode == "bar":  # drawn on the terminal; the final line of each epoch is logged
        assert progress_lines(caplog) == ["epoch 1/2: 100% 6/6", "epoch 2/2: 100% 6/6"]
    else:  # one line per sink here (each is 50%), the last at 100%
        assert progress_lines(caplog) == [
            "epoch 1/2: 50% 3/6",
            "epoch 1/2: 100% 6/6",
            "epoch 2/2: 50% 3/6",
            "epoch 2/2: 100% 6/6",
        ]


def test_a_sink_of_a_whole_epoch_is_one_line(caplog, monkeypatch):
    monkeypatch.setenv(ENV_VAR, "lines")
    caplog.set_level(logging.INFO, logger="train")
    state = TrainState(epochs=1, steps_per_epoch=40, total_batch=8)
    drive(StepProgress(state), epochs=1, steps=40, steps_per_sink=40)
    assert progress_lines(caplog) == ["epoch 1/1: 100% 40/40"]


def test_without_sinking_a_line_every_ten_percent(caplog, monkeypatch):
    monkeypatch.setenv(ENV_VAR, "lines")
    caplog.set_level(logging.INFO, logger="train")
    callback = StepProgress(TrainState(epochs=1, steps_per_epoch=20, total_batch=8))
    callback.on_train_epoch_begin(RunContext(cur_epoch_num=1))
    for step in range(1, 21):  # without sinking: a step end per step
        callback.on_train_step_end(RunContext(cur_epoch_num=1, cur_step_num=step))
    callback.on_train_epoch_end(RunContext(cur_epoch_num=1))
    lines = progress_lines(caplog)
    assert len(lines) == 10 and lines[0] == "epoch 1/1: 10% 2/20" and lines[-1].endswith("20/20")


class Params(dict):
    """MindSpore's callback parameters: a dict read as attributes too."""

    __getattr__ = dict.__getitem__


def test_the_loss_rides_on_the_bar_and_its_step_lines_go_to_the_log_file(caplog, monkeypatch):
    import mindspore as ms

    from msdet.engine.training.callbacks.base import ordered
    from msdet.engine.training.callbacks.monitors import StepLossMonitor

    monkeypatch.setenv(ENV_VAR, "lines")
    caplog.set_level(logging.DEBUG, logger="train")
    state = TrainState(epochs=1, steps_per_epoch=4, total_batch=8)
    bar = StepProgress(state)
    monitor = StepLossMonitor(2, state.steps_per_epoch, show=bar.show_loss)
    callbacks = ordered([monitor, bar])  # as the trainer lists them: one phase, this order
    assert callbacks == [monitor, bar]
    begin = SimpleNamespace(original_args=lambda: Params(cur_epoch_num=1, batch_num=4))
    for cb in callbacks:
        cb.on_train_epoch_begin(begin)
    for step, loss in enumerate([12.5, 11.25, 10.125, 9.0625], start=1):
        params = Params(cur_epoch_num=1, cur_step_num=step, batch_num=4)
        params["net_outputs"] = ms.Tensor(loss, ms.float32)
        params["dataset_sink_mode"] = False
        ctx = SimpleNamespace(original_args=lambda params=params: params)
        for cb in callbacks:
            cb.on_train_step_end(ctx)
    for cb in callbacks:
        cb.on_train_epoch_end(begin)
    console = [r.getMessage() for r in caplog.records if r.levelno >= logging.INFO]
    file_only = [r.getMessage() for r in caplog.records if r.levelno == logging.DEBUG]
    assert file_only == ["  step 2/4  loss 11.25", "  step 4/4  loss 9.0625"]
    # A line at each step here (every 25%): the loss read last, this step's once read (the
    # monitor runs first); no step line on the console.
    assert [line.split(" [")[0] + " " + line.split("]")[-1] for line in console] == [
        "epoch 1/1: 25% 1/4 ",
        "epoch 1/1: 50% 2/4  loss 11.250",
        "epoch 1/1: 75% 3/4  loss 11.250",
        "epoch 1/1: 100% 4/4  loss 9.062",
    ]
