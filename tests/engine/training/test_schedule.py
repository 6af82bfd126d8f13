"""YOLOX's epoch schedule: when mosaic/mixup stop, the L1 loss starts and evaluation runs
every epoch, checked against the original trainer's own ``before_epoch``/``after_epoch``."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from msdet.data.config import first_no_aug_epoch
from msdet.engine.training.callbacks.augmentation import NoAugSwitch
from msdet.engine.training.callbacks.base import TrainState
from msdet.engine.training.callbacks.evaluation import EvalCallback
from msdet.engine.training.plan import evaluation_epochs
from tests.support.torch_reference import require_yolox


def yolox_schedule(epochs: int, no_aug_epochs: int, eval_interval: int, monkeypatch):
    """Per 1-based epoch: (mosaic on, L1 on, evaluated) as YOLOX 0.3.0's Trainer runs it."""
    require_yolox()
    import sys
    import types

    # The trainer module imports torch's TensorBoard writer, whose `tensorboard` package
    # is not installed; the epoch logic under test never writes a summary.
    stand_in = types.ModuleType("torch.utils.tensorboard")
    stand_in.SummaryWriter = object
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", stand_in)
    from yolox.core import trainer as yolox_trainer

    monkeypatch.setattr(yolox_trainer, "all_reduce_norm", lambda model: None)
    monkeypatch.setattr(yolox_trainer.logger, "info", lambda *a, **k: None)
    closed, evaluated = [], []
    t = SimpleNamespace(
        epoch=0,
        max_epoch=epochs,
        no_aug=False,
        is_distributed=False,
        exp=SimpleNamespace(no_aug_epochs=no_aug_epochs, eval_interval=eval_interval),
        train_loader=SimpleNamespace(close_mosaic=lambda: closed.append(t.epoch)),
        model=SimpleNamespace(head=SimpleNamespace(use_l1=False)),
        save_ckpt=lambda ckpt_name: None,
        evaluate_and_save_model=lambda: evaluated.append(t.epoch),
    )
    rows = []
    for e in range(epochs):
        t.epoch = e
        yolox_trainer.Trainer.before_epoch(t)
        mosaic, l1 = not closed, t.model.head.use_l1
        yolox_trainer.Trainer.after_epoch(t)
        rows.append((mosaic, l1, e in evaluated))
    return rows


class _Loss:
    def __init__(self):
        import mindspore as ms
        from mindspore import Parameter

        self.use_l1 = Parameter(ms.Tensor(0.0, ms.float32), name="use_l1")


def msdet_schedule(epochs: int, no_aug_epochs: int, eval_interval: int):
    """The same three facts from msdet's data pipeline and callbacks."""
    st = TrainState(epochs=epochs, steps_per_epoch=1, total_batch=1)
    loss = _Loss()
    switch = NoAugSwitch(st, loss, no_aug_epochs)
    evaluated = []
    ev = EvalCallback(
        st,
        lambda e: evaluated.append(e) or {"mAP": 0.0},
        evaluation_epochs(epochs, eval_interval, no_aug_epochs),
    )
    first = first_no_aug_epoch(epochs, no_aug_epochs)
    rows = []
    for epoch in range(1, epochs + 1):
        st.reset_epoch(epoch)
        switch.begin_epoch(epoch, None)
        ev.end_epoch(epoch, None)
        mosaic = epoch - 1 < first  # TrainSamples: mosaic while the 0-based epoch < first
        rows.append((mosaic, float(loss.use_l1.asnumpy()) == 1.0, epoch in evaluated))
    return rows


@pytest.mark.torch
@pytest.mark.parametrize("epochs,no_aug,interval", [(300, 15, 10), (20, 3, 4), (12, 1, 5)])
def test_no_aug_switch_and_eval_epochs_equal_yolox_trainer(epochs, no_aug, interval, monkeypatch):
    ours = msdet_schedule(epochs, no_aug, interval)
    ref = yolox_schedule(epochs, no_aug, interval, monkeypatch)
    for epoch, (a, b) in enumerate(zip(ours, ref), start=1):
        assert a == b, f"epoch {epoch}: msdet (mosaic, l1, eval) {a} vs YOLOX {b}"
    assert sum(not mosaic for mosaic, _, _ in ours) == no_aug + 1


def test_fifteen_no_aug_epochs_mean_sixteen_without_mosaic():
    assert first_no_aug_epoch(300, 15) == 284  # 0-based: epochs 285..300 (1-based), 16 of them
    assert first_no_aug_epoch(5, 1) == 3  # the shapes recipe: the last two epochs
    assert first_no_aug_epoch(5, 0) == 5  # 0: never
    assert first_no_aug_epoch(3, 10) == 0  # more than the run: from the start
