"""Verdicts from CANN's tables: which operators run on the AI Core, in float16, on the AI CPU,
not at all, or overflow float16 at the magnitudes measured."""

from __future__ import annotations

from msdet.tools.chip_check import cann_tables
from msdet.tools.chip_check.mapping import load_mapping
from msdet.tools.chip_check.verdict import (
    FLOAT16_MAX,
    Row,
    format_chip,
    judge,
    summarise,
    tensor_dtype,
)

TABLES = cann_tables.load_tables()
MAPPING = load_mapping()


def verdict(prim, dtypes, chip, mode, shapes=None, largest=None, graph="train", guarded=()):
    row = Row(graph, prim, dtypes, shapes or [], 1)
    return judge(row, chip, mode, TABLES, MAPPING, largest, guarded)


def test_a_float32_topk_runs_in_float16_on_the_910a_and_overflows_past_65504():
    """SimOTA's TopK over costs: fine in float16 up to 65,504, an overflow at YOLOX's 1e9."""
    mode = "allow_fp32_to_fp16"
    assert verdict("TopK", ["float32", "scalar:int64"], "ascend910", mode).verdict == "aicore(fp16)"
    ok = verdict("TopK", ["float32", "scalar:int64"], "ascend910", mode, largest={"TopK": 60000.0})
    assert ok.verdict == "aicore(fp16)" and ok.largest == 60000.0
    bad = verdict("TopK", ["float32", "scalar:int64"], "ascend910", mode, largest={"TopK": 1e9})
    assert bad.verdict == "overflows" and f"{FLOAT16_MAX:.0f}" in bad.reason
    # A2 keeps float32: a float32 kernel exists there
    assert verdict("TopK", ["float32"], "ascend910b", "must_keep_origin_dtype").verdict == "aicore"
    # keep-dtype on the 910A: no float32 TopK kernel on the AI Core, the AI CPU has one
    assert verdict("TopK", ["float32"], "ascend910", "must_keep_origin_dtype").verdict == "aicpu"


def test_nms_with_mask_wants_eight_columns_unless_msdet_checks_it_first():
    shapes = [[336, 5]]
    plain = verdict("NMSWithMask", ["float32"], "ascend910b", "must_keep_origin_dtype", shapes,
                    graph="export")  # fmt: skip
    assert plain.verdict == "none" and "[N, 8]" in plain.reason
    guarded = verdict("NMSWithMask", ["float32"], "ascend910b", "must_keep_origin_dtype", shapes,
                      graph="nms", guarded=("nms",))  # fmt: skip
    assert guarded.verdict == "guarded" and "device_nms_problem" in guarded.reason
    assert verdict("NMSWithMask", ["float32"], "ascend910b", "must_keep_origin_dtype",
                   [[336, 8]]).verdict == "aicore"  # fmt: skip


def test_reshapes_msdets_cpu_kernels_and_unmapped_primitives():
    mode = "must_keep_origin_dtype"
    assert verdict("Reshape", ["float32"], "ascend910b", mode).verdict == "nop"
    custom = verdict("Custom:FlatSGD", ["float32"], "ascend910b", mode)
    assert custom.verdict == "none" and "runtime.cpu_kernels=native" in custom.reason
    unknown = verdict("Divs", ["float32", "scalar:float32"], "ascend910", "allow_fp32_to_fp16")
    assert unknown.verdict == "unverified" and "no GE adapter" in unknown.reason
    conv = verdict("Conv2D", ["float32", "float32"], "ascend910b", mode)
    assert conv.verdict == "aicore" and conv.cann_op == "Conv2D"
    assert verdict("Conv2D", ["float32", "float32"], "ascend910", "allow_fp32_to_fp16").verdict == (
        "aicore(fp16)"
    )


def test_tensor_dtypes_as_the_ir_listing_writes_them():
    written = ["float32", "tuple[float16*3]", "list[int32,float32]", "scalar:int64",
               "tuple[scalar:int64*2]", "none", "monad", None]  # fmt: skip
    assert [tensor_dtype(t) for t in written] == [
        "float32", "float16", "int32", None, None, None, None, None]  # fmt: skip


def test_a_chips_table_merges_like_rows_and_counts_the_plain_ones():
    mode = "allow_fp32_to_fp16"
    rows = [Row("train", "TopK", ["float32", "scalar:int64"], [], 2),
            Row("train", "TopK", ["float32", "scalar:int64"], [], 3),
            Row("train", "Conv2D", ["float16", "float16"], [], 7),
            Row("train", "Reshape", ["float32"], [], 4)]  # fmt: skip
    findings = [judge(r, "ascend910", mode, TABLES, MAPPING, {"TopK": 1e9}) for r in rows]
    assert summarise(findings) == {"ascend910": {"overflows": 2, "aicore": 1, "nop": 1}}
    table = format_chip("ascend910", mode, findings).splitlines()
    assert table[0] == "== ascend910 (precision mode allow_fp32_to_fp16) =="
    assert table[2].split()[:5] == ["train", "TopK", "float32", "5", "TopKV2"]
    assert table[2].endswith("overflows (inputs up to 1e+09)")
    assert table[-1] == "and 11 primitives on AI Core kernels or reshapes"
