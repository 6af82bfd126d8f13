"""engine.training.jit_loop: msdet's loop calls the callbacks as Model.train does.

The whole-run comparison of the two loops (losses, checkpoints, results, resume across
them) is in test_pynative_training.py; with two ranks in tests/e2e/test_distributed.py.
"""

from __future__ import annotations

import json
import os

import pytest

from msdet.engine.training.jit_loop import CallbackParams
from tests.support import run_python


def test_callback_params_read_as_attributes_and_keys():
    params = CallbackParams(cur_step_num=3)
    params.net_outputs = (1.0,)
    assert params.cur_step_num == params["cur_step_num"] == 3
    assert params.get("net_outputs") == (1.0,) and params.get("metrics") is None
    with pytest.raises(AttributeError, match="missing"):
        params.missing  # noqa: B018 (the attribute read is the test)


# Both drivers in one fresh PyNative process: Model.train (which then runs the step Cell
# operator by operator) and JitTrainLoop (the step compiled by mindspore.jit), each from
# the same initial weights over the same 3 batches, epochs 2..4 (a resumed run), a callback
# asking to stop at the 5th step. Every hook call is recorded with what the callbacks read.
PROTOCOL = """
import json, sys
import mindspore as ms
import numpy as np
from mindspore import dataset as ds
from mindspore.train import Callback, LossMonitor, Model

ms.set_context(mode=ms.PYNATIVE_MODE)
from msdet.engine.training.jit_loop import JitTrainLoop
from msdet.engine.training.optim import build_optimizer
from msdet.engine.training.step import TrainStep
from tests.support.training import SGD_CFG, Quadratic

STOP = 5 if sys.argv[2:] != ["nostop"] else None
HOOKS = ("on_train_begin", "on_train_epoch_begin", "on_train_step_begin",
         "on_train_step_end", "on_train_epoch_end", "on_train_end")

class Record(Callback):
    def __init__(self, log):
        self.log = log

    def _note(self, hook, run_context):
        cb = run_context.original_args()
        out = cb.get("net_outputs") if hook == "on_train_step_end" else None
        element = cb.get("train_dataset_element")
        self.log.append([hook, cb.get("cur_epoch_num"), cb.cur_step_num, cb.batch_num,
                         cb.epoch_num, cb.dataset_sink_mode, cb.mode,
                         None if element is None else [list(x.shape) for x in element],
                         None if out is None else round(float(out[0].asnumpy()), 5)])
        if hook == "on_train_step_end" and cb.cur_step_num == STOP:
            run_context.request_stop()

for hook in HOOKS:
    setattr(Record, hook, lambda self, rc, hook=hook: self._note(hook, rc))

def dataset():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(6, 2)).astype(np.float32)
    ones = np.ones((6, 1), np.float32)
    return ds.NumpySlicesDataset({"x": x, "t": ones, "m": ones}, shuffle=False).batch(2)

log = []
ms.set_seed(0)
net = Quadratic()
step = TrainStep(net, build_optimizer(net, 0.1, SGD_CFG))
callbacks = [Record(log), LossMonitor(1)]
# mindspore.data_sink's calling convention, the device queue emulated on the host (CPU)
def endless(data):
    epochs = data.create_tuple_iterator(num_epochs=-1)
    while True:
        yield from epochs

def host_sink(step, data, size, backend):
    batches, run = endless(data), ms.jit(step, jit_level=backend.jit_level,
                                         backend=backend.backend)
    def sink():
        for _ in range(size):
            out = run(*next(batches))
        return out
    return sink

if sys.argv[1] == "model":
    Model(step).train(4, dataset(), callbacks=callbacks, dataset_sink_mode=False, initial_epoch=1)
elif sys.argv[1] == "jit-sink":
    JitTrainLoop(step, sink_size=3, sink=host_sink).train(4, dataset(), callbacks, initial_epoch=1)
else:
    JitTrainLoop(step).train(4, dataset(), callbacks, initial_epoch=1)
print("RECORD " + json.dumps({"log": log, "w": net.w.asnumpy().tolist()}))
"""


@pytest.mark.slow
def test_the_jit_loop_calls_the_callbacks_as_model_train_does():
    env = {**os.environ, "ONEDNN_MAX_CPU_ISA": "AVX2"}
    runs = {}
    for driver in ("model", "jit"):
        out = run_python(["-c", PROTOCOL, driver], env=env, timeout=300)
        line = next(x for x in out.splitlines() if x.startswith("RECORD "))
        printed = [x for x in out.splitlines() if x.startswith("epoch:")]
        runs[driver] = (json.loads(line[len("RECORD ") :]), printed)
    (model, model_printed), (jit, jit_printed) = runs["model"], runs["jit"]
    assert jit["log"] == model["log"]
    assert jit["w"] == model["w"]
    # Epochs 2 and 3 of 4 (initial_epoch=1), the stop after the 5th step: 5 steps, 2 epochs.
    steps = [e for e in model["log"] if e[0] == "on_train_step_end"]
    assert [e[1:3] for e in steps] == [[2, 1], [2, 2], [2, 3], [3, 4], [3, 5]]
    assert all(e[3] == 3 and e[4] == 3 and e[5] is False for e in steps)
    assert [e[0] for e in model["log"]][-2:] == ["on_train_epoch_end", "on_train_end"]
    assert steps[0][7] == [[2, 2], [2, 1], [2, 1]] and steps[0][8] > 0
    # MindSpore's own LossMonitor prints the same lines under both drivers.
    assert jit_printed == model_printed and len(model_printed) == 5


@pytest.mark.slow
def test_under_data_sinking_the_callbacks_see_one_step_per_sink():
    """runtime.sink on Ascend: each loop epoch is one sink of sink_size steps, the callbacks
    called once per sink with the last step's outputs and cur_step_num advanced by the sink,
    as Model.train does in sink mode. The device queue (mindspore.data_sink refuses CPU) is
    emulated on the host: the weights and the losses at the sinks' ends are those of the
    same steps fed one by one."""
    env = {**os.environ, "ONEDNN_MAX_CPU_ISA": "AVX2"}
    runs = {}
    for driver in ("jit", "jit-sink"):
        out = run_python(["-c", PROTOCOL, driver, "nostop"], env=env, timeout=300)
        line = next(x for x in out.splitlines() if x.startswith("RECORD "))
        runs[driver] = json.loads(line[len("RECORD ") :])
    fed = {e[2]: e for e in runs["jit"]["log"] if e[0] == "on_train_step_end"}
    sunk = [e for e in runs["jit-sink"]["log"] if e[0] == "on_train_step_end"]
    assert [e[1:3] for e in sunk] == [[2, 3], [3, 6], [4, 9]]
    assert all(e[5] is True and e[7] == [] for e in sunk)  # sink mode, no host batch
    assert [e[8] for e in sunk] == [fed[n][8] for n in (3, 6, 9)] and sunk[0][8] > 0
    assert runs["jit-sink"]["w"] == runs["jit"]["w"]
    hooks = [e[0] for e in runs["jit-sink"]["log"]]
    assert hooks.count("on_train_epoch_begin") == hooks.count("on_train_step_begin") == 3


def test_ranks_agree_on_the_largest_bucket_any_rank_needs():
    """Several ranks with target buckets: each step every rank pads its batch to the bucket
    the largest rank needs (here rank 0 needs 8 rows, another rank 32), so all ranks run,
    and first compile, the same graph at the same step; the real targets are kept."""
    import mindspore as ms
    import numpy as np

    from msdet.engine.training.jit_loop import BucketAgreement

    images = ms.Tensor(np.zeros((2, 64, 64, 3), np.uint8))
    targets = np.zeros((2, 8, 5), np.float32)
    targets[0, :3] = [[1, 10, 10, 4, 4], [2, 20, 20, 6, 6], [0, 30, 30, 8, 8]]
    mask = np.zeros((2, 8), np.float32)
    mask[0, :3] = 1
    batch = (images, ms.Tensor(targets), ms.Tensor(mask))
    sent = []

    def other_rank_needs(bucket_index):
        def reduce_sum(counts):
            sent.append(counts.copy())
            other = np.zeros_like(counts)
            other[bucket_index] = 1
            return counts + other

        return reduce_sum

    agreed = BucketAgreement((8, 32, 120), other_rank_needs(1))(batch)
    np.testing.assert_array_equal(sent[0], [1, 0, 0])  # this rank's own bucket, one-hot
    assert agreed[0] is images
    assert agreed[1].shape == (2, 32, 5) and agreed[2].shape == (2, 32)
    np.testing.assert_array_equal(agreed[1].asnumpy()[:, :8], targets)
    np.testing.assert_array_equal(agreed[2].asnumpy()[:, :8], mask)
    assert not agreed[1].asnumpy()[:, 8:].any() and not agreed[2].asnumpy()[:, 8:].any()
    # The largest bucket is this rank's own: the batch is left as it is.
    assert BucketAgreement((8, 32, 120), other_rank_needs(0))(batch) is batch
    with pytest.raises(ValueError, match=r"8 target rows is in no bucket of \(16, 120\)"):
        BucketAgreement((16, 120), other_rank_needs(0))(batch)


def test_gradients_travel_in_buckets_of_whole_gradients():
    """One all-reduce per bucket of up to BUCKET_ELEMENTS elements (a larger gradient alone),
    the gradients in order: YOLOX-nano's ~330 gradients (0.9 M elements) in one."""
    from msdet.engine.training.jit_loop import BUCKET_ELEMENTS, gradient_buckets

    assert gradient_buckets([4, 4, 4], 8) == ((0, 2), (2, 3))
    assert gradient_buckets([10, 1, 1], 8) == ((0, 1), (1, 3))  # too large: alone
    assert gradient_buckets([1, 10, 1], 8) == ((0, 1), (1, 2), (2, 3))
    assert gradient_buckets([], 8) == ()
    nano = [16] * 300 + [3000] * 30  # ~330 gradients, well under a bucket
    assert gradient_buckets(nano) == ((0, 330),) and BUCKET_ELEMENTS == 6_553_600
    x = [2_000_000] * 50  # YOLOX-x's 99 M parameters: 3 of these per bucket
    assert len(gradient_buckets(x)) == 17
