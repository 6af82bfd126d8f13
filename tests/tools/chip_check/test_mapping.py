"""The MindSpore-to-CANN mapping and the bundled tables: every operator the mapping leads to
has its CANN 8.1.RC1 entry."""

from __future__ import annotations

from msdet.tools.chip_check import cann_tables
from msdet.tools.chip_check.mapping import cann_ops_needed, load_mapping

TABLES = cann_tables.load_tables()
MAPPING = load_mapping()


def test_the_bundled_tables_hold_every_operator_the_mapping_leads_to():
    assert TABLES["_meta"]["cann"] == "CANN 8.1.RC1"
    missing = [op for op in cann_ops_needed() if op not in TABLES]
    assert missing == []
    # What CANN 8.1.RC1 says of the two operators the third review named:
    assert TABLES["TopKV2"]["ascend910"]["aicore"]["combos"] == [["float16", "int32"]]
    assert ["float32", "int32"] in TABLES["TopKV2"]["ascend910b"]["aicore"]["combos"]
    assert TABLES["NMSWithMask"]["ascend910"]["aicore"]["combos"] == [["float16"]]
