"""engine.training.hooks: the callbacks a run's plan chooses, in the order they act."""

from __future__ import annotations

from types import SimpleNamespace

from msdet.common.config import load_config
from msdet.engine.runtime.process import Runtime
from msdet.engine.training.hooks import RunParts, build_callbacks
from msdet.engine.training.plan import DataSummary, plan_run


def planned(tmp_path, *overrides: str, world_size: int = 1):
    """(config, runtime, plan) of a run of ``overrides`` on 8 images of batch 8 (one step)."""
    cfg = load_config("train", ["train.batch_size=8", *overrides])
    rt = Runtime("CPU", "graph", "O0", sink=False, sink_size=-1, run_dir=str(tmp_path),
                 world_size=world_size)  # fmt: skip
    return cfg, rt, plan_run(cfg, rt, DataSummary("shapes", 8 * world_size, 8, ("a",)), environ={})


def parts(evaluate=lambda epoch: None) -> RunParts:
    """What the callbacks act on, without a network (none of these tests runs a step)."""
    return RunParts(
        train_step=SimpleNamespace(net_with_loss=None, stats=None),
        net=None,
        loss=None,
        train_source=SimpleNamespace(unreadable=None),
        evaluation=SimpleNamespace(evaluate=evaluate, tensorboard_images=None),
        checkpoint_meta={},
    )


def names(cbs) -> list[str]:
    return [type(cb).__name__ for cb in cbs]


def test_the_plan_chooses_the_callbacks_and_their_phases_order_them(tmp_path):
    from msdet.engine.training.callbacks.base import TrainState

    cfg, rt, plan = planned(tmp_path, "train.patience=3", "train.time_limit_min=5",
                            "train.stop_at_epoch=2", "runtime.profile_steps=2")  # fmt: skip
    state = TrainState(epochs=plan.epochs, steps_per_epoch=1, total_batch=8)
    got = names(build_callbacks(cfg, plan, rt, state, parts()))
    assert got[0] == "CompileTrainingGraph"  # graph mode, fed from the host
    assert got.index("EvalCallback") < got.index("EpochSummary") < got.index("CheckpointCallback")
    assert got.index("CheckpointCallback") < got.index("EpochLine")
    assert got.index("StepLossMonitor") < got.index("StepProgress")
    assert {"EarlyStopping", "TimeLimit", "StopAtEpoch", "ProfilerCallback",
            "TensorBoardCallback"} <= set(got)  # fmt: skip
    assert got[-3:] == ["EarlyStopping", "StopAtEpoch", "TimeLimit"]  # they decide last
    cfg, rt, plan = planned(tmp_path, "train.tensorboard=false")
    plain = names(build_callbacks(cfg, plan, rt, state, parts()))
    assert not {"EarlyStopping", "TimeLimit", "StopAtEpoch", "ProfilerCallback",
                "TensorBoardCallback"} & set(plain)  # fmt: skip


def test_ranks_other_than_zero_only_measure_and_evaluate(tmp_path):
    from dataclasses import replace

    from msdet.engine.training.callbacks.base import TrainState

    cfg, rt, plan = planned(tmp_path, world_size=2)
    state = TrainState(epochs=plan.epochs, steps_per_epoch=1, total_batch=16)
    rank1 = names(build_callbacks(cfg, plan, replace(rt, rank=1), state, parts()))
    # measure, evaluate, then the unreadable images' report (a record): nothing written
    assert rank1 == ["CompileTrainingGraph", "NoAugSwitch", "StepStats", "EvalCallback",
                     "UnreadableImagesReport"]  # fmt: skip


def test_the_trackers_train_track_names_record_on_rank_zero_beside_tensorboard(tmp_path):
    from dataclasses import replace

    from msdet.engine.training.callbacks.base import TrainState

    cfg, rt, plan = planned(tmp_path)
    plan = replace(plan, trackers=("swanlab", "mlflow"))  # as planned where both are installed
    state = TrainState(epochs=plan.epochs, steps_per_epoch=1, total_batch=8)
    got = names(build_callbacks(cfg, plan, rt, state, parts()))  # neither package imported
    assert got.index("EpochSummary") < got.index("SwanlabTracking") < got.index("EpochLine")
    assert got.index("SwanlabTracking") < got.index("MlflowTracking") < got.index("EpochLine")
    assert "TensorBoardCallback" in got
    rank1 = names(build_callbacks(cfg, plan, replace(rt, rank=1), state, parts()))
    assert not {"SwanlabTracking", "MlflowTracking"} & set(rank1)


def test_the_epoch_line_is_printed_once_the_epochs_checkpoint_is_on_disk(tmp_path, caplog):
    """Issue: the epoch's loss/mAP line came before its checkpoint was written: a user who
    stopped the run on seeing it lost the epoch. The run's own callbacks, in the order
    training runs them: the line follows the checkpoint (and results.csv)."""
    import logging
    import os
    from types import SimpleNamespace

    import numpy as np
    from mindspore import Parameter, Tensor, nn

    from msdet.engine.training.callbacks.base import TrainState

    class Weights(nn.Cell):
        def __init__(self):
            super().__init__()
            self.w = Parameter(Tensor(np.ones(4, np.float32)), name="w")

    cfg, rt, plan = planned(tmp_path, "train.tensorboard=false", "train.epochs=2",
                            "train.eval_interval=1", "runtime.mode=pynative")  # fmt: skip
    state = TrainState(epochs=2, steps_per_epoch=1, total_batch=8)
    metrics = {"mAP": 0.25, "mAP50": 0.5}
    cbs = build_callbacks(cfg, plan, rt, state, parts(lambda epoch: metrics))
    checkpoint = next(cb for cb in cbs if type(cb).__name__ == "CheckpointCallback")
    checkpoint.train_cell = Weights()
    seen = []  # what was on disk when each epoch-end line was logged
    caplog.set_level(logging.INFO, logger="train")
    handler = logging.Handler()
    handler.emit = lambda record: seen.append(
        (record.getMessage(), sorted(os.listdir(tmp_path / "checkpoints")))
    )
    logging.getLogger("train").addHandler(handler)
    try:
        state.reset_epoch(1)
        state.sums.update(total=6.0, num_fg=20.0)
        state.steps = 1
        ctx = SimpleNamespace(original_args=lambda: SimpleNamespace(cur_epoch_num=1))
        for cb in cbs:  # the epoch-end work of the callbacks that need no network
            if type(cb).__module__.endswith((".console", ".records", ".evaluation")):
                cb.on_train_epoch_end(ctx)
    finally:
        logging.getLogger("train").removeHandler(handler)
    line = [(msg, files) for msg, files in seen if msg.startswith("epoch 1/2  loss 6.000")]
    assert len(line) == 1, seen
    assert line[0][1] == ["best.ckpt", "epoch_0001.ckpt", "last.ckpt"]
    assert line[0][0].endswith("mAP 0.250 mAP50 0.500")
    assert (tmp_path / "results.csv").is_file()
