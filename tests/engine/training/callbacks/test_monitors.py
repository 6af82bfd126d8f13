"""MindSpore's LossMonitor and TimeMonitor speaking through msdet's log: their lines parsed
and rewritten, steps counted as optimizer steps."""

from __future__ import annotations

import logging
import time

import numpy as np
import pytest
from mindspore import Tensor
from mindspore.train import RunContext

from msdet.engine.training.callbacks.monitors import EpochTimeMonitor, StepLossMonitor


class CallbackParams(dict):
    """MindSpore's callback parameters: a dict, read by attribute as well."""

    __getattr__ = dict.__getitem__


def test_the_loss_line_counts_optimizer_steps_every_log_interval(caplog):
    monitor = StepLossMonitor(per_print_times=2, steps_per_epoch=3, accumulate=2)
    shown = []
    monitor.show = shown.append
    with caplog.at_level(logging.DEBUG, logger="train"):
        for call in range(1, 7):  # one epoch: 3 optimizer steps of 2 micro-batches
            params = CallbackParams(cur_epoch_num=1, cur_step_num=call, batch_num=6,
                                    net_outputs=Tensor(np.float32(call / 4)),
                                    dataset_sink_mode=False)  # fmt: skip
            monitor.on_train_step_end(RunContext(params))
    lines = [(r.levelno, r.getMessage()) for r in caplog.records]
    # The log file's lines (DEBUG: not on the console, where the progress bar shows the loss).
    assert lines == [
        (logging.DEBUG, "  step 1/3  loss 0.5"),
        (logging.DEBUG, "  step 2/3  loss 1.0"),
        (logging.DEBUG, "  step 3/3  loss 1.5"),
    ]
    assert shown == [0.5, 1.0, 1.5]


def test_a_non_finite_loss_still_stops_the_run_as_mindspore_does():
    monitor = StepLossMonitor(per_print_times=1, steps_per_epoch=4)
    params = CallbackParams(cur_epoch_num=2, cur_step_num=3, batch_num=4,
                            net_outputs=Tensor(np.float32(np.nan)), dataset_sink_mode=False)  # fmt: skip
    with pytest.raises(ValueError, match="epoch: 2 step: 3, loss is NAN or INF"):
        monitor.on_train_step_end(RunContext(params))


def test_the_epoch_time_goes_to_the_log_file_in_seconds_and_ms_per_step(monkeypatch, caplog):
    monitor = EpochTimeMonitor(data_size=5)
    readings = [100.0, 102.5]  # the epoch's start, then its end (and after it): 2.5 s
    monkeypatch.setattr(time, "time", lambda: readings.pop(0) if len(readings) > 1 else readings[0])
    params = CallbackParams(cur_epoch_num=1, batch_num=5, dataset_sink_mode=False)
    with caplog.at_level(logging.DEBUG, logger="train"):
        monitor.on_train_epoch_begin(RunContext(params))
        monitor.on_train_epoch_end(RunContext(params))
    records = [(r.levelno, r.getMessage()) for r in caplog.records]
    assert records == [(logging.DEBUG, "epoch time 2.5 s, 500.0 ms per step (TimeMonitor)")]
