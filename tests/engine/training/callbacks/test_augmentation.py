"""NoAugSwitch: the L1 loss on for the epochs without mosaic, as YOLOX switches it."""

from __future__ import annotations

import logging

import numpy as np
from mindspore import Parameter, Tensor

from msdet.engine.training.callbacks.augmentation import NoAugSwitch
from tests.support.training import train_state


class LossWithL1Switch:
    """What the switch reads and writes of the loss: its ``use_l1`` flag."""

    def __init__(self):
        self.use_l1 = Parameter(Tensor(np.float32(0.0)), name="use_l1")


def l1_per_epoch(epochs: int, no_aug_epochs: int) -> list[float]:
    """The loss's L1 flag in each epoch of a run, as the switch sets it at each epoch's start."""
    loss = LossWithL1Switch()
    switch = NoAugSwitch(train_state(epochs=epochs), loss, no_aug_epochs)
    flags = []
    for epoch in range(1, epochs + 1):
        switch.begin_epoch(epoch, None)
        flags.append(float(loss.use_l1.asnumpy()))
    return flags


def test_l1_is_on_for_the_last_no_aug_epochs_plus_one_as_yolox_counts_them():
    assert l1_per_epoch(6, 1) == [0.0, 0.0, 0.0, 0.0, 1.0, 1.0]
    assert l1_per_epoch(6, 2) == [0.0, 0.0, 0.0, 1.0, 1.0, 1.0]
    assert l1_per_epoch(6, 0) == [0.0] * 6  # never: YOLOX would still switch at the end


def test_a_resumed_run_switches_l1_back_on_and_says_so_once(caplog):
    """Resumed in the no-aug epochs, the flag (not saved as on) is set again at once."""
    loss = LossWithL1Switch()
    switch = NoAugSwitch(train_state(epochs=6), loss, no_aug_epochs=1)
    with caplog.at_level(logging.INFO, logger="train"):
        for epoch in (6, 6):  # the epoch a resumed run starts in, then the flag already on
            switch.begin_epoch(epoch, None)
    assert float(loss.use_l1.asnumpy()) == 1.0
    said = [r.getMessage() for r in caplog.records if "no-augmentation" in r.getMessage()]
    assert said == ["epoch 6: no-augmentation epochs begin: mosaic/mixup off, L1 loss on"]
