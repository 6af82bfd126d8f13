"""The chip check: verdicts from CANN's tables, the tables derived from a CANN tree, the IR
listing, and the whole check of msdet's graphs for the 910A and the 910B (slow)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from msdet.tools.chip_check import cann_tables
from msdet.tools.chip_check.mapping import cann_ops_needed, load_mapping
from msdet.tools.chip_check.verdict import FLOAT16_MAX, Row, judge
from tests.support import ROOT, run_python

TABLES = cann_tables.load_tables()
MAPPING = load_mapping()


def verdict(prim, dtypes, chip, mode, shapes=None, largest=None, graph="train", guarded=()):
    row = Row(graph, prim, dtypes, shapes or [], 1)
    return judge(row, chip, mode, TABLES, MAPPING, largest, guarded)


def test_the_bundled_tables_hold_every_operator_the_mapping_leads_to():
    assert TABLES["_meta"]["cann"] == "CANN 8.1.RC1"
    missing = [op for op in cann_ops_needed() if op not in TABLES]
    assert missing == []
    # What CANN 8.1.RC1 says of the two operators the third review named:
    assert TABLES["TopKV2"]["ascend910"]["aicore"]["combos"] == [["float16", "int32"]]
    assert ["float32", "int32"] in TABLES["TopKV2"]["ascend910b"]["aicore"]["combos"]
    assert TABLES["NMSWithMask"]["ascend910"]["aicore"]["combos"] == [["float16"]]


def test_a_float32_topk_runs_in_float16_on_the_910a_and_overflows_past_65504():
    """SimOTA's TopK over costs: fine in float16 up to 65,504, an overflow at YOLOX's 1e9."""
    mode = "allow_fp32_to_fp16"
    assert verdict("TopK", ["float32", "scalar:int64"], "ascend910", mode).verdict == "aicore(fp16)"
    ok = verdict("TopK", ["float32", "scalar:int64"], "ascend910", mode, largest={"TopK": 60000.0})
    assert ok.verdict == "aicore(fp16)" and ok.largest == 60000.0
    bad = verdict("TopK", ["float32", "scalar:int64"], "ascend910", mode, largest={"TopK": 1e9})
    assert bad.verdict == "overflows" and f"{FLOAT16_MAX:.0f}" in bad.reason
    # A2 keeps float32: a float32 kernel exists there
    assert verdict("TopK", ["float32"], "ascend910b", "must_keep_origin_dtype").verdict == "aicore"
    # keep-dtype on the 910A: no float32 TopK kernel on the AI Core, the AI CPU has one
    assert verdict("TopK", ["float32"], "ascend910", "must_keep_origin_dtype").verdict == "aicpu"


def test_nms_with_mask_wants_eight_columns_unless_msdet_checks_it_first():
    shapes = [[336, 5]]
    plain = verdict("NMSWithMask", ["float32"], "ascend910b", "must_keep_origin_dtype", shapes,
                    graph="export")  # fmt: skip
    assert plain.verdict == "none" and "[N, 8]" in plain.reason
    guarded = verdict("NMSWithMask", ["float32"], "ascend910b", "must_keep_origin_dtype", shapes,
                      graph="nms", guarded=("nms",))  # fmt: skip
    assert guarded.verdict == "guarded" and "device_nms_problem" in guarded.reason
    assert verdict("NMSWithMask", ["float32"], "ascend910b", "must_keep_origin_dtype",
                   [[336, 8]]).verdict == "aicore"  # fmt: skip


def test_reshapes_msdets_cpu_kernels_and_unmapped_primitives():
    mode = "must_keep_origin_dtype"
    assert verdict("Reshape", ["float32"], "ascend910b", mode).verdict == "nop"
    custom = verdict("Custom:FlatSGD", ["float32"], "ascend910b", mode)
    assert custom.verdict == "none" and "runtime.cpu_kernels=native" in custom.reason
    unknown = verdict("Divs", ["float32", "scalar:float32"], "ascend910", "allow_fp32_to_fp16")
    assert unknown.verdict == "unverified" and "no GE adapter" in unknown.reason
    conv = verdict("Conv2D", ["float32", "float32"], "ascend910b", mode)
    assert conv.verdict == "aicore" and conv.cann_op == "Conv2D"
    assert verdict("Conv2D", ["float32", "float32"], "ascend910", "allow_fp32_to_fp16").verdict == (
        "aicore(fp16)"
    )


def write_opp(root):
    """A CANN ``opp`` tree with one operator: float16-only on one chip, float32 on another,
    and an AI CPU entry."""
    for chip, dtypes in (("ascend910", "float16"), ("ascend910b", "float16,float")):
        folder = root / "opp" / "built-in" / "op_impl" / "ai_core" / "tbe" / "config" / chip
        folder.mkdir(parents=True)
        table = {"TopKV2": {"input0": {"name": "x", "paramType": "required", "dtype": dtypes},
                            "input1": {"name": "k", "paramType": "required",
                                       "dtype": ",".join(["int32"] * len(dtypes.split(",")))}}}  # fmt: skip
        (folder / f"aic-{chip}-ops-info.json").write_text(json.dumps(table))
    cpu = root / "opp" / "built-in" / "op_impl" / "aicpu" / "aicpu_kernel" / "config"
    cpu.mkdir(parents=True)
    (cpu / "aicpu_kernel.json").write_text(
        json.dumps({"TopKV2": {"opInfo": {"engine": "DNN_VM_AICPU"}}})
    )
    (root / "opp" / "version.info").write_text("Version=9.9.9\n")


def test_tables_are_derived_from_a_cann_tree(tmp_path):
    write_opp(tmp_path)
    opp = cann_tables.find_opp(str(tmp_path))
    derived = cann_tables.derive(opp, ["TopKV2"], ["ascend910", "ascend910b"])
    tables = cann_tables.compact(derived, ["TopKV2"])
    assert tables["_meta"]["cann"] == "Version=9.9.9"
    assert tables["TopKV2"]["ascend910"]["aicore"]["combos"] == [["float16", "int32"]]
    assert tables["TopKV2"]["ascend910b"]["aicore"]["combos"] == [["float16", "int32"],
                                                                  ["float32", "int32"]]  # fmt: skip
    entry = tables["TopKV2"]["ascend910"]
    assert (
        cann_tables.check(entry, ["float32", "int32"], allow_fp32_to_fp16=True)[0] == "aicore(fp16)"
    )
    assert cann_tables.check(entry, ["float32", "int32"])[0] == "aicpu?"
    assert json.loads(cann_tables.dumps_compact(tables)) == tables


@pytest.mark.slow
def test_the_ir_listing_names_primitives_dtypes_and_scopes(tmp_path):
    stdout = run_python(["-m", "tests.tools.ir_probe"], env={**os.environ}, timeout=300)
    rows = json.loads(stdout.strip().splitlines()[-1])
    by_prim = {r[0]: r for r in rows}
    assert {"Conv2D", "Cast", "TopK", "Reshape"} <= set(by_prim)
    assert by_prim["Conv2D"][1][:2] == ["float32", "float32"]
    assert by_prim["TopK"][1][0] == "float16" and by_prim["TopK"][2][0] == [2, 256]
    assert "conv" in by_prim["Conv2D"][4]


@pytest.mark.slow
def test_a_users_own_cell_is_checked_per_chip():
    """check_cell on a port's own post-processing: its float32 TopK runs in float16 on the
    910A and, at the magnitude given, overflows; its NMSWithMask on [N, 5] will not compile
    on either training chip (msdet's own NMS is checked on the device; a user's is not)."""
    stdout = run_python(["-m", "tests.tools.cell_probe"], env={**os.environ}, timeout=300)
    findings = json.loads(stdout.strip().splitlines()[-1])
    verdict = {(f["chip"], f["prim"]): f for f in findings}
    assert verdict[("ascend910", "TopK")]["verdict"] == "overflows"
    assert verdict[("ascend910", "TopK")]["dtypes"][0] == "float32"
    assert verdict[("ascend910b", "TopK")]["verdict"] == "aicore"
    for chip in ("ascend910", "ascend910b"):
        nms = verdict[(chip, "NMSWithMask")]
        assert nms["verdict"] == "none" and "8" in nms["reason"], nms


@pytest.mark.slow
def test_msdets_graphs_pass_the_check_on_the_910a_and_the_910b(tmp_path):
    """The training step, evaluation and NMS as msdet builds them for each chip: nothing
    that will not compile, nothing that overflows float16 where the 910A narrows, and the
    TopK the third review named within float16 on real data."""
    report = tmp_path / "chip_check.json"
    done = subprocess.run(
        [sys.executable, "-m", "msdet.tools.chip_check", "--chips",
         "ascend910,ascend910b", "--json", str(report)],
        cwd=tmp_path, capture_output=True, text=True, timeout=1800,
        env={**os.environ, "PYTHONPATH": ROOT},
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    result = json.loads(report.read_text())
    assert result["failures"] == 0
    assert result["chips"]["ascend910"]["precision_mode"] == "allow_fp32_to_fp16"
    assert result["chips"]["ascend910b"]["precision_mode"] == "must_keep_origin_dtype"
    topk = [f for f in result["findings"] if f["chip"] == "ascend910" and f["prim"] == "TopK"
            and f["graph"] == "train"]  # fmt: skip
    assert topk and all(f["verdict"] == "aicore(fp16)" for f in topk)
    assert 0 < max(f["largest"] for f in topk) <= FLOAT16_MAX
    nms = [
        f for f in result["findings"] if f["chip"] == "ascend910b" and f["prim"] == "NMSWithMask"
    ]
    assert nms and all(f["verdict"] == "guarded" for f in nms)
    assert "chip check passes" in done.stdout
