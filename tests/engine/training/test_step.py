"""The training step: EMA ramp, loss scaling and overflow skipping, gradient clipping."""

from __future__ import annotations

import math

import mindspore as ms
import numpy as np
import pytest
from mindspore import Parameter, nn, ops

from msdet.engine.training.ema import ModelEMA
from msdet.engine.training.optim import build_optimizer
from msdet.engine.training.step import TrainStep
from tests.support.training import SGD_CFG, FloatStatusRegister, Quadratic, flag_inf_input


def make_step(**kwargs):
    net = Quadratic()
    step = TrainStep(net, build_optimizer(net, 0.1, SGD_CFG), **kwargs)
    return net, step


def call(step, x):
    one = ms.Tensor(np.ones(1, np.float32))
    return step(ms.Tensor(np.asarray(x, np.float32)), one, one)


@pytest.mark.slow
def test_ema_follows_yolox_ramp():
    net = Quadratic()
    ema = ModelEMA(net, decay=0.9998)
    start = net.w.asnumpy().copy()
    net.w.set_data(ms.Tensor(np.array([3.0, 3.0], np.float32)))
    ema()
    d = 0.9998 * (1 - math.exp(-1 / 2000))
    np.testing.assert_allclose(ema.named_averages()["w"], d * start + (1 - d) * 3.0, rtol=1e-6)
    assert float(ema.updates.asnumpy()) == 1.0
    assert list(ema.checkpoint_entries()) == ["ema.w"]


class Mixed(nn.Cell):
    """Parameters of several shapes and dtypes, as a network's weights and BN statistics."""

    def __init__(self):
        super().__init__()
        rng = np.random.default_rng(0)
        self.a = Parameter(ms.Tensor(rng.normal(size=(3, 2, 2)).astype(np.float32)), name="a")
        self.b = Parameter(ms.Tensor(rng.normal(size=(5,)).astype(np.float16)), name="b.w")
        self.c = Parameter(ms.Tensor(np.float32(2.5)), name="c.moving_mean", requires_grad=False)


@pytest.mark.slow
def test_ema_buffer_averages_each_parameter_and_round_trips_through_checkpoint_entries():
    """The flat buffer gives every parameter its own average, in its shape and dtype; its
    checkpoint entries pack back into the same buffer."""
    net = Mixed()
    ema = ModelEMA(net, decay=0.5)
    dtypes = {p.name: p.asnumpy().dtype for p in net.get_parameters()}
    start = {p.name: p.asnumpy().astype(np.float32) for p in net.get_parameters()}
    new = {name: (value * 3.0 + 1.0).astype(dtypes[name]) for name, value in start.items()}
    for param in net.get_parameters():
        param.set_data(ms.Tensor(new[param.name]))
    ema()
    d = 0.5 * (1 - math.exp(-1 / 2000))
    averages = ema.named_averages()
    assert set(averages) == {"a", "b.w", "c.moving_mean"}
    for name, value in averages.items():
        assert value.shape == start[name].shape and value.dtype == dtypes[name]
        want = d * start[name] + (1 - d) * new[name].astype(np.float32)
        np.testing.assert_allclose(value.astype(np.float32), want, rtol=1e-3)
    entries = ema.checkpoint_entries()
    assert sorted(entries) == ["ema.a", "ema.b.w", "ema.c.moving_mean"]
    params = {k: Parameter(v, name=k) for k, v in entries.items()}
    params["other"] = Parameter(ms.Tensor(1.0), name="other")
    before = ema.buffer.asnumpy().copy()
    ema.pack(params, "x.ckpt")
    assert sorted(params) == ["ema_buffer", "other"]  # the entries became the buffer
    np.testing.assert_allclose(params["ema_buffer"].asnumpy(), before, rtol=1e-3)
    assert float(np.abs(before).sum()) > 0


def test_ema_pack_names_a_missing_or_misshaped_entry():
    from msdet.models.weights import CheckpointError

    ema = ModelEMA(Mixed())
    entries = ema.checkpoint_entries()
    missing = {k: v for k, v in entries.items() if k != "ema.b.w"}
    with pytest.raises(CheckpointError, match=r"x.ckpt.*'ema.b.w'.*missing"):
        ema.pack(missing, "x.ckpt")
    wrong = dict(entries, **{"ema.a": ms.Tensor(np.zeros((2, 2), np.float32))})
    with pytest.raises(CheckpointError, match=r"'ema.a' has shape \(2, 2\).*\(3, 2, 2\)"):
        ema.pack(wrong, "x.ckpt")


class TwoParams(nn.Cell):
    """loss = sum((w - x)^2) + sum((v - x)^2): two gradients, so that the finite check
    has to look past the first one."""

    def __init__(self):
        super().__init__()
        self.w = Parameter(ms.Tensor(np.array([1.0, -2.0], np.float32)), name="w")
        self.v = Parameter(ms.Tensor(np.ones((2, 2), np.float32)), name="v")

    def construct(self, x, targets, mask):
        loss = ((self.w - x) ** 2).sum() + ((self.v - x[1:2]) ** 2).sum()
        loss = loss * targets.sum() * mask.sum()
        zero = ops.zeros((), ms.float32)
        return loss, zero, zero, zero, zero, zero


@pytest.mark.slow
@pytest.mark.parametrize("finite_check", ["flat", "mindspore"])
def test_both_finite_checks_skip_a_step_whose_second_gradient_is_not_finite(finite_check):
    """The flat check (one IsFinite over the concatenated gradients) and MindSpore's
    all_finite skip exactly the same steps."""
    net = TwoParams()
    step = TrainStep(
        net, build_optimizer(net, 0.1, SGD_CFG), skip_nonfinite=True, finite_check=finite_check
    )
    before = (net.w.asnumpy().copy(), net.v.asnumpy().copy())
    out = call(step, [0.0, np.nan])  # w's gradient has a NaN, v's gradient is all NaN
    assert bool(out[8].asnumpy())
    assert net.w.asnumpy().tobytes() == before[0].tobytes()
    assert net.v.asnumpy().tobytes() == before[1].tobytes()
    out = call(step, [0.0, 0.5])
    assert not bool(out[8].asnumpy())
    assert not np.array_equal(net.v.asnumpy(), before[1])  # a finite step updates


def test_an_unknown_finite_check_is_refused():
    net = TwoParams()
    with pytest.raises(ValueError, match="finite_check.*'fast'"):
        TrainStep(net, build_optimizer(net, 0.1, SGD_CFG), finite_check="fast")


def test_the_runtime_chooses_mindspores_check_on_ascend_only():
    from msdet.engine.runtime.process import Runtime

    kwargs = {"mode": "graph", "amp_level": "O0", "sink": False, "sink_size": -1}
    assert Runtime(device="Ascend", **kwargs).finite_check == "mindspore"
    assert Runtime(device="CPU", **kwargs).finite_check == "flat"
    assert Runtime(device="GPU", **kwargs).finite_check == "flat"


@pytest.mark.slow
def test_fixed_loss_scale_gives_unscaled_update():
    net, step = make_step(loss_scale=1024.0)
    _, ref = make_step(loss_scale=1.0)
    out = call(step, [0.0, 0.0])
    call(ref, [0.0, 0.0])
    np.testing.assert_allclose(net.w.asnumpy(), ref.net_with_loss.w.asnumpy(), rtol=1e-6)
    assert float(out[7].asnumpy()) == 1024.0 and not bool(out[8].asnumpy())


@pytest.mark.slow
def test_dynamic_scale_skips_overflowed_step_and_halves_scale():
    net, step = make_step(loss_scale=2.0**20, dynamic_scale=True, scale_window=2)
    before = net.w.asnumpy().copy()
    out = call(step, [np.inf, 0.0])  # gradient is inf: the step must change nothing
    assert bool(out[8].asnumpy())
    np.testing.assert_array_equal(net.w.asnumpy(), before)
    assert float(step.scale.asnumpy()) == 2.0**19
    call(step, [0.0, 0.0])
    call(step, [0.0, 0.0])  # two good steps (window 2): the scale grows back
    assert float(step.scale.asnumpy()) == 2.0**20
    assert not np.array_equal(net.w.asnumpy(), before)


def test_gradient_clipping_bounds_the_update():
    net, step = make_step(clip_norm=0.5)
    before = net.w.asnumpy().copy()
    call(step, [100.0, 100.0])  # raw gradient norm ~280
    # First SGD step with nesterov momentum: delta = lr * (1 + momentum) * g.
    assert np.linalg.norm(net.w.asnumpy() - before) == pytest.approx(0.1 * 1.9 * 0.5, rel=1e-4)


class Terms(nn.Cell):
    """A loss whose terms differ from step to step: total = sum((w - x)^2), the others
    fixed multiples of it, num_fg = sum(x)."""

    def __init__(self):
        super().__init__()
        self.w = Parameter(ms.Tensor(np.array([1.0, -2.0], np.float32)), name="w")

    def construct(self, x, targets, mask):
        total = ((self.w - x) ** 2).sum()
        return total, total * 0.5, total * 0.25, total * 0.125, total * 0.0625, x.sum()


@pytest.mark.slow
def test_one_callback_call_per_sink_gives_the_per_step_means(monkeypatch):
    """The sink code path: the device runs several steps, then MindSpore calls the step-end
    callbacks once with the last step's outputs. The epoch figures must still be the
    means over every step, and images/s must count every step."""
    from msdet.engine.training.callbacks import base as cbs
    from msdet.engine.training.callbacks.base import TrainState
    from msdet.engine.training.callbacks.console import EpochSummary
    from msdet.engine.training.callbacks.monitoring import StepStats
    from msdet.engine.training.step_stats import read_and_reset
    from tests.support.training import RunContext

    net = Terms()
    step = TrainStep(
        net, build_optimizer(net, 0.01, SGD_CFG), loss_scale=2.0**10, dynamic_scale=True
    )
    inputs = [[0.0, 0.0], [1.0, 3.0], [np.inf, 0.0], [2.0, -1.0], [0.5, 0.5]]  # 3rd: overflow
    now = [100.0]
    monkeypatch.setattr(cbs.time, "time", lambda: now[0])
    st = TrainState(epochs=1, steps_per_epoch=len(inputs), total_batch=16)
    stats = StepStats(st, step.stats, net, check_finite=True, dynamic_scale=True)
    summary = EpochSummary(st)
    stats.begin_epoch(1, RunContext())
    rows = [[float(v.asnumpy()) for v in call(step, x)] for x in inputs]
    now[0] += 2.0  # the sink took 2 s
    stats.on_train_step_end(RunContext(cur_step_num=len(inputs), net_outputs=call_outputs(rows)))
    summary.end_epoch(1, RunContext())

    good = [r for r in rows if not r[8]]
    assert [r[8] for r in rows] == [0, 0, 1, 0, 0]
    epoch = st.history[-1]
    for i, name in enumerate(("total", "iou", "obj", "cls", "l1")):
        assert epoch[f"loss_{name}"] == pytest.approx(np.mean([r[i] for r in good]), rel=1e-6)
    assert epoch["num_fg"] == pytest.approx(np.mean([r[5] for r in good]))
    assert st.steps == 5 and st.overflow_steps == 1
    assert epoch["images_per_s"] == pytest.approx(5 * 16 / 2.0)
    # Read: nothing new until the next step, which starts the sums anew.
    assert read_and_reset(step.stats)["steps"] == 0
    total = float(call(step, [1.0, 1.0])[0].asnumpy())
    again = read_and_reset(step.stats)
    assert again["steps"] == 1 and again["sums"]["total"] == pytest.approx(total)


def call_outputs(rows):
    return [ms.Tensor(np.float32(v)) for v in rows[-1]]


@pytest.mark.slow
def test_a_skipped_step_still_advances_the_lr_schedule_and_the_ema():
    """YOLOX updates the learning rate and the EMA on every iteration, also when the
    scaler skips the optimizer step: the schedule must not shift by the skipped steps."""
    net = Quadratic()
    lrs = np.array([0.1, 0.2, 0.3, 0.4], np.float32)
    ema = ModelEMA(net, decay=0.9998)
    step = TrainStep(
        net, build_optimizer(net, lrs, SGD_CFG), ema, loss_scale=4.0, dynamic_scale=True
    )
    seen = [float(call(step, x)[6].asnumpy()) for x in ([0, 0], [np.inf, 0], [0, 0], [0, 0])]
    np.testing.assert_allclose(seen, lrs)  # lr of step i is lrs[i], skipped step included
    assert float(ema.updates.asnumpy()) == 4.0
    assert int(step.optimizer.global_step.asnumpy()[0]) == 4


@pytest.mark.slow
def test_uint8_hwc_batches_train_exactly_as_float_chw():
    """The pipeline sends uint8 [B, H, W, 3]; cast and transposed in-graph it must give the
    step the float32 [B, 3, H, W] batch had before."""
    from msdet.engine.training.step import network_images

    class Pixels(nn.Cell):
        def __init__(self):
            super().__init__()
            self.w = Parameter(ms.Tensor(np.linspace(0.1, 0.3, 3).astype(np.float32)), name="w")

        def construct(self, images, targets, mask):
            # Channel-weighted: a wrong layout gives another loss and gradient.
            total = (images * self.w.reshape(1, 3, 1, 1)).mean() ** 2 * 1e-4
            zero = ops.zeros((), ms.float32)
            return total, zero, zero, zero, zero, zero

    rng = np.random.default_rng(0)
    hwc = rng.integers(0, 256, (2, 4, 5, 3), dtype=np.uint8)
    chw = hwc.transpose(0, 3, 1, 2).astype(np.float32)
    np.testing.assert_array_equal(network_images(ms.Tensor(hwc)).asnumpy(), chw)
    one = ms.Tensor(np.ones(1, np.float32))
    results = []
    for batch in (hwc, chw):
        net = Pixels()
        step = TrainStep(net, build_optimizer(net, 0.1, SGD_CFG))
        loss = float(step(ms.Tensor(batch), one, one)[0].asnumpy())
        results.append((loss, net.w.asnumpy().copy()))
    assert results[0][0] == results[1][0]
    np.testing.assert_array_equal(results[0][1], results[1][1])


@pytest.mark.slow
def test_float_status_register_is_cleared_before_the_step_and_read_after():
    reg = FloatStatusRegister()

    class Flagging(Quadratic):
        def construct(self, x, targets, mask):
            return super().construct(flag_inf_input(reg.value, x), targets, mask)

    net = Flagging()
    step = TrainStep(
        net,
        build_optimizer(net, 0.1, SGD_CFG),
        loss_scale=4.0,
        dynamic_scale=True,
        float_status=reg.ops,
    )
    # A stale flag from before the step (another graph's overflow) must not skip it.
    reg.value.set_data(ms.Tensor(np.ones(8, np.int32)))
    skipped = [bool(call(step, x)[8].asnumpy()) for x in ([0, 0], [np.inf, 0], [1, 1])]
    assert skipped == [False, True, False]  # the gradients were finite every time
    assert not reg.value.asnumpy().any()  # read and cleared after the step
    assert float(step.scale.asnumpy()) == 2.0  # halved once


@pytest.mark.slow
def test_model_train_epochs_report_the_per_step_means():
    """Through mindspore.train.Model (host feeding on CPU: one callback call per step, so
    the statistics are read and restarted every step), over two epochs."""
    import mindspore.dataset as ds
    from mindspore.train import Callback, Model

    from msdet.engine.training.callbacks.base import TrainState
    from msdet.engine.training.callbacks.console import EpochSummary
    from msdet.engine.training.callbacks.monitoring import StepStats

    net = Terms()
    step = TrainStep(net, build_optimizer(net, 0.01, SGD_CFG), skip_nonfinite=True)
    x = np.array([[0, 0], [1, 3], [2, -1]], np.float32)  # 3 steps per epoch
    ones = np.ones((3, 1), np.float32)
    data = ds.NumpySlicesDataset({"x": x, "t": ones, "m": ones}, shuffle=False).batch(1)
    st = TrainState(epochs=2, steps_per_epoch=3, total_batch=1)
    seen = []

    class Record(Callback):
        def on_train_step_end(self, run_context):
            seen.append([float(v.asnumpy()) for v in run_context.original_args().net_outputs])

    stats = StepStats(st, step.stats, net, check_finite=True, dynamic_scale=False)
    Model(step).train(
        2, data, callbacks=[stats, EpochSummary(st), Record()], dataset_sink_mode=False
    )
    assert len(seen) == 6 and not any(r[8] for r in seen)
    for epoch, row in enumerate(st.history):
        rows = seen[3 * epoch : 3 * epoch + 3]
        assert row["loss_total"] == pytest.approx(np.mean([r[0] for r in rows]), rel=1e-6)
        assert row["num_fg"] == pytest.approx(np.mean([r[5] for r in rows]), rel=1e-6)
    assert st.steps == 3
