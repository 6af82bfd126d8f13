"""The switch to the last epochs without mosaic (and with the L1 loss), as YOLOX makes it."""

from __future__ import annotations

import logging

from msdet.data.config import first_no_aug_epoch
from msdet.engine.runtime.mindspore_compat import write_parameter
from msdet.engine.training.callbacks.base import MEASURE, EpochCallback, TrainState

log = logging.getLogger("train")


class NoAugSwitch(EpochCallback):
    """Turns the L1 loss on for the no-augmentation epochs (the data turns mosaic off),
    from :func:`data.pipeline.first_no_aug_epoch` on, as YOLOX."""

    phase = MEASURE

    def __init__(self, state: TrainState, loss_cell, no_aug_epochs: int):
        super().__init__(state)
        self.loss_cell = loss_cell
        self.first_no_aug = first_no_aug_epoch(state.epochs, no_aug_epochs) + 1  # 1-based

    def begin_epoch(self, epoch, run_context):
        on = epoch >= self.first_no_aug
        if on and float(self.loss_cell.use_l1.asnumpy()) == 0.0:
            log.info("epoch %d: no-augmentation epochs begin: mosaic/mixup off, L1 loss on", epoch)
        write_parameter(self.loss_cell.use_l1, 1.0 if on else 0.0)
