"""The callbacks' base: sinks turned back into epochs, phases that order the callbacks, the
shared state's means; driven by a recorded run context instead of Model.train."""

from __future__ import annotations

import numpy as np
import pytest
from mindspore import Tensor

from msdet.engine.training.callbacks import base as cbs
from msdet.engine.training.callbacks.base import EpochCallback
from msdet.engine.training.callbacks.console import EpochSummary
from msdet.engine.training.callbacks.evaluation import EvalCallback
from msdet.engine.training.callbacks.stopping import EarlyStopping
from tests.support.training import RunContext, train_state


def test_sinks_become_epochs():
    class Recorder(EpochCallback):
        def __init__(self, st):
            super().__init__(st)
            self.calls = []

        def begin_epoch(self, epoch, run_context):
            self.calls.append(("begin", epoch))

        def end_epoch(self, epoch, run_context):
            self.calls.append(("end", epoch))

    rec = Recorder(train_state(epochs=2, sinks_per_epoch=3))
    for sink in range(1, 7):  # 2 epochs of 3 sinks each
        ctx = RunContext(cur_epoch_num=sink)
        rec.on_train_epoch_begin(ctx)
        rec.on_train_epoch_end(ctx)
    assert rec.calls == [("begin", 1), ("end", 1), ("begin", 2), ("end", 2)]


@pytest.mark.slow
def test_callbacks_run_in_phase_order_whatever_order_they_are_listed_in(tmp_path):
    """The epoch's row needs the evaluation's mAP, and results.csv and the checkpoint need
    the row and the best mAP: built in the wrong order, the row would say NaN."""
    from msdet.engine.training.callbacks.base import ordered
    from msdet.engine.training.callbacks.records import ResultsCallback
    from msdet.engine.training.run_record import read_results

    st = train_state(epochs=1, steps=1)
    st.reset_epoch(1)
    summary = EpochSummary(st)
    results = ResultsCallback(st, str(tmp_path))
    evaluation = EvalCallback(st, lambda epoch: {"mAP": 0.25, "mAP50": 0.5}, range(1, 99))
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


def test_the_epochs_means_leave_out_the_skipped_steps():
    st = train_state()
    st.reset_epoch(3)
    assert st.epoch == 3 and set(st.sums) == {"total", "iou", "obj", "cls", "l1", "num_fg"}
    st.sums.update(total=12.0, num_fg=60.0)
    st.steps, st.overflow_steps = 5, 2  # the sums hold the 3 steps that updated the weights
    assert st.means()["total"] == 4.0 and st.means()["num_fg"] == 20.0
    st.reset_epoch(4)
    assert st.steps == 0 and st.means()["total"] == 0.0


def test_to_float_reads_tensors_and_numbers():
    assert cbs.to_float(Tensor(np.float32(2.5))) == 2.5 and cbs.to_float(3) == 3.0
