"""CANN's operator tables derived from a CANN tree (a small one written here), compacted, and
checked against the dtypes a graph gives an operator."""

from __future__ import annotations

import json

from msdet.dev import cann_tables as extractor
from msdet.tools.chip_check import cann_tables


def write_opp(root):
    """A CANN ``opp`` tree with one operator: float16-only on one chip, float32 on another,
    and an AI CPU entry."""
    for chip, dtypes in (("ascend910", "float16"), ("ascend910b", "float16,float")):
        folder = root / "opp" / "built-in" / "op_impl" / "ai_core" / "tbe" / "config" / chip
        folder.mkdir(parents=True)
        table = {"TopKV2": {"input0": {"name": "x", "paramType": "required", "dtype": dtypes},
                            "input1": {"name": "k", "paramType": "required",
                                       "dtype": ",".join(["int32"] * len(dtypes.split(",")))}}}  # fmt: skip
        (folder / f"aic-{chip}-ops-info.json").write_text(json.dumps(table))
    cpu = root / "opp" / "built-in" / "op_impl" / "aicpu" / "aicpu_kernel" / "config"
    cpu.mkdir(parents=True)
    (cpu / "aicpu_kernel.json").write_text(
        json.dumps({"TopKV2": {"opInfo": {"engine": "DNN_VM_AICPU"}}})
    )
    (root / "opp" / "version.info").write_text("Version=9.9.9\n")


def test_tables_are_derived_from_a_cann_tree(tmp_path):
    write_opp(tmp_path)
    opp = extractor.find_opp(str(tmp_path))
    derived = extractor.derive(opp, ["TopKV2"], ["ascend910", "ascend910b"])
    tables = extractor.compact(derived, ["TopKV2"])
    assert tables["_meta"]["cann"] == "Version=9.9.9"
    assert tables["TopKV2"]["ascend910"]["aicore"]["combos"] == [["float16", "int32"]]
    assert tables["TopKV2"]["ascend910b"]["aicore"]["combos"] == [["float16", "int32"],
                                                                  ["float32", "int32"]]  # fmt: skip
    entry = tables["TopKV2"]["ascend910"]
    assert (
        cann_tables.check(entry, ["float32", "int32"], allow_fp32_to_fp16=True)[0] == "aicore(fp16)"
    )
    assert cann_tables.check(entry, ["float32", "int32"])[0] == "aicpu?"
    assert json.loads(extractor.dumps_compact(tables)) == tables


def test_cann_names_of_dtypes_and_operator_files():
    assert [extractor.norm_dtype(d) for d in ("DT_FLOAT", "DT_BF16", "float", "Half")] == [
        "float32",
        "bfloat16",
        "float32",
        "float16",
    ]
    assert extractor.snake("Conv2DBackpropInput") == "conv2d_backprop_input"
    assert extractor.snake("TopKV2") == "top_k_v2"
    assert extractor.snake("BNTrainingReduce") == "bn_training_reduce"


def test_the_command_writes_tables_the_chip_check_loads(tmp_path):
    write_opp(tmp_path)
    out = tmp_path / "tables.json"
    extractor.main(["--cann-root", str(tmp_path), "--ops", "TopKV2", "--chips",
                    "ascend910,ascend910b", "--no-mindspore", "-o", str(out)])  # fmt: skip
    tables = cann_tables.load_tables(str(out))
    assert tables["_meta"]["derived_by"].startswith("python -m msdet.dev.cann_tables")
    assert list(tables) == ["_meta", "TopKV2"]
    assert cann_tables.check(tables["TopKV2"]["ascend910b"], ["float32", "int32"]) == (
        "aicore",
        "table combination",
    )
