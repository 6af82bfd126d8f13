"""check_cell: a user's own Cell checked per chip (slow, in a process of its own)."""

from __future__ import annotations

import json
import os

import pytest

from tests.support import run_python


@pytest.mark.slow
def test_a_users_own_cell_is_checked_per_chip():
    """check_cell on a port's own post-processing: its float32 TopK runs in float16 on the
    910A and, at the magnitude given, overflows; its NMSWithMask on [N, 5] will not compile
    on either training chip (msdet's own NMS is checked on the device; a user's is not)."""
    stdout = run_python(
        ["-m", "tests.tools.chip_check.cell_probe"], env={**os.environ}, timeout=300
    )
    findings = json.loads(stdout.strip().splitlines()[-1])
    verdict = {(f["chip"], f["prim"]): f for f in findings}
    assert verdict[("ascend910", "TopK")]["verdict"] == "overflows"
    assert verdict[("ascend910", "TopK")]["dtypes"][0] == "float32"
    assert verdict[("ascend910b", "TopK")]["verdict"] == "aicore"
    for chip in ("ascend910", "ascend910b"):
        nms = verdict[(chip, "NMSWithMask")]
        assert nms["verdict"] == "none" and "8" in nms["reason"], nms
