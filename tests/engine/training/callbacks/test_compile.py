"""CompileTrainingGraph: one compile per input shape, when a batch first needs it (or all
buckets first), the compiler's heap handed back after it."""

from __future__ import annotations

import logging

import numpy as np
from mindspore import Tensor

from msdet.engine.training import graphs
from msdet.engine.training.callbacks.compile import CompileTrainingGraph
from tests.support.training import RecordingNetwork, RunContext, training_batch


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
