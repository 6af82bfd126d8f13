"""engine.training.interruption: a run stopped by SIGTERM or Ctrl+C says where it stopped,
which checkpoint it has, and the command that resumes it."""

from __future__ import annotations

import logging
import os
import signal

import pytest

from msdet.engine.training.callbacks.base import TrainState
from msdet.engine.training.interruption import RunInterrupted, reported_interruption


def a_run(run_dir, *, checkpoint: bool) -> TrainState:
    """A run folder as a run in epoch 3 of 7 leaves it (its command line recorded, epoch
    2's last.ckpt when ``checkpoint``) and the callbacks' state at step 120 of 250."""
    os.makedirs(run_dir / "checkpoints")
    (run_dir / "overrides.txt").write_text("model=yolox_s\nrun.name=a\ntrain.epochs=7\n")
    if checkpoint:
        (run_dir / "checkpoints" / "last.ckpt").write_bytes(b"epoch 2's state")
    state = TrainState(epochs=7, steps_per_epoch=250, total_batch=8)
    state.reset_epoch(3)
    state.steps, state.saved_epoch = 120, 2 if checkpoint else 0
    return state


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_stopped_run_says_where_and_how_to_resume(tmp_path, caplog, signum):
    """Issue 65: a run stopped by SIGTERM or Ctrl+C said nothing."""
    import mindspore as ms
    import numpy as np

    # As in any run: once MindSpore has run a kernel, its own SIGINT handler sends the
    # process a SIGTERM instead (MindSpore 2.10); Ctrl+C must still be named Ctrl+C.
    assert (ms.Tensor(np.ones(2, np.float32)) + 1).asnumpy().tolist() == [2.0, 2.0]
    state = a_run(tmp_path, checkpoint=True)
    before = signal.getsignal(signal.SIGTERM)
    logged = caplog.at_level(logging.INFO, logger="train")
    with logged, pytest.raises(RunInterrupted) as err, reported_interruption(state, str(tmp_path)):
        os.kill(os.getpid(), signum)  # the real signal, handled as a run gets it
    assert err.value.signum == signum
    name = (
        "SIGTERM (a kill, a scheduler, or Ctrl+C during a graph run: MindSpore passes it on)"
        if signum == signal.SIGTERM
        else "Ctrl+C (SIGINT)"
    )
    assert [r.getMessage() for r in caplog.records] == [
        f"stopped by {name} in epoch 3 of 7 (after step 120 of 250); the last checkpoint: "
        f"{tmp_path / 'checkpoints' / 'last.ckpt'} (after epoch 2, 2 of 7 epochs trained)",
        f"resume with: msdet train model=yolox_s train.epochs=7 run.dir={tmp_path} "
        "train.resume=auto",
    ]
    assert signal.getsignal(signal.SIGTERM) is before  # the handler is the run's only


def test_a_run_stopped_before_its_first_checkpoint_is_started_again(tmp_path, caplog):
    state = a_run(tmp_path, checkpoint=False)
    logged = caplog.at_level(logging.INFO, logger="train")
    with logged, pytest.raises(RunInterrupted), reported_interruption(state, str(tmp_path)):
        raise KeyboardInterrupt
    assert [r.getMessage() for r in caplog.records] == [
        "stopped by Ctrl+C (SIGINT) in epoch 3 of 7 (after step 120 of 250), before its first "
        "checkpoint (written when epoch 1 ends): nothing to resume",
        "start it again with: msdet train model=yolox_s run.name=a train.epochs=7",
    ]


def test_a_run_stopped_between_epochs_says_after_which(tmp_path):
    from msdet.engine.training.interruption import interruption_report

    state = a_run(tmp_path, checkpoint=True)
    state.saved_epoch = 3  # epoch 3's checkpoint is written; epoch 4 has not begun
    (first, _) = interruption_report(state, str(tmp_path), "SIGTERM", [])
    assert first.startswith("stopped by SIGTERM after epoch 3 of 7; the last checkpoint: ")
    assert first.endswith("(after epoch 3, 3 of 7 epochs trained)")


def test_other_ranks_stop_quietly_and_other_errors_pass(tmp_path, caplog):
    state = a_run(tmp_path, checkpoint=True)
    quiet = reported_interruption(state, str(tmp_path), report=False)
    with caplog.at_level(logging.INFO, logger="train"), pytest.raises(RunInterrupted), quiet:
        raise KeyboardInterrupt
    assert caplog.records == []
    with (
        pytest.raises(ValueError, match="not a signal"),
        reported_interruption(state, str(tmp_path)),
    ):
        raise ValueError("not a signal")
