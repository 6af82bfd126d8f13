"""The MindSpore primitive -> CANN operator mapping the chip check judges by, and the CANN
operators it can lead to (what the bundled tables must hold).

``data/ms_to_cann.json`` is derived from MindSpore's adapter sources by :mod:`.ms_mapping`;
:data:`CANN_RENAMES` lists the operator types CANN's own graph passes turn an operator into.
"""

from __future__ import annotations

import json
import os

DATA_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")
MAPPING = os.path.join(DATA_DIR, "ms_to_cann.json")
# Operator types CANN's graph passes (GE/FE fusion and constant-to-attribute passes, in
# binaries) may turn a GE operator into before kernel selection: tried after the name itself.
CANN_RENAMES = {
    "TopK": ["TopKV2", "TopKD"],
    "BatchNorm": ["BNTrainingReduce", "BNTrainingUpdate", "BNInfer"],
    "BatchNormGrad": ["BNTrainingUpdateGrad", "BNTrainingReduceGrad", "BNInferGrad"],
    "Conv2DBackpropFilter": ["Conv2DBackpropFilterD"],
    "Conv2DBackpropInput": ["Conv2DBackpropInputD"],
    "Concat": ["ConcatD", "ConcatV2D", "ConcatV2"],
    "Tile": ["TileD"],
    "StridedSlice": ["StridedSliceD"],
    "ReduceSum": ["ReduceSumD"],
    "ReduceMax": ["ReduceMaxD"],
    "GatherV2": ["GatherV2D"],
    "OneHot": ["OneHotD"],
    "Fill": ["FillD"],
    "SplitV": ["SplitVD"],
    "BroadcastTo": ["BroadcastToD"],
    "Pad": ["PadD"],
    "ArgMaxWithValue": ["ArgMaxV2"],
}


def load_mapping(path: str | None = None) -> dict:
    """The MindSpore primitive -> CANN operator mapping (and its sources)."""
    with open(path or MAPPING, encoding="utf-8") as f:
        return json.load(f)


def cann_ops_needed(mapping: dict | None = None) -> list[str]:
    """Every CANN operator the mapping can lead to, renames included (what the bundled
    tables must hold)."""
    ops = set()
    for entry in (mapping or load_mapping())["map"].values():
        names = [entry.get("cann_op"), entry.get("cann_op_infer")]
        names += list(entry.get("ge_fallback_expands_to") or [])
        for name in filter(None, names):
            ops |= {name, *CANN_RENAMES.get(name, [])}
    return sorted(ops)
