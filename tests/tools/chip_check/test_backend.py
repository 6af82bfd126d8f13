"""The chip check judges the backend msdet runs on each chip: GE's operators on the 910A
(jit level O2), aclnn kernels where kernel by kernel (the 910B) dispatches to them."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from msdet.tools.chip_check import __main__ as chip_check
from msdet.tools.chip_check import graphs
from msdet.tools.chip_check.cann_tables import load_tables
from msdet.tools.chip_check.mapping import load_mapping
from msdet.tools.chip_check.verdict import FAILING, Row, judge

TABLES, MAPPING = load_tables(), load_mapping()
ROWS = [Row("train", "Sub", ["float32", "float32"], [[2, 8], [2, 8]], 3),
        Row("train", "TopK", ["float32", "scalar:int64"], [[2, 50], None], 2),
        Row("train", "Divs", ["float32", "scalar:float32"], [[2, 8], None], 1)]  # fmt: skip


def test_kernel_by_kernel_an_aclnn_dispatched_primitive_is_an_aclnn_kernel():
    sub = judge(ROWS[0], "ascend910b", "must_keep_origin_dtype", TABLES, MAPPING, backend="kbk")
    assert (sub.verdict, sub.cann_op) == ("aclnn", "aclnnSub")
    assert "per API, not in these tables" in sub.reason and sub.verdict not in FAILING
    assert sub.notes == ["as a GE operator (Sub): aicore, table combination"]
    # TopK has no aclnn dispatch: kernel by kernel it is the GE operator, compiled alone
    topk = judge(ROWS[1], "ascend910b", "must_keep_origin_dtype", TABLES, MAPPING, backend="kbk")
    assert (topk.verdict, topk.cann_op) == ("aicore", "TopKV2")
    # Divs: no GE adapter, but an aclnn kernel (MindSpore's DivsAscend) kernel by kernel
    divs = judge(ROWS[2], "ascend910b", "must_keep_origin_dtype", TABLES, MAPPING, backend="kbk")
    assert divs.verdict == "aclnn" and "aclnnDivs" in divs.reason
    ge = judge(ROWS[2], "ascend910", "allow_fp32_to_fp16", TABLES, MAPPING, backend="ge")
    assert ge.verdict == "unverified"


def test_the_chips_backends_are_msdets_and_a_configured_level_wins(monkeypatch):
    """The check runs msdet's set-up against each chip stood in on this CPU and judges the
    backend the run plan gives the loop's training graphs there."""
    from omegaconf import OmegaConf

    from tests.support import ROOT

    monkeypatch.delenv("RANK_TABLE_FILE", raising=False)
    runtime = OmegaConf.load(f"{ROOT}/configs/runtime/auto.yaml")
    assert graphs.chip_runtime(runtime, "ascend910")[1].runs == "GE graph sink"
    assert graphs.chip_runtime(runtime, "ascend910b")[1].runs == "kernel by kernel"
    forced = OmegaConf.merge(runtime, {"jit_level": "O0"})
    assert (
        graphs.chip_runtime(forced, "ascend910")[1].describe() == "jit level O0, kernel by kernel"
    )
    # the jit loop names ms_backend: kernel by kernel on the 910A too
    assert graphs.chip_runtime(runtime, "ascend910", "jit")[1].runs == "kernel by kernel"


def test_the_jit_loop_is_judged_on_its_own_backend(monkeypatch, tmp_path, capsys):
    """runtime.loop=jit: every mindspore.jit graph is given ms_backend, so on the 910A the
    GE adapters do not apply: its aclnn kernels must be shown to run on the Atlas training
    series (tools/chip_check/data/aclnn_support.json)."""
    monkeypatch.setattr(graphs, "graph_rows", lambda cfg, rt, chip, img=128, cards=1: list(ROWS))
    report = tmp_path / "report.json"
    chip_check.main(["--chips", "ascend910", "--no-values", "--json", str(report),
                     "runtime.loop=jit"])  # fmt: skip
    result = json.loads(report.read_text())
    assert result["loop"] == "jit"
    assert result["chips"]["ascend910"]["backend"] == "kernel by kernel"
    assert "runtime.loop=jit, jit level O0: kernel by kernel" in capsys.readouterr().out
    # Divs has no GE adapter but an aclnn kernel whose API's page lists the training series
    found = {f["prim"]: f for f in result["findings"]}
    assert found["Divs"]["verdict"] == "aclnn" and "doc:" in found["Divs"]["reason"]


def test_an_aclnn_api_not_shown_to_run_on_the_910a_fails_there():
    """Kernel by kernel on the 910A an aclnn verdict passes only with evidence; on the 910B
    aclnn is what the chip is for."""
    sign = Row("train", "Sign", ["float32"], [[2, 8]], 1)  # aclnnSign: the documents disagree
    on_a = judge(sign, "ascend910", "allow_fp32_to_fp16", TABLES, MAPPING, backend="kbk")
    assert on_a.verdict == "unverified" and on_a.verdict in FAILING
    assert "aclnnSign is not shown to support the Atlas training series" in on_a.reason
    assert "runtime.loop=model" in on_a.reason  # the way out: GE on the 910A
    on_b = judge(sign, "ascend910b", "must_keep_origin_dtype", TABLES, MAPPING, backend="kbk")
    assert on_b.verdict == "aclnn"
    meshgrid = Row("train", "Meshgrid", ["float32"], [[8]], 1)  # a kernel naming no aclnn API
    assert judge(meshgrid, "ascend910", "allow_fp32_to_fp16", TABLES, MAPPING,
                 backend="kbk").verdict == "unverified"  # fmt: skip
    sub = judge(ROWS[0], "ascend910", "allow_fp32_to_fp16", TABLES, MAPPING, backend="kbk")
    assert sub.verdict == "aclnn" and "aclnnSub (doc:" in sub.reason
    assert MAPPING["aclnn_support"]["aclnnSub"]["ascend910"] is True


def test_the_report_says_each_chips_backend_and_judges_by_it(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(graphs, "graph_rows", lambda cfg, rt, chip, img=128, cards=1: list(ROWS))
    monkeypatch.delenv("RANK_TABLE_FILE", raising=False)
    report = tmp_path / "report.json"
    status = chip_check.main(["--chips", "ascend910,ascend910b", "--no-values", "--json",
                              str(report)])  # fmt: skip
    out = capsys.readouterr().out
    result = json.loads(report.read_text())
    chips = result["chips"]
    assert (chips["ascend910"]["jit_level"], chips["ascend910"]["backend"]) == (
        "O2", "GE graph sink")  # fmt: skip
    assert (chips["ascend910b"]["jit_level"], chips["ascend910b"]["backend"]) == (
        "O0", "kernel by kernel")  # fmt: skip
    assert "jit level O2: GE graph sink" in out and "jit level O0: kernel by kernel" in out
    verdicts = {(f["chip"], f["prim"]): f["verdict"] for f in result["findings"]}
    assert verdicts[("ascend910b", "Sub")] == "aclnn"
    assert verdicts[("ascend910", "Divs")] == "unverified" and status == 1
    assert verdicts[("ascend910b", "Divs")] == "aclnn"
    assert result["loop"] == "model"
    assert chips["ascend910"]["primitives"] == {"train": {"Divs": 1, "Sub": 3, "TopK": 2}}


@pytest.mark.slow
@pytest.mark.long(190)
def test_the_check_passes_at_amp_o0_on_both_training_chips(tmp_path):
    """What bench/device.py --settings mindyolo runs: AMP O0 (float32 graphs), each chip on
    its backend (the default O2 run, with the 8-card graph: tests/tools/chip_check/test_main.py)."""
    report = tmp_path / "chip_check.json"
    done = subprocess.run(
        [sys.executable, "-m", "msdet.tools.chip_check", "--chips", "ascend910,ascend910b",
         "--cards", "1", "--no-values", "--json", str(report), "runtime.amp=O0"],
        cwd=tmp_path, capture_output=True, text=True, timeout=2400,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    result = json.loads(report.read_text())
    chips = result["chips"]
    assert chips["ascend910"]["backend"] == "GE graph sink"
    assert chips["ascend910b"]["backend"] == "kernel by kernel"
    assert chips["ascend910b"]["counts"]["aclnn"] > 0
    # float32 convolutions on the 910A's cube run in float16 under its precision mode
    narrowed = {f["prim"] for f in result["findings"]
                if f["chip"] == "ascend910" and f["verdict"] == "aicore(fp16)"}  # fmt: skip
    assert "Conv2D" in narrowed
