"""The runtime the chip check builds each chip's graphs with: msdet's own set-up, run
against the chip stood in on this CPU (the graphs themselves: tests/tools/chip_check/test_main.py)."""

from __future__ import annotations

from omegaconf import OmegaConf

from msdet.ops.cpu_kernels import NATIVE
from msdet.tools.chip_check.graphs import chip_runtime
from tests.support import ROOT

RUNTIME = OmegaConf.load(f"{ROOT}/configs/runtime/auto.yaml")


def test_each_chip_gets_its_own_profile_amp_and_no_cpu_kernel():
    seen = {
        chip: chip_runtime(RUNTIME, chip)[0] for chip in ("ascend910", "ascend910b", "ascend310p")
    }
    got = {
        chip: (rt.device, rt.chip, rt.amp_level, rt.float_status, rt.host_nms, rt.nms_max_boxes)
        for chip, rt in seen.items()
    }
    assert got == {
        "ascend910": ("Ascend", "ascend910", "O2", True, True, 2864),
        "ascend910b": ("Ascend", "ascend910b", "O2", False, False, 2048),
        "ascend310p": ("Ascend", "ascend310p", "O2", False, True, 2864),
    }
    assert all(rt.kernels == NATIVE for rt in seen.values())  # no msdet CPU kernel on a card
    o0 = OmegaConf.merge(RUNTIME, {"amp": "O0"})
    assert chip_runtime(o0, "ascend910b")[0].amp_level == "O0"
    import mindspore as ms

    assert ms.get_context("device_target") == "CPU"  # the process's own set-up is left as it was
