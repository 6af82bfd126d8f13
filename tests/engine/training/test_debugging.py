"""Debugging aids behind runtime switches, each writing into the run folder.

One tiny graph-mode run (64 px, 2 epochs x 4 steps) has them all on: ``runtime.save_graphs``
(IR in <run>/graphs), ``runtime.profile_steps=2`` (profile in <run>/profiler, top operators
printed), and a weight poisoned with NaN at epoch 2, step 2 (tests/engine/training/nan_entry.py):
the non-finite check must stop the run with exit status 1, name the loss term and the
parameter, and keep epoch 1's checkpoint. A failed graph compile is checked in-process.
"""

from __future__ import annotations

import glob
import os
from pathlib import Path

import mindspore as ms
import numpy as np
import pytest
from mindspore import nn, ops

from msdet.engine.runtime.compiler import collect_compile_failure
from msdet.engine.training.callbacks.base import TrainState
from msdet.engine.training.callbacks.monitoring import StepStats
from msdet.engine.training.step_stats import StepStatistics
from tests.support.tiny_run import run_entry

POISONED = "head.obj_preds.0.bias"
DEBUG_RUN = [
    "runtime=cpu",
    "data.num_train=16",
    "data.num_val=4",
    "data.img_size=[64,64]",
    "eval.img_size=[64,64]",
    "train.img_scale=1",
    "train.batch_size=4",
    "train.max_steps_per_epoch=4",
    "train.epochs=2",
    "train.warmup_epochs=1",
    "train.no_aug_epochs=0",
    "train.tensorboard=false",
    "runtime.save_graphs=true",
    "runtime.profile_steps=2",
]


@pytest.fixture(scope="module")
def debug_run(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("debug_run")
    cache = tmp_path_factory.mktemp("cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MSDET_TEST_POISON", f"{POISONED}@6")  # global step 6 = epoch 2, step 2
        out = run_entry(
            "tests/engine/training/nan_entry.py",
            run_dir,
            cache,
            *DEBUG_RUN,
            tiny=False,
            timeout=600,
        )
    return run_dir, out


@pytest.mark.slow  # a whole training run or network compile: full suite only
def test_nan_stops_the_run_naming_term_and_parameter(debug_run):
    run_dir, out = debug_run
    assert out.returncode == 1, out.stdout[-2000:] + out.stderr[-2000:]
    log = Path(run_dir, "train.log").read_text()
    assert "training stopped: non-finite loss at epoch 2, step 2: total=nan, obj=nan;" in log
    # The step with the NaN loss updated nothing: only the poisoned weight is non-finite.
    assert f"first non-finite parameter: {POISONED}." in log
    # Epoch 1 was saved; the failing epoch 2 was not.
    assert sorted(os.listdir(Path(run_dir, "checkpoints"))) == ["epoch_0001.ckpt", "last.ckpt"]
    last = ms.load_checkpoint(str(Path(run_dir, "checkpoints", "last.ckpt")))
    assert int(last["msdet_epoch"].asnumpy()) == 1
    weights = [v.asnumpy() for k, v in last.items() if not k.startswith("msdet_")]
    assert len(weights) > 600 and all(np.isfinite(w).all() for w in weights)


@pytest.mark.slow
def test_graph_ir_lands_in_the_run_folder(debug_run):
    run_dir, _ = debug_run
    graphs = os.listdir(Path(run_dir, "graphs"))
    assert any(f.startswith("01_type_inference") and f.endswith(".ir") for f in graphs)
    assert any("validate" in f for f in graphs) and any("graph_build" in f for f in graphs)
    # Only the selected stages (runtime.IR_PASSES_VALUE), not one file per compiler pass.
    assert not any(f.startswith("opt_pass_") for f in graphs)
    size = sum(p.stat().st_size for p in Path(run_dir, "graphs").rglob("*") if p.is_file())
    assert size < 400e6


@pytest.mark.slow
def test_profiler_writes_the_run_folder_and_prints_top_operators(debug_run):
    run_dir, out = debug_run
    stats = glob.glob(
        str(Path(run_dir, "profiler", "**", "cpu_op_type_info_*.csv")), recursive=True
    )
    assert len(stats) == 1
    assert "Top operators by time" in out.stdout
    lines = out.stdout.split("Top operators by time", 1)[1].splitlines()[2:17]
    table = [line.split() for line in lines if line.strip().endswith("%")]
    names = [row[0] for row in table]
    times = [float(row[1]) for row in table]
    # Which operator leads depends on the image size and the depthwise kernel in use (at
    # 64 px the per-parameter EMA and SGD updates rival the convolutions), so the check is
    # that the table is the profile's: a conv net's forward and backward convolutions are
    # in it, ordered by time, with shares that add up to at most the whole.
    assert {"Conv2D", "Conv2DBackpropFilter", "Conv2DBackpropInput"} <= set(names), names
    assert times == sorted(times, reverse=True) and times[0] > 0
    # Each share is printed to 0.1%: at most 0.05 over per row (measured sum 94.8 of 15).
    assert sum(float(row[2].rstrip("%")) for row in table) <= 100 + 0.05 * len(table)
    assert "will be deprecated" not in out.stdout + out.stderr  # the current profiler API


class _BrokenShapes(nn.Cell):
    def construct(self, x):
        return x + ops.ones((3, 5), ms.float32)  # [2, 4] + [3, 5]: no broadcast


@pytest.mark.slow
def test_failed_compile_analysis_is_moved_into_the_run_folder(tmp_path, monkeypatch):
    """MindSpore writes analyze_fail.ir into ./rank_0/om/ (the working directory), even
    with MS_DEV_SAVE_GRAPHS_PATH set; the trainer moves it into the run folder."""
    work, run_dir = tmp_path / "cwd", tmp_path / "run"
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.setenv("MS_DEV_SAVE_GRAPHS_PATH", str(tmp_path / "graphs"))
    started = os.path.getmtime(work) - 1
    with pytest.raises(ValueError, match="broadcast"):
        _BrokenShapes()(ms.Tensor(np.ones((2, 4), np.float32)))
    assert (work / "rank_0" / "om" / "analyze_fail.ir").is_file()
    moved = collect_compile_failure(str(run_dir), started)
    assert moved == str(run_dir / "analyze_fail.ir")
    assert "Add" in Path(moved).read_text()
    assert not (work / "rank_0" / "om" / "analyze_fail.ir").exists()
    assert collect_compile_failure(str(run_dir), started) is None


class _FakeRunContext:
    def __init__(self, outputs):
        self.stopped = False
        self.args = type("CbParams", (), {"net_outputs": outputs, "cur_step_num": 3})()

    def original_args(self):
        return self.args

    def request_stop(self):
        self.stopped = True


@pytest.mark.slow
def test_nonfinite_loss_with_finite_weights_points_at_the_forward_pass():
    """Huge (finite) weights that overflow the forward pass: no parameter is non-finite,
    so the message names the largest one, the usual sign of a too high learning rate."""
    net = nn.Dense(2, 2)
    net.weight.set_data(ms.Tensor(np.full((2, 2), 3e30, np.float32)))
    state = TrainState(epochs=1, steps_per_epoch=4, total_batch=2)
    recorded = StepStatistics()
    stats = StepStats(state, recorded, net, check_finite=True, dynamic_scale=False)
    stats.begin_epoch(1, None)
    inf = float("inf")
    losses = tuple(ms.Tensor(np.float32(v)) for v in (inf, 1.0, 1.0, inf, 0.0, 3.0))
    recorded(losses, ms.Tensor(True))  # the training step recorded a skipped step
    ctx = _FakeRunContext([inf, 1.0, 1.0, inf, 0.0, 3.0, 0.01, 1.0, True])
    stats.on_train_step_end(ctx)
    assert ctx.stopped
    assert "non-finite loss at epoch 1, step 3: total=inf, cls=inf;" in state.failure
    assert "none (the forward pass produced it; largest |weight| 3e+30 in weight)" in state.failure
