"""engine.training.checkpoints: writes that survive a kill or a full disk, pruning that only
counts finished epoch files, and restoring a run's state."""

from __future__ import annotations

import errno
import os
import re

import mindspore as ms
import numpy as np
import pytest
from mindspore import Parameter, Tensor, nn

from msdet.engine.training import checkpoints as checkpoint
from msdet.engine.training.checkpoint_files import BEST, LAST, epoch_files
from msdet.engine.training.checkpoints import (
    META_BEST,
    META_EPOCH,
    CheckpointManager,
)
from msdet.models.weights import CheckpointError


class Weights(nn.Cell):
    def __init__(self, value: float):
        super().__init__()
        self.w = Parameter(Tensor(np.full(4, value, np.float32)), name="w")


def meta(epoch: int, best: float) -> dict:
    return {META_EPOCH: epoch, META_BEST: best}


def saved(path) -> tuple[int, float, float]:
    params = ms.load_checkpoint(str(path))
    return (
        int(params[META_EPOCH].asnumpy()),
        float(params[META_BEST].asnumpy()),
        float(params["w"].asnumpy()[0]),
    )


def test_last_is_written_last_so_a_kill_never_leaves_it_ahead_of_best(tmp_path, monkeypatch):
    """Kill the writer at each write point of an epoch that set a new best: last.ckpt is
    always either the previous epoch's or this one's with best.ckpt already on disk."""
    for kill_at in (1, 2, 3):
        folder = tmp_path / f"kill{kill_at}" / "checkpoints"
        manager = CheckpointManager(str(folder), keep_last=2)
        manager.save_epoch(Weights(1.0), meta(1, 0.1), 1, is_best=True)
        writes = []
        real = checkpoint.save_atomic

        def dying(cell, path, m, real=real, writes=writes, kill_at=kill_at):
            writes.append(os.path.basename(path))
            if len(writes) == kill_at:
                raise KeyboardInterrupt  # the process dies here
            real(cell, path, m)

        monkeypatch.setattr(checkpoint, "save_atomic", dying)
        with pytest.raises(KeyboardInterrupt):
            manager.save_epoch(Weights(2.0), meta(2, 0.2), 2, is_best=True)
        monkeypatch.setattr(checkpoint, "save_atomic", real)
        assert writes[-1] == [BEST, "epoch_0002.ckpt", LAST][kill_at - 1]
        epoch, best_map, _ = saved(folder / LAST)
        assert epoch == 1 and best_map == pytest.approx(0.1)  # last.ckpt: the commit point
        assert saved(folder / BEST)[1] >= best_map  # best.ckpt is never behind it
        assert not list(folder.glob("*.partial.ckpt"))


def test_pruning_keeps_the_newest_epochs_and_ignores_partial_files(tmp_path):
    folder = tmp_path / "checkpoints"
    manager = CheckpointManager(str(folder), keep_last=2)
    (folder / "epoch_0009.partial.ckpt").write_bytes(b"half")  # a write that was killed
    for epoch in (1, 2, 3):
        manager.save_epoch(Weights(float(epoch)), meta(epoch, 0.0), epoch, is_best=False)
    names = sorted(p.name for p in folder.iterdir())
    assert names == ["epoch_0002.ckpt", "epoch_0003.ckpt", "epoch_0009.partial.ckpt", LAST]
    assert [os.path.basename(p) for p in epoch_files(str(folder))] == [
        "epoch_0002.ckpt",
        "epoch_0003.ckpt",
    ]


def test_a_full_disk_is_a_clear_error_and_the_earlier_checkpoints_stay(tmp_path, monkeypatch):
    folder = tmp_path / "checkpoints"
    manager = CheckpointManager(str(folder), keep_last=2)
    manager.save_epoch(Weights(1.0), meta(1, 0.1), 1, is_best=True)
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    real = ms.save_checkpoint

    def disk_full(cell, path, **kwargs):
        # As MindSpore: it writes <name>.tmp first, then the disk is full.
        with open(os.path.splitext(path)[0] + ".tmp", "wb") as f:
            f.write(b"\0" * 100)
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(ms, "save_checkpoint", disk_full)
    with pytest.raises(CheckpointError, match="No space left on device.*intact") as err:
        manager.save_epoch(Weights(2.0), meta(2, 0.2), 2, is_best=True)
    # How much a checkpoint needs (4 float32 weights: under 1 MiB) and what is free there.
    assert re.search(r"needs about 0\.0 MiB and \d+ MiB are free", str(err.value))
    monkeypatch.setattr(ms, "save_checkpoint", real)
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before  # nothing partial


class Stepped(nn.Cell):
    def __init__(self, step: int):
        super().__init__()
        self.w = Parameter(Tensor(np.ones(2, np.float32)), name="w")
        self.global_step = Parameter(Tensor(np.array([step], np.int32)), name="global_step")
        self.learning_rate = Parameter(Tensor(np.full(7, 0.1, np.float32)), name="learning_rate")


def test_resume_keeps_the_step_and_moves_it_only_for_another_epoch_length(tmp_path):
    """The checkpoint holds the position in the schedule, not the schedule (a per-step LR
    list is weight-shaped: resuming with more epochs used to stop on its shape). With
    another number of steps per epoch (batch, cards, accumulation) the position is the
    completed epochs in this run's steps."""
    from msdet.engine.training.checkpoints import META_STEPS_PER_EPOCH, restore_training_state

    folder = tmp_path / "checkpoints"
    CheckpointManager(str(folder)).save_epoch(
        Stepped(20), {**meta(2, 0.3), META_STEPS_PER_EPOCH: 10}, 2, is_best=False
    )
    assert "learning_rate" not in ms.load_checkpoint(str(folder / LAST))
    longer = Stepped(0)
    longer.learning_rate.set_data(Tensor(np.full(30, 0.2, np.float32)))  # more epochs
    state = restore_training_state(longer, str(folder / LAST), steps_per_epoch=10)
    assert (state.epoch, state.global_step, int(longer.global_step.asnumpy()[0])) == (2, 20, 20)
    assert longer.learning_rate.shape == (30,)  # this run's schedule, untouched
    halved = Stepped(0)
    state = restore_training_state(halved, str(folder / LAST), steps_per_epoch=5)
    assert state.global_step == 10 and int(halved.global_step.asnumpy()[0]) == 10


class Averaged(nn.Cell):
    """A network's weight and its ModelEMA, as the training step holds them."""

    def __init__(self, value: float):
        super().__init__(auto_prefix=False)  # as TrainStep: the weights keep their names
        from msdet.engine.training.ema import ModelEMA

        self.net = Weights(value)
        self.ema = ModelEMA(self.net)


def test_the_ema_buffer_is_saved_as_one_entry_per_weight_and_resumed_into_the_buffer(tmp_path):
    """Checkpoints keep ``ema.<name>`` (what eval.py, predict.py and older checkpoints
    use), never the flat buffer; resuming packs the entries back into it."""
    from msdet.engine.training.checkpoints import restore_training_state
    from msdet.engine.training.ema import EMA_BUFFER

    cell = Averaged(1.5)
    cell.ema.buffer.set_data(Tensor(np.arange(4, dtype=np.float32) + 7.0))
    folder = tmp_path / "checkpoints"
    CheckpointManager(str(folder)).save_epoch(cell, meta(1, 0.2), 1, is_best=False)
    params = ms.load_checkpoint(str(folder / LAST))
    assert EMA_BUFFER not in params
    assert params["ema.w"].asnumpy().tolist() == [7.0, 8.0, 9.0, 10.0]
    assert params["w"].asnumpy().tolist() == [1.5] * 4
    resumed = Averaged(0.0)
    restore_training_state(resumed, str(folder / LAST), steps_per_epoch=1)
    assert resumed.ema.buffer.asnumpy().tolist() == [7.0, 8.0, 9.0, 10.0]
    assert resumed.net.w.asnumpy().tolist() == [1.5] * 4
    # A checkpoint without EMA weights cannot resume a run with an EMA: named.
    CheckpointManager(str(tmp_path / "plain")).save_epoch(Weights(2.0), meta(1, 0.2), 1, False)
    with pytest.raises(CheckpointError, match="'ema.w'.*missing"):
        restore_training_state(Averaged(0.0), str(tmp_path / "plain" / LAST), steps_per_epoch=1)


def test_an_epochs_files_share_one_split_of_the_ema_buffer(tmp_path, monkeypatch):
    """best, epoch_N and last of one epoch: the buffer is split into entries once (for a
    large model a copy of every average), and every file holds them all."""
    from msdet.engine.training.ema import ModelEMA

    cell = Averaged(0.5)
    cell.ema.buffer.set_data(Tensor(np.arange(4, dtype=np.float32) - 2.0))
    calls = []
    real = ModelEMA.checkpoint_entries

    def counted(self):
        calls.append(1)
        return real(self)

    monkeypatch.setattr(ModelEMA, "checkpoint_entries", counted)
    folder = tmp_path / "checkpoints"
    written = CheckpointManager(str(folder), keep_last=2).save_epoch(
        cell, meta(3, 0.4), 3, is_best=True
    )
    assert [os.path.basename(p) for p in written] == [BEST, "epoch_0003.ckpt", LAST]
    assert len(calls) == 1
    for path in written:
        params = ms.load_checkpoint(path)
        assert params["ema.w"].asnumpy().tolist() == [-2.0, -1.0, 0.0, 1.0]
        assert params["w"].asnumpy().tolist() == [0.5] * 4
        assert int(params[META_EPOCH].asnumpy()) == 3


def test_a_file_size_limit_is_named_as_such_not_as_a_full_disk(tmp_path, monkeypatch):
    """Issue: EFBIG (errno 27, a file-size limit such as ``ulimit -f``) was reported as a
    full disk with the free space, which was plenty."""
    import resource

    folder = tmp_path / "checkpoints"
    manager = CheckpointManager(str(folder), keep_last=2)

    def too_large(cell, path, **kwargs):
        raise OSError(errno.EFBIG, "File too large")  # what MindSpore raises past the limit

    monkeypatch.setattr(ms, "save_checkpoint", too_large)
    monkeypatch.setattr(resource, "getrlimit", lambda which: (3 * 2**20, resource.RLIM_INFINITY))
    with pytest.raises(CheckpointError) as err:
        manager.save_epoch(Weights(2.0), meta(2, 0.2), 2, is_best=True)
    text = str(err.value)
    assert "File too large" in text and "MiB are free" not in text
    assert re.search(
        r"a file-size limit: this process may write files of at most 3 MiB \(ulimit -f\); "
        r"raise it .*; a checkpoint needs about 0\.0 MiB",
        text,
    )
