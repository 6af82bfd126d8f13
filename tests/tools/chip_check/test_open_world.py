"""The chip check in an open world: a primitive its mapping does not hold fails (exit 1)
unless a waiver accepts it with a reason; the mapping records its MindSpore sources."""

from __future__ import annotations

import json

import pytest

from msdet.tools.chip_check import __main__ as chip_check
from msdet.tools.chip_check import graphs
from msdet.tools.chip_check.cann_tables import load_tables
from msdet.tools.chip_check.mapping import load_mapping, load_waivers
from msdet.tools.chip_check.verdict import FAILING, Row, judge
from tests.support import run_python

TABLES = load_tables()
MAPPING = load_mapping()


def verdict(prim, chip="ascend910b", waivers=None, graph="train"):
    row = Row(graph, prim, ["float32"], [[2, 16]], 1)
    return judge(row, chip, "must_keep_origin_dtype", TABLES, MAPPING, waivers=waivers)


@pytest.mark.parametrize(
    ("prim", "ge_op"),
    [("ResizeNearestNeighbor", "ResizeNearestNeighborV2"), ("Sort", "Sort"), ("CumSum", "Cumsum")],
)
def test_a_primitive_outside_the_mapping_fails_and_names_its_ge_adapter(prim, ge_op):
    """The three primitives a review tried: once passed as 'unknown' with a false reason."""
    found = verdict(prim)
    assert found.verdict == "unmapped" and found.verdict in FAILING
    assert f"emit {ge_op} for it" in found.reason and "waivers.json" in found.reason


def test_a_primitive_without_any_adapter_is_said_to_have_none():
    found = verdict("NoSuchPrimitive")
    assert found.verdict == "unmapped"
    assert "register no GE adapter" in found.reason


def test_a_waiver_with_a_reason_accepts_a_finding_where_it_applies():
    waivers = [{"prim": "Sort", "reason": "checked on a 910B card", "chips": ["ascend910b"]}]
    waived = verdict("Sort", "ascend910b", waivers)
    assert waived.verdict == "waived" and waived.reason == "waived: checked on a 910B card"
    assert waived.verdict not in FAILING and waived.notes[0].startswith("unmapped: ")
    assert verdict("Sort", "ascend910", waivers).verdict == "unmapped"  # another chip


def test_a_waiver_needs_a_primitive_and_a_reason(tmp_path):
    path = tmp_path / "waivers.json"
    path.write_text(json.dumps({"waivers": [{"prim": "Sort", "reason": "  "}]}))
    with pytest.raises(ValueError, match=r"waivers\.json: waivers\[0\] \(Sort\): needs a 'reason'"):
        load_waivers(str(path))
    path.write_text(json.dumps({"waivers": [{"prim": "Sort", "reason": "r", "chip": ["a"]}]}))
    with pytest.raises(ValueError, match=r"unknown keys \['chip'\]"):
        load_waivers(str(path))
    assert [w["prim"] for w in load_waivers()] == ["LessScalar"]  # the bundled file


def test_the_mapping_records_its_mindspore_source_and_what_the_2_10_wheel_confirms():
    meta = MAPPING["_meta"]
    assert "MindSpore 2.7.0" in meta["mindspore_source"]
    assert "2.10" in meta["mindspore_source"] and "524 MB" in meta["mindspore_source"]
    assert meta["mindspore_wheel"].startswith("MindSpore 2.10.0 wheel")
    evidence = {name: entry["wheel_2_10"] for name, entry in MAPPING["map"].items()}
    assert evidence["Conv2D"] == {"ge_op_string": True}
    assert evidence["Minimum"] == {"ge_op_string": True, "aclnn_string": True}
    assert evidence["LessScalar"] == {"fallback_string": False}  # no GE fallback in 2.10
    assert len(MAPPING["adapters"]) > 900


def test_the_command_exits_1_on_an_injected_unknown_primitive(monkeypatch, tmp_path, capsys):
    rows = [Row("train", "Conv2D", ["float32", "float32"], [[2, 3, 8, 8], [4, 3, 3, 3]], 2),
            Row("train", "ResizeNearestNeighbor", ["float32"], [[2, 4, 8, 8]], 1)]  # fmt: skip
    monkeypatch.setattr(graphs, "graph_rows", lambda cfg, rt, chip, img=128, cards=1: list(rows))
    report = tmp_path / "report.json"
    status = chip_check.main(["--chips", "ascend910b", "--no-values", "--json", str(report)])
    out = capsys.readouterr().out
    assert status == 1 and "chip check fails: 1 operators" in out
    assert "ResizeNearestNeighbor" in out and "unmapped" in out
    result = json.loads(report.read_text())
    assert result["failures"] == 1
    assert [f["prim"] for f in result["findings"] if f["verdict"] == "unmapped"] == [
        "ResizeNearestNeighbor"
    ]
    waivers = tmp_path / "waivers.json"
    waivers.write_text(json.dumps({"waivers": [{"prim": "ResizeNearestNeighbor",
                                                "reason": "ran on the card"}]}))  # fmt: skip
    assert chip_check.main(["--chips", "ascend910b", "--no-values", "--json", str(report),
                            "--waivers", str(waivers)]) == 0  # fmt: skip


def test_a_compiled_cell_with_sort_and_cumsum_fails_on_both_training_chips():
    stdout = run_python(["-m", "tests.tools.chip_check.open_world_probe"], timeout=300)
    findings = json.loads(stdout.strip().splitlines()[-1])
    unmapped = {(f["chip"], f["prim"]) for f in findings if f["verdict"] == "unmapped"}
    assert {("ascend910", "Sort"), ("ascend910b", "Sort")} <= unmapped
    assert {("ascend910", "CumSum"), ("ascend910b", "CumSum")} <= unmapped
