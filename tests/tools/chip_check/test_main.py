"""``python -m msdet.tools.chip_check``: msdet's graphs for the 910A and the 910B pass the
whole check (slow)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from msdet.tools.chip_check.verdict import FLOAT16_MAX
from tests.support import ROOT, run_python


@pytest.mark.slow
@pytest.mark.long(400)
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
    # The 8-card training step (--cards 8 by default): the gradient reducer's and the
    # overflow flag's AllReduce, judged by HCCL's data types, and SyncBatchNorm in place of
    # every BatchNorm.
    for chip in ("ascend910", "ascend910b"):
        graph = result["chips"][chip]["primitives"]["train_8p"]
        assert graph["AllReduce"] > 100, chip  # one per gradient (Model.train), the flag's
        assert graph["SyncBatchNorm"] > 50 and graph["SyncBatchNormGrad"] > 50, chip
        assert "BatchNorm" not in graph and "Switch" not in graph, chip
        hccl = {f["verdict"] for f in result["findings"]
                if f["chip"] == chip and f["graph"] == "train_8p" and f["prim"] == "AllReduce"}  # fmt: skip
        assert hccl == {"hccl"}, chip
        assert "AllReduce" not in result["chips"][chip]["primitives"]["train"], chip


def test_the_command_says_what_it_takes_without_loading_mindspore():
    code = (
        "import runpy, sys\n"
        "sys.argv = ['chip_check', '--help']\n"
        "try:\n    runpy.run_module('msdet.tools.chip_check', run_name='__main__')\n"
        "except SystemExit as stop:\n    print('EXIT', stop.code)\n"
        "print('MINDSPORE_LOADED', 'mindspore' in sys.modules)\n"
    )
    out = run_python(["-c", code])
    assert "usage: python -m msdet.tools.chip_check" in out and "--chips" in out
    assert "EXIT 0" in out and "MINDSPORE_LOADED False" in out
