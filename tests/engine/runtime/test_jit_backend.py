"""The jit level and backend msdet gives each graph, per chip, loop and launch
(``engine.runtime.ascend.graph_backends``), and that each loop really passes them to
MindSpore: ``mindspore.jit`` left without a backend sends the 910A's graphs to GE whatever
the jit level (BackendJitConfig::ParseBackendJitConfig, MindSpore 2.7-2.10)."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from msdet.engine.runtime import ascend
from msdet.engine.runtime.process import setup_runtime
from msdet.engine.runtime.standin import StandInAscend
from tests.support import ROOT

A910 = ascend.chip_profile("ascend910", True, False, None, True)
A910B = ascend.chip_profile("ascend910b", False, True, None, False)


def test_model_train_takes_the_global_level_the_chip_default_or_the_configured_one():
    assert ascend.SOC_JIT_O2_DEFAULT == "jit_level_o2_default_ascend_jit"
    assert ascend.graph_backends("model", A910, None)["train"].runs == "GE graph sink"
    assert ascend.graph_backends("model", A910B, None)["train"].runs == "kernel by kernel"
    o0 = ascend.graph_backends("model", A910, "O0")["train"]
    assert (o0.jit_level, o0.backend, o0.why) == ("O0", "ms_backend", ascend.WHY_GLOBAL)
    assert ascend.graph_backends("model", None, "O1")["eval"].describe() == (
        "jit level O1, kernel by kernel")  # fmt: skip
    # the feature, not the chip's other answers, decides the default
    assert ascend.chip_profile("ascend910", True, False, None, False).default_jit_level == "O0"


def test_the_jit_loop_names_ms_backend_on_every_chip_and_has_no_o2():
    for chip in (A910, A910B, None):
        for kind, backend in ascend.graph_backends("jit", chip, None).items():
            assert (backend.jit_level, backend.backend) == ("O0", "ms_backend"), kind
    assert ascend.graph_backends("jit", A910, "O1")["sink"].jit_level == "O1"
    with pytest.raises(ValueError, match="runtime.jit_level=O2 .* goes with runtime.loop=model"):
        ascend.graph_backends("jit", A910, "O2")
    with pytest.raises(ValueError, match="runtime.jit_level must be one of"):
        ascend.graph_backends("model", A910, "O3")


def test_a_rank_table_compiles_every_graph_at_o2():
    model = ascend.graph_backends("model", A910B, None, rank_table=True)["train"]
    assert (model.jit_level, model.backend, model.why) == ("O2", "GE", ascend.WHY_RANK_TABLE)
    jit = ascend.graph_backends("jit", A910B, None, rank_table=True)["train"]
    assert (jit.backend, jit.runs) == ("ms_backend", "ms_backend, whole graph")
    # not on a CPU: no rank tables there
    assert ascend.graph_backends("model", None, None, rank_table=True)["train"].jit_level == "O0"


@pytest.mark.parametrize(("soc", "level"), [("ascend910", "O2"), ("ascend910b", "O0")])
def test_setup_sets_the_global_level_explicitly_and_logs_it(monkeypatch, caplog, soc, level):
    monkeypatch.delenv("RANK_TABLE_FILE", raising=False)
    cfg = OmegaConf.merge(OmegaConf.load(f"{ROOT}/configs/runtime/auto.yaml"),
                          {"device": "Ascend", "cpu_kernels": "native"})  # fmt: skip
    with StandInAscend(soc) as card, caplog.at_level("INFO"):
        rt = setup_runtime(cfg, ".")
    assert [c["jit_config"] for c in card.called("set_context")] == [{"jit_level": level}]
    assert rt.graphs == ascend.graph_backends("model", rt.chip_profile, None)["eval"]
    assert f"graphs in graph mode: {rt.graphs.describe()}" in caplog.text
    monkeypatch.setenv("RANK_TABLE_FILE", "/cluster/rank_table.json")
    with StandInAscend("ascend910b") as card:
        assert setup_runtime(cfg, ".").rank_table
    assert [c["jit_config"] for c in card.called("set_context")] == [{"jit_level": "O2"}]


def test_the_jit_loop_passes_its_backend_to_every_mindspore_jit_graph(monkeypatch):
    """The step, the evaluation's cells and the data sink: each given ms_backend and its
    level, on the 910A too (before, mindspore.jit got no backend: GE on the 910A)."""
    import mindspore as ms
    from mindspore import nn

    from msdet.engine.training import jit_loop

    calls = []
    monkeypatch.setattr(ms, "jit", lambda fn, **kw: calls.append(("jit", kw)) or fn)
    monkeypatch.setattr(ms, "data_sink", lambda fn, data, **kw: calls.append(("sink", kw)))
    backends = ascend.graph_backends("jit", A910, None)
    jit_loop.compiled_step(nn.Dense(2, 2), backends["train"])
    jit_loop.jit_compiled_cell(nn.Dense(2, 2), backends["eval"])
    jit_loop.device_sink(nn.Dense(2, 2), None, 4, backends["sink"])
    assert calls[0] == calls[1] == ("jit", {"jit_level": "O0", "backend": "ms_backend"})
    config = calls[2][1]["jit_config"].jit_config_dict
    assert (config["jit_level"], config["backend"]) == ("O0", "ms_backend")
