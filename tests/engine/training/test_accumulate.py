"""Gradient accumulation (``train.accumulate``): k micro-batches, one optimizer step.

Fast tests on a linear model whose loss is the mean over its batch, so that k micro-batches
of b samples and one batch of k x b samples have the same gradient: the weights, EMA, LR
steps and statistics must agree. Overflow anywhere in a window skips the whole step; a
window never crosses an epoch's end; a checkpoint written mid-window resumes exactly. The
YOLOX-level comparison (k=4 at batch 2 against k=1 at batch 8) is at the end, marked slow.
"""

from __future__ import annotations

import mindspore as ms
import numpy as np
import pytest
from mindspore import Parameter, nn, ops
from omegaconf import OmegaConf

from msdet.engine.training.ema import ModelEMA
from msdet.engine.training.optim import build_optimizer
from msdet.engine.training.step import ACCUMULATE_PREFIX, TrainStep
from msdet.engine.training.step_stats import read_and_reset

SGD_CFG = OmegaConf.create({"momentum": 0.9, "nesterov": True, "weight_decay": 5e-4})
LRS = np.array([0.1, 0.05, 0.02, 0.01], np.float32)


class Linear(nn.Cell):
    """loss = mean over the batch of (x . w + b - y)^2; the loss tuple of DetectorWithLoss
    (num_fg = the batch size). ``weight`` has weight decay, ``bias`` none (optimizer groups)."""

    def __init__(self):
        super().__init__()
        self.weight = Parameter(ms.Tensor(np.array([[0.5, -1.0, 2.0]], np.float32)), name="weight")
        self.bias = Parameter(ms.Tensor(np.array([0.1], np.float32)), name="bias")

    def construct(self, x, y, mask):
        err = (x * self.weight).sum(-1) + self.bias - y[:, 0]
        total = (err**2 * mask[:, 0]).mean()
        zero = ops.zeros((), ms.float32)
        return total, total * 0.5, total * 0.25, zero, zero, mask.sum()


def data(n: int = 32, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 3)).astype(np.float32)
    y = rng.normal(size=(n, 1)).astype(np.float32)
    return x, y, np.ones((n, 1), np.float32)


def make_step(k: int, **kwargs) -> tuple[Linear, TrainStep]:
    net = Linear()
    step = TrainStep(net, build_optimizer(net, LRS, SGD_CFG), ModelEMA(net), accumulate=k, **kwargs)
    return net, step


def run(step: TrainStep, x, y, m, batch: int) -> list[list[float]]:
    """Feeds the samples in order, ``batch`` per call; the outputs of every call."""
    outs = []
    for i in range(0, len(x), batch):
        sl = slice(i, i + batch)
        res = step(ms.Tensor(x[sl]), ms.Tensor(y[sl]), ms.Tensor(m[sl]))
        outs.append([float(v.asnumpy()) for v in res])
    return outs


def state(net: Linear, step: TrainStep) -> dict[str, np.ndarray]:
    return {
        "weight": net.weight.asnumpy().copy(),
        "bias": net.bias.asnumpy().copy(),
        "ema": step.ema.buffer.asnumpy().copy(),
        "global_step": step.optimizer.global_step.asnumpy().copy(),
        "ema_updates": step.ema.updates.asnumpy().copy(),
    }


def assert_same_state(a: dict, b: dict, rtol: float = 1e-6) -> None:
    for key in a:
        np.testing.assert_allclose(a[key], b[key], rtol=rtol, atol=1e-7, err_msg=key)


@pytest.mark.slow
def test_k_micro_batches_make_the_step_of_one_batch_k_times_larger():
    x, y, m = data(32)  # 4 optimizer steps of 8 samples
    net1, step1 = make_step(1)
    net4, step4 = make_step(4)
    big = run(step1, x, y, m, batch=8)
    micro = run(step4, x, y, m, batch=2)
    assert_same_state(state(net1, step1), state(net4, step4))
    assert int(step4.optimizer.global_step.asnumpy()[0]) == 4  # one LR step per window
    assert float(step4.ema.updates.asnumpy()) == 4.0  # one EMA update per window
    assert float(step4.micro_step.asnumpy()) == 0  # every window closed
    # The last call of a window reports the window: its mean loss terms (= the big batch's,
    # as every micro-batch has the same size) and its summed foreground count.
    for s in range(4):
        window, full = micro[4 * s : 4 * s + 4], big[s]
        for term in range(3):
            assert window[-1][term] == pytest.approx(full[term], rel=1e-5)
        assert window[-1][5] == full[5] == 8.0
        assert [r[6] for r in window] == [pytest.approx(LRS[s])] * 4  # the window's LR
        assert not any(r[8] for r in window)
    # The moves are far larger than the agreement asked for.
    assert np.abs(net4.weight.asnumpy() - np.array([[0.5, -1.0, 2.0]])).max() > 0.1


@pytest.mark.slow
def test_statistics_count_optimizer_steps():
    x, y, m = data(8)
    _, step = make_step(4)
    outs = run(step, x[:6], y[:6], m[:6], batch=2)  # three micro-batches: the window is open
    read = read_and_reset(step.stats)
    assert read["steps"] == 0 and read["sums"]["total"] == 0.0
    outs += run(step, x[6:], y[6:], m[6:], batch=2)
    read = read_and_reset(step.stats)
    assert read["steps"] == 1 and read["skipped"] == 0
    assert read["sums"]["total"] == pytest.approx(outs[-1][0], rel=1e-6)
    assert read["sums"]["num_fg"] == 8.0


def overflowing(x, bad_rows):
    x = x.copy()
    x[bad_rows, 0] = np.inf
    return x


@pytest.mark.slow
def test_an_overflow_in_one_micro_batch_skips_the_whole_step():
    """Dynamic loss scaling (O2): micro-batch 2 of window 2 overflows. That window updates
    no weight, halves the scale once, still advances the LR and the EMA, and leaves nothing
    behind for window 3; the run matches k=1 on the same samples (where the whole batch
    overflows), step for step."""
    x, y, m = data(24)
    x = overflowing(x, [10])  # window 2 = samples 8..15, micro-batch 2 = samples 10, 11
    kw = {"loss_scale": 2.0**10, "dynamic_scale": True, "scale_window": 1000}
    net1, step1 = make_step(1, **kw)
    net4, step4 = make_step(4, **kw)
    run(step1, x[:8], y[:8], m[:8], batch=8)
    run(step4, x[:8], y[:8], m[:8], batch=2)
    before = state(net4, step4)
    window = run(step4, x[8:16], y[8:16], m[8:16], batch=2)
    assert [r[8] for r in window] == [0, 0, 0, 1]  # the decision is the window's, at its end
    assert [r[7] for r in window] == [2.0**10] * 4  # one scale for the whole window
    np.testing.assert_array_equal(net4.weight.asnumpy(), before["weight"])
    np.testing.assert_array_equal(net4.bias.asnumpy(), before["bias"])
    assert float(step4.scale.asnumpy()) == 2.0**9
    assert int(step4.optimizer.global_step.asnumpy()[0]) == 2
    assert float(step4.ema.updates.asnumpy()) == 2.0
    for p in step4.grad_sums:  # the overflowed sums do not leak into the next window
        assert not p.asnumpy().any(), p.name
    run(step1, x[8:16], y[8:16], m[8:16], batch=8)
    run(step1, x[16:], y[16:], m[16:], batch=8)
    run(step4, x[16:], y[16:], m[16:], batch=2)
    assert_same_state(state(net1, step1), state(net4, step4))
    assert float(step1.scale.asnumpy()) == float(step4.scale.asnumpy())
    read = read_and_reset(step4.stats)
    assert (read["steps"], read["skipped"]) == (3, 1)


@pytest.mark.slow
def test_fp32_nonfinite_loss_in_one_micro_batch_skips_the_step():
    """fp32 (skip_nonfinite): a micro-batch with a non-finite loss but finite gradient
    (here: its mask, outside the gradient) skips the window too."""

    class MaskedLoss(Linear):
        def construct(self, x, y, mask):
            out = super().construct(x, y, ops.ones_like(mask))
            return (out[0] + ops.stop_gradient(mask.sum() - mask.shape[0]),) + out[1:]

    x, y, m = data(8)
    m = m.copy()
    m[5, 0] = np.inf
    net = MaskedLoss()
    step = TrainStep(net, build_optimizer(net, LRS, SGD_CFG), accumulate=4, skip_nonfinite=True)
    start = net.weight.asnumpy().copy()
    outs = run(step, x, y, m, batch=2)
    assert [r[8] for r in outs] == [0, 0, 0, 1]
    np.testing.assert_array_equal(net.weight.asnumpy(), start)
    read = read_and_reset(step.stats)
    assert read["skipped"] == 1 and not np.isfinite(read["first_skip_losses"]["total"])


@pytest.mark.slow
def test_float_status_flag_of_any_micro_batch_skips_the_step():
    """The Ascend float-status register path: the register is read after every micro-batch
    (and cleared), and a flag in any of them skips the window."""
    from tests.support.training import FloatStatusRegister, flag_inf_input

    reg = FloatStatusRegister()

    class Flagging(Linear):
        def construct(self, x, y, mask):
            return super().construct(flag_inf_input(reg.value, x), y, mask)

    x, y, m = data(16)
    x = overflowing(x, [2])  # window 1, micro-batch 2: finite gradients, flagged register
    net = Flagging()
    step = TrainStep(
        net,
        build_optimizer(net, LRS, SGD_CFG),
        accumulate=4,
        loss_scale=4.0,
        dynamic_scale=True,
        float_status=reg.ops,
    )
    reg.value.set_data(ms.Tensor(np.ones(8, np.int32)))  # stale: must not count
    start = net.weight.asnumpy().copy()
    outs = run(step, x, y, m, batch=2)
    assert [r[8] for r in outs] == [0, 0, 0, 1, 0, 0, 0, 0]
    assert float(step.scale.asnumpy()) == 2.0
    assert not reg.value.asnumpy().any()
    assert not np.array_equal(net.weight.asnumpy(), start)  # window 2 trained


@pytest.mark.slow
def test_gradient_clipping_applies_to_the_window_mean():
    x, y, m = data(8)
    x = x * 100.0  # large gradients: the clip is active
    net1, step1 = make_step(1, clip_norm=0.5)
    net4, step4 = make_step(4, clip_norm=0.5)
    run(step1, x, y, m, batch=8)
    run(step4, x, y, m, batch=2)
    assert_same_state(state(net1, step1), state(net4, step4), rtol=1e-5)


@pytest.mark.slow
def test_a_checkpoint_inside_a_window_resumes_exactly(tmp_path):
    """The window's state (gradient sums, micro-batch counter, overflow flag, loss sums) is
    in Parameters of the step, saved and restored with it: stopping after 6 micro-batches
    of windows of 4 and resuming gives the uninterrupted run's weights bit for bit."""
    from msdet.engine.training.checkpoints import CheckpointManager, restore_training_state

    x, y, m = data(16)
    net, straight = make_step(4)
    run(straight, x, y, m, batch=2)

    net_a, first = make_step(4)
    run(first, x[:6], y[:6], m[:6], batch=2)
    assert int(first.micro_step.asnumpy()) == 3
    manager = CheckpointManager(str(tmp_path))
    (path, *_) = manager.save_epoch(first, {"msdet_epoch": 1}, 1, False)
    saved = ms.load_checkpoint(path)
    names = {p.name for p in first.get_parameters() if p.name.startswith(ACCUMULATE_PREFIX)}
    assert names == {f"{ACCUMULATE_PREFIX}{n}" for n in ("micro_step", "overflow", "losses")} | {
        f"{ACCUMULATE_PREFIX}grad.weight",
        f"{ACCUMULATE_PREFIX}grad.bias",
    }
    assert names <= set(saved)

    net_b, resumed = make_step(4)
    restore_training_state(resumed, path, steps_per_epoch=1)  # 1 optimizer step so far
    run(resumed, x[6:], y[6:], m[6:], batch=2)
    for key, value in state(net, straight).items():
        np.testing.assert_array_equal(state(net_b, resumed)[key], value, err_msg=key)


def test_without_accumulation_the_step_has_no_window_state():
    _, step = make_step(1)
    assert not [p.name for p in step.get_parameters() if p.name.startswith(ACCUMULATE_PREFIX)]
    with pytest.raises(ValueError, match="accumulate must be >= 1"):
        make_step(0)


@pytest.mark.slow
def test_an_epoch_holds_whole_windows_only():
    """10 micro-batches per epoch, k=4: 2 optimizer steps per epoch and its last 2
    micro-batches not drawn (the trainer takes whole windows), so no window crosses the
    epoch's end; over 2 epochs through ``Model.train`` the result is k=1 at batch 8 on the
    first 8 samples of each epoch."""
    import mindspore.dataset as ds
    from mindspore.train import Callback, Model

    from msdet.engine.training.schedule import optimizer_steps_per_epoch

    x, y, m = data(10)
    steps = optimizer_steps_per_epoch(10, 4)
    assert steps == 2
    dataset = ds.NumpySlicesDataset({"x": x, "y": y, "m": m}, shuffle=False).batch(1)
    dataset = dataset.take(steps * 4)
    net4, step4 = make_step(4)
    open_at_epoch_end = []

    class Window(Callback):
        def on_train_epoch_end(self, run_context):
            open_at_epoch_end.append(int(step4.micro_step.asnumpy()))

    Model(step4).train(2, dataset, callbacks=[Window()], dataset_sink_mode=False)
    assert open_at_epoch_end == [0, 0]
    assert int(step4.optimizer.global_step.asnumpy()[0]) == 4

    net1, step1 = make_step(1)
    for _ in range(2):
        run(step1, x[:8], y[:8], m[:8], batch=4)
    # batch 4 at k=1 against micro-batches of 1 at k=4: same windows of 4 samples.
    assert_same_state(state(net1, step1), state(net4, step4))


def test_optimizer_steps_and_config_checks():
    from msdet.engine.training.schedule import accumulation, optimizer_steps_per_epoch

    assert optimizer_steps_per_epoch(10, 1) == 10
    assert optimizer_steps_per_epoch(10, 4) == 2
    assert optimizer_steps_per_epoch(10, 4, max_steps=1) == 1
    assert optimizer_steps_per_epoch(3, 4) == 0  # the trainer refuses it: fewer than a window
    assert accumulation(OmegaConf.create({"accumulate": 1})) == 1
    assert accumulation(OmegaConf.create({"accumulate": 8})) == 8
    for bad in (0, -2, 1.5, True, "4"):
        with pytest.raises(ValueError, match="train.accumulate must be an integer >= 1"):
            accumulation(OmegaConf.create({"accumulate": bad}))


def test_the_size_schedule_counts_optimizer_steps():
    """The trainer gives the multi-scale schedule calls (micro-batches) and an interval of
    interval x k calls: the size of call c is then the k=1 size of optimizer step c // k,
    so sizes change only between windows and follow the same sequence."""
    from msdet.engine.training.schedule import scheduled_size

    k, interval = 4, 3
    for call in range(200):
        assert scheduled_size((320, 320), 3, 7, call, interval * k) == scheduled_size(
            (320, 320), 3, 7, call // k, interval
        )


@pytest.mark.slow
def test_one_read_per_sink_reports_optimizer_steps(monkeypatch, caplog):
    """The sink code path: the device runs 3 windows of 4 micro-batches (12 calls) and
    MindSpore calls the step-end callbacks once. The epoch's figures count 3 optimizer
    steps of the total batch, and the overflow line counts optimizer steps, not calls."""
    import logging

    from msdet.engine.training.callbacks import base as cbs
    from msdet.engine.training.callbacks.base import TrainState
    from msdet.engine.training.callbacks.console import EpochSummary
    from msdet.engine.training.callbacks.monitoring import StepStats
    from tests.support.training import RunContext

    x, y, m = data(24)
    x = overflowing(x, [9])  # window 2
    net, step = make_step(4, loss_scale=2.0**10, dynamic_scale=True)
    now = [100.0]
    monkeypatch.setattr(cbs.time, "time", lambda: now[0])
    st = TrainState(epochs=1, steps_per_epoch=3, total_batch=8, accumulate=4)
    stats = StepStats(st, step.stats, net, check_finite=True, dynamic_scale=True)
    summary = EpochSummary(st)
    stats.begin_epoch(1, RunContext())
    rows = run(step, x, y, m, batch=2)
    now[0] += 2.0
    last = [ms.Tensor(np.float32(v)) for v in rows[-1]]
    with caplog.at_level(logging.INFO, logger="train"):
        stats.on_train_step_end(RunContext(cur_step_num=12, net_outputs=last))
    summary.end_epoch(1, RunContext())
    assert (st.steps, st.overflow_steps) == (3, 1)
    windows = [rows[3], rows[11]]  # the windows that updated, as their last calls report them
    epoch = st.history[-1]
    assert epoch["loss_total"] == pytest.approx(np.mean([r[0] for r in windows]), rel=1e-6)
    assert epoch["num_fg"] == 8.0
    assert epoch["images_per_s"] == pytest.approx(3 * 8 / 2.0)
    # The range runs from the first skipped step to the last step of the sink (as at k=1).
    assert "epoch 1 steps 2-3: 1 step(s) skipped for fp16 overflow" in caplog.text


# ---- YOLOX: k=4 at batch 2 against k=1 at batch 8 ---------------------------------------

YOLOX_STEPS, MICRO, K, IMG, CLASSES = 2, 2, 4, 64, 3


def tiny_yolox(initial: dict[str, np.ndarray] | None = None):
    """YOLOX-nano without depthwise blocks at 64 px, BatchNorm on its running statistics
    (so that a micro-batch normalises as the big batch does), from ``initial`` weights."""
    from msdet.models.yolox import build_model, load_model_config

    cfg = load_model_config("yolox_nano")
    cfg.depthwise = False
    net = build_model(cfg, CLASSES)
    for _, cell in net.cells_and_names():
        if isinstance(cell, nn.BatchNorm2d):
            cell.use_batch_statistics = False
    if initial is not None:
        for p in net.get_parameters():
            p.set_data(ms.Tensor(initial[p.name]))
    return net


def yolox_step(net, k: int) -> TrainStep:
    from msdet.models.loss import DetectorWithLoss, YOLOXLoss

    lrs = np.full(YOLOX_STEPS, 0.02, np.float32)
    step = TrainStep(
        DetectorWithLoss(net, YOLOXLoss(CLASSES)),
        build_optimizer(net, lrs, SGD_CFG),
        ModelEMA(net),
        accumulate=k,
    )
    step.set_train(True)
    return step


@pytest.mark.slow
def test_yolox_k4_at_batch_2_equals_k1_at_batch_8():
    """Each optimizer step's micro-batches are the same 2 images (with their targets), so
    every micro-batch has the same number of foreground anchors and the loss of the batch
    of 8 (the 2 images 4 times) is the mean of the 4 micro-batch losses. Two steps with
    momentum, weight decay and EMA: the weights agree within float32 rounding."""
    from msdet.bench.common import synthetic_batch

    batches = [synthetic_batch(MICRO, IMG, CLASSES, 8, 3, seed=10 + s) for s in range(YOLOX_STEPS)]
    ref_net = tiny_yolox()
    names = [p.name for p in ref_net.get_parameters()]  # before wrapping renames them
    initial = {p.name: p.asnumpy().copy() for p in ref_net.get_parameters()}
    trainable = [p.name for p in ref_net.trainable_params()]
    results = {}
    for k in (1, K):
        net = ref_net if k == 1 else tiny_yolox(initial)
        params = list(net.get_parameters())
        step = yolox_step(net, k)
        losses = []
        for arrays in batches:
            if k == 1:
                out = step(*(ms.Tensor(np.concatenate([a] * K)) for a in arrays))
            else:
                for _ in range(K):
                    out = step(*(ms.Tensor(a) for a in arrays))
            losses.append(float(out[0].asnumpy()))
        results[k] = (
            {n: p.asnumpy() for n, p in zip(names, params)},
            step.ema.buffer.asnumpy().copy(),
            losses,
        )
    (w1, ema1, loss1), (w4, ema4, loss4) = results[1], results[K]
    np.testing.assert_allclose(loss4, loss1, rtol=1e-5)
    moved = max(float(np.abs(w1[n] - initial[n]).max()) for n in trainable)
    worst, where = max(
        (float(np.abs(w4[n] - w1[n]).max()) / max(1.0, float(np.abs(w1[n]).max())), n)
        for n in trainable
    )
    print(f"k=4 vs k=1: worst weight difference {worst:.2e} ({where}); largest move {moved:.3g}")
    # Measured 7.5e-9 (of the largest weight) on the AMD EPYC, the largest move 0.11.
    assert worst <= 1e-6, (worst, where)
    assert moved > 1e4 * 1e-6
    for n in names:  # running statistics: not used, not changed
        if "moving" in n:
            np.testing.assert_array_equal(w4[n], initial[n])
    np.testing.assert_allclose(ema4, ema1, rtol=1e-5, atol=1e-6)
