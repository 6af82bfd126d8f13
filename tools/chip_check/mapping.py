"""The MindSpore primitive -> CANN operator mapping the chip check judges by, and the CANN
operators it can lead to (what the bundled tables must hold).

``data/ms_to_cann.json`` is derived from MindSpore's adapter sources by
:mod:`msdet.dev.ms_mapping` (a maintainer tool, in a clone); :data:`CANN_RENAMES` lists the
operator types CANN's own graph passes turn an operator into. ``data/waivers.json`` lists
the findings a person accepted, each with the reason (:func:`load_waivers`): the check does
not assume its mapping is complete, and anything it cannot place fails unless waived there.
"""

from __future__ import annotations

import json
import os

DATA_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")
MAPPING = os.path.join(DATA_DIR, "ms_to_cann.json")
# Whether each aclnn API the mapping dispatches to runs on the Atlas training series, with
# its evidence (the file's _meta says what counts).
ACLNN_SUPPORT = os.path.join(DATA_DIR, "aclnn_support.json")
WAIVERS = os.path.join(DATA_DIR, "waivers.json")
WAIVER_KEYS = ("prim", "reason", "chips", "graphs", "verdicts", "backends")
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

# HCCL's collectives: no operator table; the data types HCCL's API reference gives per product
# (CANN 8.0.0 hcclapiref, HcclAllReduce: Atlas training products int8, int32, int64, float16,
# float32; A2 and A3 also int16 and bfloat16; Atlas 300I Duo int8, int16, int32, float16,
# float32).
HCCL = {
    "HcomAllReduce": {
        "ascend910": ("int8", "int32", "int64", "float16", "float32"),
        "ascend910b": ("int8", "int16", "int32", "int64", "float16", "float32", "bfloat16"),
        "ascend910_93": ("int8", "int16", "int32", "int64", "float16", "float32", "bfloat16"),
        "ascend310p": ("int8", "int16", "int32", "float16", "float32"),
    },
}


def load_mapping(path: str | None = None, aclnn_path: str | None = None) -> dict:
    """The MindSpore primitive -> CANN operator mapping (and its sources), with the aclnn
    APIs' chip support under ``"aclnn_support"``."""
    with open(path or MAPPING, encoding="utf-8") as f:
        mapping = json.load(f)
    with open(aclnn_path or ACLNN_SUPPORT, encoding="utf-8") as f:
        mapping["aclnn_support"] = json.load(f)["apis"]
    return mapping


def cann_ops_needed(mapping: dict | None = None) -> list[str]:
    """Every CANN operator the mapping can lead to, renames included (what the bundled
    tables must hold; HCCL's collectives have no operator table: :data:`HCCL`)."""
    ops = set()
    for entry in (mapping or load_mapping())["map"].values():
        names = [entry.get("cann_op"), entry.get("cann_op_infer")]
        names += list(entry.get("ge_fallback_expands_to") or [])
        names += list(entry.get("backend_split_to") or [])
        for name in (n for n in names if n and n not in HCCL):
            ops |= {name, *CANN_RENAMES.get(name, [])}
    return sorted(ops)


def load_waivers(path: str | None = None) -> list[dict]:
    """The waivers (``{"waivers": [{"prim", "reason", optional "chips", "graphs",
    "verdicts", "backends": lists}]}``) checked: each names a primitive and gives a
    non-empty reason; the lists narrow where it applies."""
    path = path or WAIVERS
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    waivers = data.get("waivers") if isinstance(data, dict) else None
    if not isinstance(waivers, list):
        raise ValueError(f'{path}: expected {{"waivers": [...]}}')
    for i, waiver in enumerate(waivers):
        where = f"{path}: waivers[{i}]"
        if not isinstance(waiver, dict) or not str(waiver.get("prim") or "").strip():
            raise ValueError(f"{where}: needs a 'prim' (the MindSpore primitive it waives)")
        if not str(waiver.get("reason") or "").strip():
            raise ValueError(f"{where} ({waiver['prim']}): needs a 'reason'")
        unknown = sorted(set(waiver) - set(WAIVER_KEYS))
        if unknown:
            raise ValueError(f"{where} ({waiver['prim']}): unknown keys {unknown}")
        for key in WAIVER_KEYS[2:]:
            if key in waiver and not (
                isinstance(waiver[key], list) and all(isinstance(v, str) for v in waiver[key])
            ):
                raise ValueError(f"{where} ({waiver['prim']}): '{key}' must be a list of names")
    return waivers


def waiver_for(waivers: list[dict], prim: str, chip: str, graph: str, verdict: str,
               backend: str) -> dict | None:  # fmt: skip
    """The first waiver that covers a finding, or None."""
    for waiver in waivers:
        if waiver["prim"] != prim:
            continue
        wanted = (("chips", chip), ("graphs", graph), ("verdicts", verdict), ("backends", backend))
        if all(key not in waiver or value in waiver[key] for key, value in wanted):
            return waiver
    return None
