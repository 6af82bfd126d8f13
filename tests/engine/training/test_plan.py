"""engine.training.plan: every decision of a training run and every refusal of settings that
cannot run together, as pure functions of the config, the runtime and the data's summary (no
network, no dataset, no MindSpore)."""

from __future__ import annotations

import functools
import sys
from types import SimpleNamespace

import pytest

from msdet.common.config import load_config
from msdet.engine.runtime import ascend
from msdet.engine.runtime.process import Runtime
from msdet.engine.training.plan import (
    DataSummary,
    Loop,
    PlanError,
    StartKind,
    evaluation_epochs,
    multiscale_settings,
    plan_run,
    sink_plan,
)

DATA = DataSummary("shapes", 2000, 200, ("disc", "rectangle", "triangle"))
CPU = Runtime(device="CPU", mode="graph", amp_level="O0", sink=True, sink_size=-1)
A910 = ascend.chip_profile("ascend910", True, False, None, True)
A910B = ascend.chip_profile("ascend910b", False, True, None, False)


def ascend_rt(chip=A910B, **kw) -> Runtime:
    values = {"device": "Ascend", "mode": "graph", "amp_level": "O2", "sink": True,
              "sink_size": -1, "chip": chip.soc, "chip_profile": chip, "host_nms": chip.host_nms,
              **kw}  # fmt: skip
    return Runtime(**values)


@functools.cache
def config(overrides: tuple[str, ...]):
    """The train config of ``overrides`` (composed once: the plan only reads it)."""
    return load_config("train", list(overrides))


def plan(*overrides: str, rt: Runtime = CPU, data: DataSummary = DATA, env=None, resume=None):
    return plan_run(config(overrides), rt, data, resume, environ=env or {})


def test_planning_loads_no_mindspore():
    """The plan is decided before anything is built: importing it loads no MindSpore (the
    test process may have it already; a fresh interpreter shows it)."""
    import subprocess

    code = "import sys, msdet.engine.training.plan; print('mindspore' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.stdout.strip() == "False", out.stderr[-2000:]


def test_the_default_run_is_planned_from_the_config_and_the_data():
    p = plan()
    assert (p.model, p.loop, p.mode) == ("yolox_nano", Loop.MODEL, "graph")
    assert p.input_size == (256, 256) and p.eval_size == (320, 320)
    assert p.schedule.steps_per_epoch == 2000 // 8 and p.epochs == 7
    assert (p.sink, p.steps_per_sink, p.sinks_per_epoch) == (False, 250, 1)
    assert p.sizes == ((256, 256),) and p.buckets == () and not p.compile_all_first
    assert p.eval_epochs == (2, 4, 6, 7)  # every 2, the no-aug epochs (6, 7), the last
    assert p.start.kind is StartKind.SCRATCH
    assert p.backends["train"].describe() == "jit level O0, kernel by kernel"
    lines = p.describe()
    assert lines[0].startswith("training yolox_nano at 256x256 (evaluated at 320x320): 7 epochs")
    assert "every graph at jit level O0, kernel by kernel" in lines[1]
    assert lines[2] == "evaluation after epochs 2, 4, 6-7"


@pytest.mark.parametrize(
    ("overrides", "header"),
    [
        ([], "training yolox_nano at 256x256 (evaluated at 320x320): "),
        (["train=parity"], "training yolox_nano at 320x320: "),
        (["data.img_size=416"], "training yolox_nano at 320x320 (evaluated at 416x416): "),
        (["eval.img_size=[288,352]"], "training yolox_nano at 256x256 (evaluated at 288x352): "),
    ],
)
def test_the_header_shows_the_resolved_sizes(overrides, header):
    assert plan(*overrides).describe()[0].startswith(header)


def test_evaluation_epochs_follow_the_interval_the_no_aug_epochs_and_the_end():
    assert evaluation_epochs(10, 5, 0) == (5, 10)
    assert evaluation_epochs(10, 4, 2) == (4, 8, 9, 10)  # 3 epochs without mosaic, as YOLOX
    assert evaluation_epochs(3, 10, 0) == (3,)
    assert plan("train.eval_interval=3", "train.epochs=9", "train.no_aug_epochs=0").evaluates(6)


def test_the_loop_string_is_read_once_and_refused_when_unknown():
    assert plan("runtime.loop=jit").loop is Loop.JIT and plan("runtime.loop=jit").mode == "pynative"
    with pytest.raises(PlanError, match=r"runtime.loop must be one of \['model', 'jit'\]"):
        Loop.parse("eager")


def test_the_jit_loop_refuses_pynative_debugging_and_jit_level_o2():
    with pytest.raises(PlanError, match="goes with runtime.loop=model only"):
        plan("runtime.loop=jit", "runtime.mode=pynative")
    with pytest.raises(ValueError, match="runtime.jit_level=O2 .* goes with runtime.loop=model"):
        plan("runtime.loop=jit", "runtime.jit_level=O2")
    assert plan("runtime.mode=pynative").mode == "pynative"  # Model.train's debugging mode


@pytest.mark.parametrize(
    ("chip", "loop", "rank_table", "expected"),
    [
        (A910, "model", False, ("O2", "GE", "GE graph sink")),
        (A910, "jit", False, ("O0", "ms_backend", "kernel by kernel")),
        (A910B, "model", False, ("O0", "ms_backend", "kernel by kernel")),
        (A910B, "jit", False, ("O0", "ms_backend", "kernel by kernel")),
        (A910B, "model", True, ("O2", "GE", "GE graph sink")),
        (A910B, "jit", True, ("O0", "ms_backend", "ms_backend, whole graph")),
        (None, "model", False, ("O0", "ms_backend", "kernel by kernel")),
    ],
)
def test_each_graph_gets_its_backend_per_chip_loop_and_launch(chip, loop, rank_table, expected):
    """What msdet sets (mindspore.jit's empty backend would send the 910A's jit-loop graphs
    to GE: engine.runtime.ascend.graph_backends)."""
    rt = CPU if chip is None else ascend_rt(chip, sink=False)
    env = {"RANK_TABLE_FILE": "/cluster/rank_table.json"} if rank_table else {}
    backends = plan(f"runtime.loop={loop}", rt=rt, env=env).backends
    assert set(backends) == {"train", "sink", "eval"}
    for b in backends.values():
        assert (b.jit_level, b.backend, b.runs) == expected


def test_sinking_is_planned_per_sink_and_refused_where_it_cannot_work():
    """Sinks follow runtime.sink_size; profiling takes one step per sink; a sink holds one
    input shape, so multi-scale under the jit loop's sink and target buckets are refused."""
    a2 = ascend_rt()
    assert sink_plan(a2, 100) == (100, 1)
    assert sink_plan(a2, 100, profiling=True) == (1, 100)
    assert sink_plan(ascend_rt(sink_size=25), 100) == (25, 4)
    assert sink_plan(CPU, 100, profiling=True) == (100, 1)  # no real sink on CPU
    with pytest.raises(PlanError, match="runtime.sink_size=30 must be -1 or divide"):
        sink_plan(ascend_rt(sink_size=30), 100)
    assert sink_plan(a2, 1848, Loop.MODEL, (5, 10)) == (2, 924)  # one size window per sink
    with pytest.raises(PlanError, match="mindspore.data_sink.*holds one input shape"):
        plan("runtime.loop=jit", "train.multiscale_range=5", rt=a2)
    with pytest.raises(PlanError, match=r"data.target_buckets=\[16, 32\] needs runtime.sink=false"):
        plan("data.target_buckets=[16,32]", rt=a2)
    p = plan(rt=a2)
    assert p.sink and p.sink_calls == p.calls_per_sink == 250


def test_target_buckets_are_bounded_with_multiscale_and_compiled_first_on_several_ranks():
    assert plan("data.target_buckets=[16,32]").buckets == (16, 32, 50)  # data.max_objects last
    assert plan("data.target_buckets=[16,32]", "train.multiscale_range=5").training_graphs == 33
    with pytest.raises(PlanError, match="train.multiscale_range.*data.target_buckets"):
        plan("data.max_objects=120", "data.target_buckets=[8,16,32,48,64,96]",
             "train.multiscale_range=5")  # fmt: skip
    with pytest.raises(PlanError, match="data.target_buckets holds 64: each bucket must be in"):
        plan("data.target_buckets=[16,64]")
    eight = ascend_rt(sink=False, world_size=8)
    assert plan("data.target_buckets=[16,32]", rt=eight).compile_all_first
    assert not plan("data.target_buckets=[16,32]").compile_all_first
    assert plan(env={"MS_COMPILER_CACHE_ENABLE": "1"}).compile_all_first  # graphs by order


def test_multiscale_sizes_are_every_size_the_draw_can_give():
    p = plan("train=parity", "train.multiscale_range=2")
    assert p.sizes == ((256, 256), (288, 288), (320, 320), (352, 352), (384, 384))
    assert "multi-scale: 5 sizes (256-384 px), a new one every 10 steps" in p.describe()
    with pytest.raises(PlanError, match="train.multiscale_interval must be >= 1"):
        multiscale_settings(SimpleNamespace(multiscale_range=2, get=lambda k, d: 0))


def test_early_stopping_and_the_time_limit_are_refused_with_several_ranks():
    two = Runtime(device="CPU", mode="graph", amp_level="O0", sink=False, sink_size=-1,
                  world_size=2)  # fmt: skip
    with pytest.raises(PlanError, match="train.patience=3 with 2 ranks.*set train.patience=0"):
        plan("train.patience=3", rt=two)
    with pytest.raises(PlanError, match="train.time_limit_min=5 with 2 ranks"):
        plan("train.time_limit_min=5", rt=two)
    one = plan("train.patience=3", "train.time_limit_min=5")
    assert (one.patience, one.time_limit_min) == (3, 5.0)


def test_the_start_is_scratch_pretrained_resumed_or_finished(monkeypatch):
    import numpy as np

    from msdet.engine.training import resume as resume_module

    assert plan().start.kind is StartKind.SCRATCH
    started = plan("train.pretrained=yolox_nano").start
    assert (started.kind, started.pretrained) == (StartKind.PRETRAINED, "yolox_nano")
    monkeypatch.setattr(resume_module, "check_resume_fits", lambda *a: [])

    def checkpoint(epoch):
        value = SimpleNamespace(asnumpy=lambda: np.array(epoch))
        return SimpleNamespace(path="last.ckpt", params={"msdet_epoch": value}, description=None)

    half = plan("train.resume=auto", resume=checkpoint(3)).start
    assert (half.kind, half.epoch, half.resume) == (StartKind.RESUME, 3, "last.ckpt")
    assert plan("train.resume=auto", resume=checkpoint(7)).finished
    with pytest.raises(ValueError, match="has trained 9 epochs already"):
        plan("train.resume=auto", resume=checkpoint(9))


def test_too_few_images_for_a_batch_is_refused():
    with pytest.raises(ValueError, match="7 images are fewer than one batch of 8 per rank"):
        plan(data=DataSummary("tiny", 7, 2, ("a",)))


def test_a_class_count_unlike_the_datasets_is_an_error_naming_both():
    assert plan("model.num_classes=3").schedule.epochs == 7
    with pytest.raises(PlanError, match=r"model.num_classes=80 but the dataset shapes has 3"):
        plan("model.num_classes=80")


def test_only_the_own_data_defaults_weights_may_be_missing(tmp_path):
    """The own-data recipe's train.pretrained=auto starts from scratch when the weights
    cannot be had; a typed train.pretrained never does (fine_tuning.resolve_start)."""
    own = plan(f"data={tmp_path}").start
    assert (own.kind, own.pretrained, own.optional) == (StartKind.PRETRAINED, "auto", True)
    typed = plan(f"data={tmp_path}", "train.pretrained=auto").start
    assert (typed.pretrained, typed.optional) == ("auto", False)
    assert not plan("train=yolox").start.optional


def test_the_trackers_are_planned_in_the_order_given_and_each_one_installed():
    from msdet.engine.training.plan import trackers

    assert plan().trackers == ()
    both = load_config("train", ["train.track=swanlab,mlflow"]).train
    assert trackers(both, installed=lambda name: True) == ("swanlab", "mlflow")
    with pytest.raises(PlanError) as err:
        trackers(both, installed=lambda name: name != "swanlab")
    assert str(err.value) == (
        "train.track=swanlab,mlflow: swanlab is not installed here: pip install "
        "'swanlab<0.6.5' (later releases need protobuf<7, which MindSpore 2.10 cannot load), "
        "or pip install 'msdet[tracking]'; or leave swanlab out of train.track"
    )
