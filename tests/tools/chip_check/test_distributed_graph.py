"""The 8-card training step in the chip check: the gradient reducer's and the overflow flag's
AllReduce (HCCL's data types per chip) and SyncBatchNorm (split by MindSpore's backend into
BNTrainingReduce, AllReduce, Mul and BNTrainingUpdate, judged by the tables). The graph
itself, compiled for both chips: tests/tools/chip_check/test_main.py."""

from __future__ import annotations

from msdet.tools.chip_check.cann_tables import load_tables
from msdet.tools.chip_check.graphs import distributed_graph
from msdet.tools.chip_check.mapping import HCCL, load_mapping
from msdet.tools.chip_check.verdict import FAILING, Row, judge

TABLES, MAPPING = load_tables(), load_mapping()
GRAPH = distributed_graph(8)


def verdict(prim, dtypes, chip, backend="ge", mode="allow_fp32_to_fp16"):
    return judge(Row(GRAPH, prim, dtypes, [], 1), chip, mode, TABLES, MAPPING, backend=backend)


def test_all_reduce_is_judged_by_hccls_data_types_per_chip():
    ok = verdict("AllReduce", ["float32"], "ascend910")
    assert (ok.verdict, ok.cann_op) == ("hccl", "HcomAllReduce") and ok.verdict not in FAILING
    assert verdict("AllReduce", ["float32"], "ascend910b", "kbk").verdict == "hccl"
    # int16 sums: the A2's HCCL takes them, the Atlas training series' does not
    assert verdict("AllReduce", ["int16"], "ascend910b", "kbk").verdict == "hccl"
    bad = verdict("AllReduce", ["int16"], "ascend910")
    assert bad.verdict == "none" and "int8, int32, int64, float16, float32" in bad.reason
    assert "int16" not in HCCL["HcomAllReduce"]["ascend910"]


def test_sync_batchnorm_is_judged_as_the_operators_mindsporess_backend_splits_it_into():
    entry = MAPPING["map"]["SyncBatchNorm"]
    assert entry["backend_split_to"] == ["BNTrainingReduce", "HcomAllReduce", "Mul",
                                         "BNTrainingUpdate"]  # fmt: skip
    assert entry["wheel_2_10"] == {"split_pass_ge": True, "split_pass_kbk": True}
    for chip, backend in (("ascend910", "ge"), ("ascend910b", "kbk")):
        for prim in ("SyncBatchNorm", "SyncBatchNormGrad"):
            found = verdict(prim, ["float32"] * 5, chip, backend)
            assert found.verdict == "aicore", (chip, prim, found.reason)
            assert "HcomAllReduce" in found.cann_op
