"""The largest magnitude each operator's inputs reach, read from MindSpore's dump of them
(the dumped training run itself: tests/tools/chip_check/test_main.py, slow)."""

from __future__ import annotations

import math

import numpy as np

from msdet.tools.chip_check.values import dump_config, largest_inputs


def test_the_dump_asks_for_the_inputs_of_the_named_operator_types_only(tmp_path):
    config = dump_config(str(tmp_path / "dump"), ["TopK", "Neg"])
    common = config["common_dump_settings"]
    assert common["path"] == str(tmp_path / "dump")
    assert common["kernels"] == ["TopK", "Neg"] and common["dump_mode"] == 1
    assert common["input_output"] == 1 and common["iteration"] == "all"
    assert config["e2e_dump_settings"]["enable"] is True


def test_largest_inputs_per_operator_type_over_every_step_and_input(tmp_path):
    step0 = tmp_path / "rank_0" / "msdet" / "0" / "0"
    step1 = tmp_path / "rank_0" / "msdet" / "0" / "1"
    step0.mkdir(parents=True)
    step1.mkdir(parents=True)
    np.save(step0 / "TopK.Default_TopK-op1.1.2.input.0.npy", np.float32([1.0, -70000.0, 3.0]))
    np.save(step1 / "TopK.Default_TopK-op1.1.3.input.0.npy", np.float32([5.0, 60000.0]))
    np.save(step1 / "Neg.Default_Neg-op2.1.3.input.0.npy", np.float32([1.0, np.inf]))
    np.save(step1 / "Cast.Default_Cast-op3.1.3.input.0.npy", np.int32([5, -9]))
    np.save(step1 / "Equal.Default_Equal-op4.1.3.input.0.npy", np.array([True, False]))
    # A name too long for the file system: dumped under a number, named in mapping.csv.
    np.save(step1 / "123456.npy", np.float32([2.5, -0.5]))
    (step1 / "mapping.csv").write_text("123456.npy,Mul.Default_Mul-op5.1.3.input.1.npy\n")
    # By operator type, and by instance (type, shape, scope): keys with "|".
    largest = {k: v for k, v in largest_inputs(str(tmp_path)).items() if "|" not in k}
    assert set(largest) == {"TopK", "Neg", "Cast", "Mul", "Equal"}
    assert largest["Equal"] == 0.0  # booleans carry no magnitude
    assert largest["TopK"] == 70000.0 and largest["Cast"] == 9.0 and largest["Mul"] == 2.5
    assert math.isinf(largest["Neg"])
