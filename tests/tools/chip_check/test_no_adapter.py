"""A mapped primitive that MindSpore's sources give no way to compile on GE (no adapter, no
fallback expander: "may not compile") fails unless a waiver accepts it with a reason."""

from __future__ import annotations

from msdet.tools.chip_check.cann_tables import load_tables
from msdet.tools.chip_check.mapping import load_mapping
from msdet.tools.chip_check.verdict import FAILING, Row, judge

TABLES, MAPPING = load_tables(), load_mapping()


def divs(waivers=None):
    row = Row("train", "Divs", ["float32", "scalar:float32"], [[8, 4], None], 2)
    return judge(row, "ascend910", "allow_fp32_to_fp16", TABLES, MAPPING, waivers=waivers)


def test_a_primitive_without_ge_adapter_or_fallback_fails():
    assert MAPPING["map"]["Divs"]["cann_op"] is None
    found = divs()
    assert found.verdict == "unverified" and found.verdict in FAILING
    assert "no GE adapter and no GE fallback" in found.reason


def test_it_passes_only_when_waived_with_a_reason():
    found = divs([{"prim": "Divs", "reason": "compiled on a 910A by the self-test"}])
    assert found.verdict == "waived" and "compiled on a 910A" in found.reason
    assert any(note.startswith("unverified: no GE adapter") for note in found.notes)
