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


def test_the_chips_backends_are_msdets_and_a_configured_level_wins():
    from msdet.engine.runtime.process import Runtime

    rt = Runtime(device="CPU", mode="graph", amp_level="O0", sink=False, sink_size=-1)
    a = graphs.chip_runtime(rt, "ascend910", "auto")
    b = graphs.chip_runtime(rt, "ascend910b", "auto")
    assert (a.jit_level, a.backend) == ("O2", "GE graph sink")
    assert (b.jit_level, b.backend) == ("O0", "kernel by kernel")
    forced = graphs.chip_runtime(rt, "ascend910", "auto", "O0")
    assert (forced.jit_level, forced.backend) == ("O0", "kernel by kernel")


def test_the_jit_loop_is_judged_on_its_own_backend(monkeypatch, tmp_path, capsys):
    """runtime.loop=jit: mindspore.jit compiles for MindSpore's own backend (kernel by kernel
    on the 910A too, from MindSpore 2.9 on), so GE's adapters do not apply."""
    from msdet.engine.runtime import mindspore_compat
    from msdet.engine.runtime.process import Runtime

    monkeypatch.setattr(mindspore_compat, "installed_version", lambda: "2.10.0")
    rt = Runtime(device="CPU", mode="graph", amp_level="O0", sink=False, sink_size=-1)
    jit = graphs.chip_runtime(rt, "ascend910", "auto", None, "jit")
    assert (jit.jit_level, jit.backend) == ("O0", "kernel by kernel")
    monkeypatch.setattr(graphs, "graph_rows", lambda cfg, rt, chip, img=128, cards=1: list(ROWS))
    report = tmp_path / "report.json"
    chip_check.main(["--chips", "ascend910", "--no-values", "--json", str(report),
                     "runtime.loop=jit"])  # fmt: skip
    result = json.loads(report.read_text())
    assert result["loop"] == "jit"
    assert result["chips"]["ascend910"]["backend"] == "kernel by kernel"
    assert "runtime.loop=jit, jit level O0: kernel by kernel" in capsys.readouterr().out
    # Divs has no GE adapter but an aclnn kernel: kernel by kernel it compiles.
    verdicts = {f["prim"]: f["verdict"] for f in result["findings"]}
    assert verdicts["Divs"] == "aclnn"


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
