"""Value ranges per operator instance, of the model and size being checked: one TopK's
inputs within float16 pass although another TopK's overflow; the measurement runs the
command's model settings."""

from __future__ import annotations

import numpy as np

from msdet.tools.chip_check import values
from msdet.tools.chip_check.cann_tables import load_tables
from msdet.tools.chip_check.mapping import load_mapping
from msdet.tools.chip_check.verdict import Row, judge

ASSIGNER = "Default/net_with_loss-DetectorWithLoss/loss-YOLOXLoss/assigner-SimOTAAssigner"
NMS = "Default/nms-BatchedNMS/candidates-Candidates"


def write_dump(root, name, array, index=0):
    folder = root / "rank_0" / "msdet" / "0" / "0"
    folder.mkdir(parents=True, exist_ok=True)
    np.save(folder / f"{name}.0.0.17965.input.{index}.DefaultFormat.Float32.npy", array)


def write_two_topks(root):
    """The assigner's TopK within float16 (60,000), the NMS's TopK beyond it (1e6)."""
    write_dump(root, "TopK." + ASSIGNER.replace("/", "_") + "_TopK-op3",
               np.full((2, 50, 336), -60000.0, np.float32))  # fmt: skip
    write_dump(root, "TopK." + NMS.replace("/", "_") + "_TopK-op0",
               np.full((2, 336), 1e6, np.float32))  # fmt: skip


def test_measurements_are_kept_per_instance_shape_and_type(tmp_path):
    write_two_topks(tmp_path)
    found = values.largest_inputs(str(tmp_path))
    assert found["TopK"] == 1e6  # per type: the larger of the two
    assert found[values.value_key("TopK", (2, 50, 336))] == 60000.0
    assert found[values.value_key("TopK", (2, 50, 336), ASSIGNER)] == 60000.0
    assert values.largest_for(found, "TopK", [2, 50, 336], ASSIGNER) == (60000.0, "instance")
    assert values.largest_for(found, "TopK", [2, 50, 336], "Other/cells") == (60000.0, "shape")
    assert values.largest_for(found, "TopK", [4, 4], ASSIGNER) == (1e6, "type")


def test_one_instance_within_float16_passes_where_another_overflows(tmp_path):
    write_two_topks(tmp_path)
    largest = values.largest_inputs(str(tmp_path))
    tables, mapping = load_tables(), load_mapping()

    def topk(shape, scope):
        row = Row("train", "TopK", ["float32", "scalar:int64"], [shape, None], 1, scope)
        return judge(row, "ascend910", "allow_fp32_to_fp16", tables, mapping, largest)

    assigner = topk([2, 50, 336], ASSIGNER + "/TopK-op7")  # another number, the same cells
    assert assigner.verdict == "aicore(fp16)" and assigner.largest == 60000.0
    assert "inputs measured at this operator's instance" in assigner.notes
    nms = topk([2, 336], NMS + "/TopK-op1")
    assert nms.verdict == "overflows" and nms.largest == 1e6


def test_the_measurement_runs_the_checked_models_settings(monkeypatch):
    seen = {}

    class Done:
        returncode, stderr = 0, ""

    def run(cmd, **kwargs):
        seen["cmd"] = cmd
        return Done()

    monkeypatch.setattr(values.subprocess, "run", run)
    values.measure(["TopK"], img=256, overrides=["model=yolox_s", "data=coco", "train.assigner.rule=yolox-latest", "runtime.amp=O2"])  # fmt: skip
    cmd = seen["cmd"]
    assert cmd[cmd.index("--img") + 1] == "256"
    assert cmd[-2:] == [
        "model=yolox_s",
        "train.assigner.rule=yolox-latest",
    ]  # not the data or runtime settings
