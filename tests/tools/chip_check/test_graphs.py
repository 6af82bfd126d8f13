"""The runtime the chip check builds each chip's graphs with: this CPU's set-up, made what
msdet would set up on the chip (the graphs themselves: tests/tools/chip_check/test_main.py)."""

from __future__ import annotations

from msdet.engine.runtime.process import Runtime
from msdet.ops.cpu_kernels import NATIVE
from msdet.tools.chip_check.graphs import chip_runtime

CPU = Runtime(device="CPU", mode="graph", amp_level="O0", sink=False, sink_size=-1)


def test_each_chip_gets_its_own_profile_amp_and_no_cpu_kernel():
    seen = {
        chip: chip_runtime(CPU, chip, "auto") for chip in ("ascend910", "ascend910b", "ascend310p")
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
    assert chip_runtime(CPU, "ascend910b", "O0").amp_level == "O0"
    assert CPU.device == "CPU" and CPU.chip is None  # the CPU's own set-up is left as it was
