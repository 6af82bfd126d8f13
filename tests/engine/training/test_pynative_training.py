"""``runtime.mode=pynative`` (op by op, for debugging) computes what graph mode computes: the
same tiny train.py run in both modes gives the same losses step by step and the same run
folder. ``runtime.loop=jit`` (msdet's loop, PyNative mode, the step compiled by
``mindspore.jit``) gives the same losses as ``Model.train`` bit for bit over 20 steps, the
same checkpoints and records, and a checkpoint of either loop resumes on the other."""

from __future__ import annotations

import json
import math
import os
import re
from pathlib import Path

import mindspore as ms
import numpy as np
import pytest

from tests.support.tiny_run import NO_AUG, read_results, run_entry

pytestmark = pytest.mark.slow  # two whole training runs: full suite only

TINY_RUN = [
    "runtime=cpu",
    "runtime.cpu_kernels=native",  # the same operators in both modes
    "data.num_train=12",
    "data.num_val=4",
    "data.img_size=[64,64]",
    "eval.img_size=[64,64]",
    "train.img_scale=1",
    "eval.batch_size=4",
    "train.batch_size=4",
    "train.epochs=1",
    "train.warmup_epochs=1",
    "train.no_aug_epochs=0",
    "train.log_interval=1",
    "train.tensorboard=false",
    *NO_AUG,
]
# Measured (AMD EPYC, MindSpore 2.10): all three losses equal to the 7 digits LossMonitor
# prints (10.237957, 10.54364, 10.340787): on CPU both modes run the same kernels. A graph
# compiler that fuses or reorders (another backend, another MindSpore) changes float32
# rounding, ~1e-7 relative per loss; once the weights moved, SimOTA's discrete assignment can
# amplify that (docs/porting.md "Reproducibility"), hence the looser bound after step 1. A
# real difference between the modes, e.g. another learning rate, moves the second loss by
# about the first update's effect (3% here).
FIRST_RTOL, LATER_RTOL = 1e-5, 1e-3


def step_losses(log: str) -> list[float]:
    """The per-step losses LossMonitor wrote into the log file (train.log_interval=1)."""
    return [float(v) for v in re.findall(r"  step \d+/\d+  loss ([-\d.eE+]+)", log)]


def run_files(run_dir) -> set[str]:
    skip = {"graphs", "rewritten_network"}
    return {
        str(p.relative_to(run_dir))
        for p in Path(run_dir).rglob("*")
        if p.is_file() and not skip & set(p.relative_to(run_dir).parts)
    }


@pytest.mark.long(65)
def test_pynative_run_equals_the_graph_run_step_by_step(tmp_path):
    runs, losses = {}, {}
    for mode in ("graph", "pynative"):
        run_dir = tmp_path / mode
        out = run_entry(
            "train.py", run_dir, tmp_path / "cache", *TINY_RUN, f"runtime.mode={mode}", tiny=False
        )
        assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
        assert f"{mode} mode" in Path(run_dir, "train.log").read_text()
        runs[mode], losses[mode] = run_dir, step_losses(Path(run_dir, "train.log").read_text())
    graph, pynative = losses["graph"], losses["pynative"]
    assert len(graph) == len(pynative) == 3, (graph, pynative)
    assert abs(graph[0] - pynative[0]) <= FIRST_RTOL * abs(graph[0]), (graph, pynative)
    for g, p in zip(graph[1:], pynative[1:]):
        assert abs(g - p) <= LATER_RTOL * abs(g), (graph, pynative)
    # The same run folder, and the same epoch figures in it.
    assert run_files(runs["graph"]) == run_files(runs["pynative"])
    assert os.path.isfile(runs["pynative"] / "checkpoints" / "last.ckpt")
    (g_row,), (p_row,) = read_results(runs["graph"]), read_results(runs["pynative"])
    for key in ("loss_total", "loss_iou", "loss_obj", "loss_cls", "num_fg"):
        assert abs(g_row[key] - p_row[key]) <= LATER_RTOL * abs(g_row[key]), key


# 4 epochs x 5 steps, 64 px, warm-up in epoch 1, then the epochs without augmentation from
# epoch 2: the L1 loss switched on by the host between steps (the compiled step must see
# it), an evaluation after each of them.
LOOP_RUN = [
    "runtime=cpu",
    "runtime.cpu_kernels=native",
    "model.depthwise=false",  # compiles ~25% faster
    "data.num_train=10",
    "data.num_val=5",
    "data.img_size=[64,64]",
    "eval.img_size=[64,64]",
    "eval.conf_thresh=0",  # a barely trained model: keep every candidate
    "eval.batch_size=5",
    "train.img_scale=1",
    "train.batch_size=2",
    "train.epochs=4",
    "train.warmup_epochs=1",
    "train.no_aug_epochs=2",  # YOLOX's count: epochs 2-4
    "train.eval_interval=100",
    "train.log_interval=1",
    "train.tensorboard=false",
    *NO_AUG,
]
# Written by the clock, not by the training: left out of the comparisons.
TIMED = ("images_per_s", "epoch_s", "speed_ms")


def loop_run(run_dir, cache_dir, loop: str, *more: str) -> str:
    out = run_entry(
        "train.py", run_dir, cache_dir, *LOOP_RUN, f"runtime.loop={loop}", *more, tiny=False
    )
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    return out.stdout


def checkpoint(path) -> dict[str, np.ndarray]:
    """The tensors of a checkpoint (its description, a string holding the run's config,
    names the loop and differs)."""
    return {
        k: v.asnumpy() for k, v in ms.load_checkpoint(str(path)).items() if hasattr(v, "asnumpy")
    }


def assert_same_checkpoint(a, b) -> None:
    left, right = checkpoint(a), checkpoint(b)
    assert sorted(left) == sorted(right) and len(left) > 100
    for name, value in left.items():
        np.testing.assert_array_equal(right[name], value, err_msg=name)


def untimed(rows: list[dict]) -> list[dict]:
    """The rows without the clock's figures, NaN (no evaluation that epoch) as None."""
    return [
        {
            k: None if isinstance(v, float) and math.isnan(v) else v
            for k, v in row.items()
            if k not in TIMED
        }
        for row in rows
    ]


@pytest.fixture(scope="module")
def both_loops(tmp_path_factory):
    """The same 20-step run under each loop, then the jit loop resuming Model.train's epoch 2
    (the other way round follows: both loops write the same checkpoints, bit for bit)."""
    base = tmp_path_factory.mktemp("loops")
    cache = base / "cache"
    runs = {loop: base / loop for loop in ("model", "jit")}
    console = {loop: loop_run(runs[loop], cache, loop) for loop in runs}
    resumed = runs["model"] / "checkpoints" / "epoch_0002.ckpt"
    runs["resumed"] = base / "resumed"
    console["resumed"] = loop_run(runs["resumed"], cache, "jit", f"train.resume={resumed}")
    return runs, console


@pytest.mark.long(130)
def test_jit_loop_equals_model_train_step_by_step(both_loops):
    runs, console = both_loops
    model, jit = (step_losses((runs[loop] / "train.log").read_text()) for loop in ("model", "jit"))
    assert len(model) == 20 and model == jit  # as LossMonitor prints them: 7 digits
    assert "msdet's loop, the step compiled by mindspore.jit" in console["jit"]
    assert re.search(
        r"training graph for \d+ target rows compiled by mindspore.jit at step 1 ", console["jit"]
    )
    # The run folder and what is in it: records, evaluation, every checkpoint's every value.
    assert run_files(runs["model"]) == run_files(runs["jit"])
    assert untimed(read_results(runs["model"])) == untimed(read_results(runs["jit"]))
    metrics = [json.loads((runs[k] / "metrics.json").read_text()) for k in ("model", "jit")]
    assert untimed(metrics[:1]) == untimed(metrics[1:]) and metrics[0]["images"] == 5
    for name in ("epoch_0002.ckpt", "last.ckpt", "best.ckpt"):
        assert_same_checkpoint(
            runs["model"] / "checkpoints" / name, runs["jit"] / "checkpoints" / name
        )
    # The L1 loss switched on for epoch 2 under both loops.
    rows = read_results(runs["jit"])
    assert [row["loss_l1"] > 0.0 for row in rows] == [False, True, True, True]


def test_a_model_train_checkpoint_resumes_on_the_jit_loop(both_loops):
    """Epochs 3-4 on the jit loop from Model.train's epoch-2 checkpoint are the
    uninterrupted run's: the same losses, the same final checkpoint."""
    runs, console = both_loops
    resumed = step_losses((runs["resumed"] / "train.log").read_text())
    model = step_losses((runs["model"] / "train.log").read_text())
    assert resumed == model[10:] and len(resumed) == 10
    assert "resumed from" in console["resumed"] + (runs["resumed"] / "train.log").read_text()
    assert_same_checkpoint(
        runs["model"] / "checkpoints" / "last.ckpt", runs["resumed"] / "checkpoints" / "last.ckpt"
    )
