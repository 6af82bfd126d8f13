"""The self-test's CPU reference: every figure a device is held against, computed in a
process of its own at the tiny variant's size (slow: PyNative steps and an evaluation)."""

from __future__ import annotations

import numpy as np
import pytest

from msdet.tools.selftest.cases import NUM_CLASSES, REFERENCE_FILE, WEIGHTS_FILE
from tests.support import run_python


@pytest.mark.slow
def test_the_reference_holds_forward_step_nms_and_evaluation_figures(tmp_path):
    run_python(["-m", "msdet.tools.selftest", "--reference", str(tmp_path), "--size", "64"])
    assert (tmp_path / WEIGHTS_FILE).is_file()
    ref = np.load(tmp_path / REFERENCE_FILE)
    anchors = (64 // 8) ** 2 + (64 // 16) ** 2 + (64 // 32) ** 2
    for amp in ("O0", "O2"):
        assert ref[f"forward_{amp}"].shape == (2, anchors, 5 + NUM_CLASSES)
        terms = ref[f"loss_terms_{amp}"]  # total, iou, obj, cls, l1, num_fg
        assert terms.shape == (6,) and terms[0] > 0 and terms[5] > 0 and terms[4] == 0
        assert ref[f"update_norm_{amp}"] > 0
    # The two AMP levels give close, not equal, figures.
    assert 0 < np.abs(ref["forward_O2"] - ref["forward_O0"]).max() < 0.1
    assert ref["nms_counts"][0] > 1000 and ref["nms_dets"].shape[1] >= ref["nms_counts"][0]
    assert ref["images"].shape == (2, 3, 64, 64)
