"""msdet's device-side set-up executed on CPU against a stood-in Ascend chip
(``engine.runtime.standin``), under the installed MindSpore release: CI runs this file under
2.7, 2.8, 2.9 (dev/check_mindspore.sh) and 2.10 (the suite)."""

from __future__ import annotations

import logging

import pytest
from omegaconf import OmegaConf

from msdet.engine.runtime import ascend
from msdet.engine.runtime.mindspore_compat import installed_version, parse_version
from msdet.engine.runtime.process import setup_runtime
from msdet.engine.runtime.standin import SOC_FEATURES, StandInAscend, ascend_plugin_binds
from tests.support import ROOT

# What msdet sets up on each chip: (cube float32, float-status register, host NMS, NMS boxes
# per call, Model.train's jit level, how MindSpore runs it).
EXPECTED = {
    "ascend910": (False, True, True, 2864, "O2", "GE graph sink"),
    "ascend910b": (True, False, False, 2048, "O0", "kernel by kernel"),
    "ascend910_93": (True, False, False, 2048, "O0", "kernel by kernel"),
    "ascend310p": (False, False, True, 2864, "O0", "kernel by kernel"),
}


def runtime_cfg(**overrides):
    cfg = OmegaConf.load(f"{ROOT}/configs/runtime/auto.yaml")
    return OmegaConf.merge(cfg, {"device": "Ascend", "amp": "O2", "cpu_kernels": "native",
                                 **overrides})  # fmt: skip


@pytest.fixture(autouse=True)
def _no_launcher(monkeypatch):
    for var in ("RANK_TABLE_FILE", "MS_ROLE", ascend.OVERFLOW_MODE_VAR):
        monkeypatch.delenv(var, raising=False)


@pytest.mark.parametrize("soc", sorted(EXPECTED))
def test_each_chip_is_told_apart_as_this_release_tells_it(soc):
    with StandInAscend(soc):
        chip = ascend.ascend_chip()
    assert chip.soc == soc
    cube, status, host_nms, boxes, level, _ = EXPECTED[soc]
    got = (chip.cube_fp32, chip.float_status, chip.host_nms, chip.nms_max_boxes)
    assert got == (cube, status, host_nms, boxes)
    assert chip.default_jit_level == level


@pytest.mark.parametrize("soc", sorted(EXPECTED))
def test_the_runtime_is_set_up_for_each_chip(soc, caplog):
    with StandInAscend(soc) as card, caplog.at_level(logging.INFO):
        rt = setup_runtime(runtime_cfg(), ".")
    cube, status, host_nms, boxes, level, backend = EXPECTED[soc]
    assert (rt.device, rt.chip, rt.cube_fp32, rt.float_status) == ("Ascend", soc, cube, status)
    assert (rt.host_nms, rt.nms_max_boxes) == (host_nms, boxes)
    assert (rt.jit_level, rt.backend) == (level, backend)
    assert rt.sink_effective and rt.amp_level == "O2" and rt.finite_check == "mindspore"
    assert card.called("set_device") == [{"arg0": "Ascend", "arg1": 0}]
    # the level is set explicitly, never left to a default that moves between releases
    levels = [c["jit_config"]["jit_level"] for c in card.called("set_context") if "jit_config" in c]
    assert levels == [level]
    assert card.called("precision_mode") == []  # auto: MindSpore's own default per chip
    assert f"Ascend chip {soc}" in caplog.text


def test_an_explicit_precision_mode_is_set_and_read_back(caplog):
    with StandInAscend("ascend910b") as card, caplog.at_level(logging.INFO):
        rt = setup_runtime(runtime_cfg(precision_mode="force_fp16"), ".")
    assert rt.precision_mode == "force_fp16"
    assert card.called("precision_mode") == [{"mode": "force_fp16"}]
    if ascend_plugin_binds("AscendOpPrecisionConf"):  # read back as the self-test does
        assert "operator precision mode: force_fp16" in caplog.text


@pytest.mark.parametrize(("loop", "parallel_context"), [("model", True), ("jit", False)])
def test_data_parallel_set_up_on_eight_cards(monkeypatch, loop, parallel_context):
    """The ranks are set up at start-up; the static-graph data-parallel context is
    Model.train's, set by its loop (the jit loop all-reduces in its step)."""
    from msdet.common.config import load_config
    from tests.support.training import training_loop

    monkeypatch.setenv("MS_ROLE", "MS_WORKER")
    cfg = load_config("train", [f"runtime.loop={loop}"])
    with StandInAscend("ascend910b", rank=3, world=8) as card:
        rt = setup_runtime(runtime_cfg(distributed=True, loop=loop), ".")
        assert card.called("set_auto_parallel_context") == []
        training_loop(cfg, rt)
    assert (rt.rank, rt.world_size, rt.distributed, rt.is_main) == (3, 8, True, False)
    assert len(card.called("init")) == 1
    contexts = card.called("set_auto_parallel_context")
    if parallel_context:
        assert contexts == [{"parallel_mode": "data_parallel", "gradients_mean": True,
                             "device_num": 8}]  # fmt: skip
    else:
        assert contexts == []
        assert card.called("set_context")[-1] == {"mode": 1}  # PyNative, for mindspore.jit


def test_nms_runs_where_the_chip_profile_and_the_probe_say(graph_mode):
    eval_cfg = OmegaConf.create({"pre_nms_topk": 1000, "conf_thresh": 0.01, "nms_iou": 0.65,
                                 "max_det": 100, "class_agnostic": False})  # fmt: skip
    answers = {}
    for soc in ("ascend910", "ascend910b"):
        with StandInAscend(soc):
            rt = setup_runtime(runtime_cfg(), ".")
        answers[soc] = ascend.nms_on_host(rt, eval_cfg, 80, (320, 320))
    # 910A: float16-only NMSWithMask, on the host by its profile; 910B: the probe ran
    # NMSWithMask (on this CPU) against the host's NMS and they agreed
    assert answers == {"ascend910": True, "ascend910b": False}


def test_a_stand_in_only_has_what_the_release_has():
    import mindspore._c_expression as c_expression

    real = {n for n in dir(c_expression.MSContext) if not n.startswith("__")}
    with StandInAscend("ascend910"):
        ctx = c_expression.MSContext.get_instance()
        stood = {n for n in dir(type(ctx)) if not n.startswith("__")}
        assert ctx.get_ascend_soc_version() == "ascend910"
        has_table = hasattr(ctx, "ascend_soc_supports_feature")
    assert stood == real
    # the feature table is 2.10's; 2.7-2.9 have none and tell the chips apart by name
    assert has_table == (parse_version(installed_version() or "0.0") >= (2, 10))
    assert c_expression.MSContext.get_instance().get_ascend_soc_version() != "ascend910"
    with pytest.raises(ValueError, match="no stand-in for"):
        StandInAscend("ascend999")
    assert set(EXPECTED) <= set(SOC_FEATURES)


@pytest.mark.parametrize("soc", sorted(SOC_FEATURES))
def test_each_releases_rule_gives_the_same_chip(soc):
    """2.7-2.9 tell chips apart by name, 2.10 by its feature table: the same answers."""
    import mindspore._c_expression as c_expression

    with StandInAscend(soc):
        ctx = c_expression.MSContext.get_instance()
        answers = {v: ascend.soc_features(ctx, v) for v in ("2.7.2", "2.8.0", "2.9.0")}
        if hasattr(ctx, "ascend_soc_supports_feature"):
            answers["2.10.0"] = ascend.soc_features(ctx, "2.10.0")
    older = {"ascend950": {"2.7.2", "2.8.0"}}.get(soc, set())  # A2 to 2.9's names only
    assert len({a for v, a in answers.items() if v not in older}) == 1
    assert answers["2.9.0"][0] == soc
