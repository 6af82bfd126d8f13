"""CANN's operator tables as the chip check reads them: where an operator with given input
dtypes runs on a chip (the AI Core, its float16 fallback, the AI CPU, the host)."""

from __future__ import annotations

from msdet.tools.chip_check import cann_tables


def test_the_bundled_tables_hold_every_chip_of_the_check():
    tables = cann_tables.load_tables()
    assert set(tables["_meta"]["chips"]) == {"ascend910", "ascend910b", "ascend310p", "ascend310b"}
    assert tables["_meta"]["cann"] == "CANN 8.1.RC1"
    assert set(tables["Conv2D"]) == set(tables["_meta"]["chips"])


def test_an_operator_without_an_ai_core_kernel_falls_back_to_the_ai_cpu_that_lists_it():
    entry = {
        "aicore": {"combos": [["float16"]]},
        "aicpu": [
            {"engine": "DNN_VM_HOST_CPU", "table": "host_cpu_kernel.json",
             "inputs": [{"dtypes": ["float32"]}]},
            {"engine": "DNN_VM_AICPU", "table": "aicpu_kernel.json",
             "inputs": [{"dtypes": ["float32", "float64"]}]},
        ],
    }  # fmt: skip
    assert cann_tables.check(entry, ["float16"]) == ("aicore", "table combination")
    # The chip's AI CPU before the host's (GE runs host tables on the host CPU).
    assert cann_tables.check(entry, ["float32"]) == ("aicpu", "aicpu_kernel.json")
    assert cann_tables.check(entry, ["int8"]) == (
        "none",
        "AI CPU lists the op but not these dtypes",
    )
    assert cann_tables.check({"aicore": {"combos": [["float16"]]}}, ["float32"]) == (
        "none",
        "no AI Core kernel for these dtypes and no AI CPU kernel",
    )
