"""The self-test's checks that run on this CPU: the chip profiles simulated from MindSpore's
capability answers, and the device NMS held against the host's (slow: compiles the NMS)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from msdet.engine.runtime import ascend
from msdet.tools.selftest.cases import NMS_CANDIDATES, NMS_CLASSES, inputs
from msdet.tools.selftest.checks import check_chip, check_nms


def test_the_simulated_chip_profiles_are_msdets_on_those_chips():
    check = check_chip(SimpleNamespace(device="CPU"))
    assert (check.name, check.status) == ("chip profile (simulated)", "passed")
    assert check.figures["profiles"] == {  # host NMS, float-status register, NMS boxes, jit
        "ascend910": [True, True, 2864, "O2"],
        "ascend910b": [False, False, 2048, "O0"],
        "ascend310p": [True, False, 2864, "O0"],
    }
    assert "needs Ascend" in check.note


def test_a_profile_that_differs_fails_the_check(monkeypatch):
    real = ascend.chip_profile

    def a2_without_float_status(soc, *answers):
        profile = real(soc, *answers)
        return profile if soc != "ascend910" else real("ascend910b", False, True, None)

    monkeypatch.setattr(ascend, "chip_profile", a2_without_float_status)
    check = check_chip(SimpleNamespace(device="CPU"))
    assert check.status == "failed"
    assert check.figures["profiles"]["ascend910"] == [False, False, 2048, "O0"]


@pytest.mark.slow
def test_the_device_nms_is_held_against_the_hosts_and_only_reported_where_the_host_runs_it():
    from mindspore import Tensor

    from msdet.ops.nms import HostNMS

    preds = inputs(64)["nms_predictions"]
    dets, counts = HostNMS(NMS_CLASSES, conf_thresh=0.0, pre_nms_topk=NMS_CANDIDATES,
                           max_det=NMS_CANDIDATES)(Tensor(preds))  # fmt: skip
    ref = {"nms_predictions": preds, "nms_dets": dets, "nms_counts": counts}
    same = check_nms(SimpleNamespace(host_nms=False), ref)
    assert same.status == "passed" and same.figures["max_rel_error"] <= 1e-6
    assert same.figures["kept"] == int(counts[0]) > 1000
    one_less = dict(ref, nms_counts=np.asarray(counts) - 1)
    assert check_nms(SimpleNamespace(host_nms=False), one_less).status == "failed"
    reported = check_nms(SimpleNamespace(host_nms=True), one_less)
    assert reported.status == "info" and "the device kernel differs" in reported.note
