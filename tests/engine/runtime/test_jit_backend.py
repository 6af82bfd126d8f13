"""The jit level (and so the backend) msdet sets per Ascend chip: MindSpore 2.10's own
default for the chip, from its SoC query, set explicitly and logged."""

from __future__ import annotations

import logging

import pytest

from msdet.engine.runtime import ascend


class FakeMindSpore:
    """Records ``set_context`` calls."""

    def __init__(self):
        self.contexts = []

    def set_context(self, **kwargs):
        self.contexts.append(kwargs)


def test_mindspore_2_10s_soc_feature_decides_the_default_jit_level():
    assert ascend.SOC_JIT_O2_DEFAULT == "jit_level_o2_default_ascend_jit"
    classic = ascend.chip_profile("ascend910", True, False, None, True)
    a2 = ascend.chip_profile("ascend910b", False, True, None, False)
    assert (classic.default_jit_level, a2.default_jit_level) == ("O2", "O0")
    # the feature, not the chip's other answers, decides
    assert ascend.chip_profile("ascend910", True, False, None, False).default_jit_level == "O0"
    assert "jit level O2 (GE graph sink)" in classic.describe()
    assert "jit level O0 (kernel by kernel)" in a2.describe()


@pytest.mark.parametrize(
    ("soc", "answers", "level", "backend"),
    [("ascend910", (True, False, None, True), "O2", "GE graph sink"),
     ("ascend910b", (False, True, None, False), "O0", "kernel by kernel")],
)  # fmt: skip
def test_the_chips_level_is_set_explicitly_and_logged(monkeypatch, caplog, soc, answers, level,
                                                      backend):  # fmt: skip
    monkeypatch.delenv("RANK_TABLE_FILE", raising=False)
    ms = FakeMindSpore()
    chip = ascend.chip_profile(soc, *answers)
    with caplog.at_level(logging.INFO, logger="msdet.engine.runtime.ascend"):
        assert ascend.apply_jit_level(ms, None, chip) == (level, backend)
    assert ms.contexts == [{"jit_config": {"jit_level": level}}]
    assert f"jit level {level} on {soc}: {backend}, from MindSpore 2.10's default" in caplog.text


def test_a_configured_level_is_left_to_the_config_and_a_rank_table_forces_o2(monkeypatch, caplog):
    monkeypatch.delenv("RANK_TABLE_FILE", raising=False)
    ms = FakeMindSpore()
    chip = ascend.chip_profile("ascend910", True, False, None, True)
    assert ascend.apply_jit_level(ms, "O0", chip) == ("O0", "kernel by kernel")
    assert ms.contexts == []  # setup_runtime already set the configured level
    monkeypatch.setenv("RANK_TABLE_FILE", "/cluster/rank_table.json")
    a2 = ascend.chip_profile("ascend910b", False, True, None, False)
    with caplog.at_level(logging.INFO, logger="msdet.engine.runtime.ascend"):
        assert ascend.apply_jit_level(ms, None, a2) == ("O2", "GE graph sink")
    assert "rank-table launch" in caplog.text
