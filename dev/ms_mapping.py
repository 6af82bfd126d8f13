"""The MindSpore primitive -> CANN operator mapping of the chip check
(``tools/chip_check/data/ms_to_cann.json``): which GE operator MindSpore's Ascend adapter
emits for a primitive, and whether MindSpore's kernel-by-kernel backend (jit level O0/O1)
runs it as an aclnn kernel instead. A maintainer tool (in a clone, not in the wheel).

    python -m msdet.dev.ms_mapping --ms-src MINDSPORE_SOURCE \
        --prims PRIMS.json [PRIMS.json ...] -o tools/chip_check/data/ms_to_cann.json

Sources: the GE adapters (``REG_ADPT_DESC(name, ms_name, ADPT_DESC(train_op[, infer_op]))``)
of a MindSpore source tree, under ``mindspore/ccsrc/plugin/res_manager/ascend/op_adapter/
op_declare`` (2.7) or ``mindspore/ccsrc/plugin/ascend/res_manager/op_adapter/op_declare``
(the layout the 2.10 wheel was built from, by the source paths its binary names); the names
of the installed wheel's headers (``include/``), then the source's; aclnn dispatch from the
source's ``mindspore/ops/op_def/yaml/*.yaml`` (``dispatch: enable``), confirmed by the
wheel's generated ``pyboost_<op>`` calls. ``PRIMS.json``: ``{"train": [[primitive, dtypes,
count], ...]}`` (what :mod:`msdet.tools.chip_check.ir` lists).

MindSpore 2.10's own sources could not be obtained where the bundled mapping was made (see
:data:`SOURCE_NOTE`): the adapters are read from 2.7.0's, and each entry records what the
installed 2.10 wheel's binaries confirm of it (:func:`wheel_evidence`): that the GE
operator type is a string of the adapter library, that the aclnn API is a string of the
Ascend kernel library, that a GE fallback expander of that name is a string of the backend
library. A string proves an adapter or kernel may exist, not that it does; its absence is
the stronger evidence. Besides the primitives msdet's graphs use (``map``), the file lists
every adapter the sources register (``adapters``), so that the chip check can name the GE
operator of a primitive it was not derived for.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re


def _wheel() -> str:
    import importlib.util

    spec = importlib.util.find_spec("mindspore")  # found, not imported
    return list(spec.submodule_search_locations)[0]


WHEEL = _wheel()
ADAPTER_DIRS = (
    "mindspore/ccsrc/plugin/ascend/res_manager/op_adapter/op_declare",  # 2.10 (its binary)
    "mindspore/ccsrc/plugin/res_manager/ascend/op_adapter/op_declare",  # 2.7
)
# Where the bundled mapping's sources came from, and why not from 2.10.
SOURCE_NOTE = (
    "GE adapters from MindSpore 2.7.0 (github:mindspore-ai/mindspore_test, branch r2.7.rc1, "
    "commit a05ce58, 2025-07-05; version.txt 2.7.0). MindSpore 2.10's sources were not "
    "obtainable: the github:mindspore-ai/mindspore snapshot (563 MB) exceeds the fetch "
    "limit (524 MB), the code index holds only 1.x-era files of that repository, and the "
    "newest indexed copies of op_declare/*.cc (2.10's layout) come from a tree whose "
    "version.txt reads 2.7.2.rc1. The 2.10 wheel's binaries were checked per entry "
    "(wheel_2_10 fields)."
)
# The 2.10 wheel's binaries the evidence is read from (relative to the mindspore package).
WHEEL_ADAPTERS = "lib/plugin/ascend/libmindspore_ascend_res_manager.so"
WHEEL_ACLNN = "lib/plugin/libmindspore_ops_ascend.so"
WHEEL_FALLBACK = "lib/libmindspore_backend_common.so"
WHEEL_GE_BACKEND = "lib/libmindspore_ge_backend.so"
WHEEL_ASCEND = "lib/plugin/libmindspore_ascend.so.2"  # the kernel-by-kernel Ascend backend

# KBK (O0/O1) ops the Ascend backend gives an RT (no-launch) kernel before any aclop:
# kernel_select_ascend.cc SelectKernelInfoWithMsg (2.7).
KBK_NOP = {
    "Reshape",
    "ReshapeExt",
    "ExpandDims",
    "Squeeze",
    "Flatten",
    "FlattenGrad",
    "MoveTo",
    "MoveAssign",
    "Reformat",
}
# GE backend (jit_level O2): a node without a GE adapter is expanded by the fallback
# expander (backend/ge_backend/pass/expander_fallback.cc -> backend/common/expander/
# fallback/*.cc REG_FALLBACK_BUILDER, 2.7 source), read by hand:
GE_FALLBACK = {
    "SumExt": ["Cast", "ReduceSum"],  # fallback/math_ops.cc
    "Muls": ["Cast", "Mul"],  # fallback/math_ops.cc
    "ZerosLikeExt": ["ZerosLike", "Cast"],  # fallback/array_ops.cc
    "SplitWithSize": ["SplitV", "Slice"],  # fallback/array_ops.cc SplitWithSizeFallbackFunc
    "Divs": None,  # no fallback builder in 2.7: GE would fail
    "LessScalar": None,  # op newer than 2.7: unknown
}
# Primitives MindSpore's Ascend backend splits before kernel selection, on both backends
# (backend/common/pass/ir_fission/bn_split.cc SyncBnSplit and bn_grad_split.cc
# SyncBnGradSplit, added by ge_backend_optimization.cc and by the kernel-by-kernel
# backend_common_unify_mindir.cc; 2.7 source, read by hand): the GE operators they become.
BACKEND_SPLIT = {
    "SyncBatchNorm": ["BNTrainingReduce", "HcomAllReduce", "Mul", "BNTrainingUpdate"],
    "SyncBatchNormGrad": ["BNTrainingUpdateGrad", "HcomAllReduce", "Mul", "BNTrainingReduceGrad"],
}
BACKEND_SPLIT_PASS = {"SyncBatchNorm": "SyncBnSplit", "SyncBatchNormGrad": "SyncBnGradSplit"}
VIRTUAL = {
    "Depend",
    "Load",
    "UpdateState",
    "MakeTuple",
    "TupleGetItem",
    "make_list",
    "Return",
    "StopGradient",
}


def read(path):
    with open(path, encoding="utf-8", errors="replace") as f:
        return f.read()


def string_constants(roots):
    consts = {}
    pat = re.compile(
        r'constexpr\s+(?:const\s+)?(?:char|auto)\s*(?:\*\s*)?(?:const\s+)?(\w+)(?:\[\])?\s*=\s*"([^"]*)"'
    )
    for root in roots:
        for path in glob.glob(os.path.join(root, "**", "*.h"), recursive=True):
            for m in pat.finditer(read(path)):
                consts.setdefault(m.group(1), m.group(2))
    return consts


def prim_defs(roots, consts):
    prims = {}
    pat = re.compile(
        r"GVAR_DEF\(\s*PrimitivePtr\s*,\s*(kPrim\w+)\s*,\s*std::make_shared<Primitive>\(\s*([^,)]+)"
    )
    for root in roots:
        for path in glob.glob(os.path.join(root, "**", "*.h"), recursive=True):
            for m in pat.finditer(read(path)):
                expr = m.group(2).strip()
                val = expr.strip('"') if expr.startswith('"') else consts.get(expr.split("::")[-1])
                if val:
                    prims.setdefault(m.group(1), val)
    return prims


def resolve_name(expr, consts, prims):
    expr = expr.strip()
    if expr.startswith('"'):
        return expr.strip('"')
    m = re.fullmatch(r"(?:\w+::)*(kPrim\w+)->name\(\)", expr)
    if m:
        return prims.get(m.group(1), m.group(1)[len("kPrim") :])
    last = expr.split("::")[-1]
    if last in consts:
        return consts[last]
    if last.startswith("kName"):
        return last[len("kName") :]
    return None


def adapter_files(ms_src):
    """The adapter sources of the tree ``ms_src``, in whichever layout it has."""
    for folder in ADAPTER_DIRS:
        files = sorted(glob.glob(os.path.join(ms_src, folder, "*.cc")))
        if files:
            return files
    raise SystemExit(f"no GE adapter sources (op_declare/*.cc) under {ms_src}")


def in_binary(data: bytes, name: str) -> bool | str:
    """Whether ``name`` is a NUL-terminated string of a binary: True for a string of its own,
    the longer string for one that only ends with it (linkers merge a literal into a longer
    one with the same tail, so this is no proof either way), False when absent."""
    key = name.encode() + b"\0"
    if not name or key not in data:
        return False
    if b"\0" + key in data:
        return True
    at = data.index(key)
    return data[data.rfind(b"\0", 0, at) + 1 : at + len(key) - 1].decode(errors="replace")


def wheel_evidence(entry: dict, name: str, binaries: dict) -> dict:
    """What the installed wheel's binaries say of one mapping entry (see the module
    docstring): the GE operator type among the adapter library's strings, the aclnn API
    among the Ascend kernel library's, the fallback expander among the backend's."""
    out = {}
    if entry.get("cann_op"):
        out["ge_op_string"] = in_binary(binaries["adapters"], entry["cann_op"])
    if entry.get("aclnn_kernel", "").startswith("aclnn"):
        out["aclnn_string"] = in_binary(binaries["aclnn"], entry["aclnn_kernel"])
    if "ge_fallback_expands_to" in entry:
        out["fallback_string"] = in_binary(binaries["fallback"], name)
    if name in BACKEND_SPLIT_PASS:  # the pass's class, by its mangled name
        mangled = f"{len(BACKEND_SPLIT_PASS[name])}{BACKEND_SPLIT_PASS[name]}E".encode()
        out["split_pass_ge"] = mangled in binaries["ge_backend"]
        out["split_pass_kbk"] = mangled in binaries["ascend"]
    return out


def ge_adapters(ms_src, consts, prims):
    # REG_ADPT_DESC(name, ms_name, ADPT_DESC(T[, I]))   (T: training graphs, I: inference)
    # REG_ADPT_DESC(name, ms_name, CUST_ADPT_DESC(T))   (MindSpore's own custom op "Cust"+T)
    # REG_ADPT_DESC(name, ms_name, std::make_shared<OpAdapterDesc>(
    #     std::make_shared<OpAdapter<T>>("T", ExtraAttr(...)), ...))
    reg = re.compile(
        r"REG_ADPT_DESC\(\s*(\w+)\s*,\s*([^,]+?)\s*,(.*?)\)\s*;?\s*\n(?=\s*(?://|REG_|INPUT_|CUST_|ATTR_|OUTPUT_|DYN_|SUBGRAPH_|#|}|\n|$))",
        re.S,
    )
    out = {}
    for path in adapter_files(ms_src):
        text = read(path)
        for m in reg.finditer(text):
            ms_name = resolve_name(m.group(2), consts, prims)
            body = m.group(3)
            mm = re.search(r"\b(CUST_)?ADPT_DESC\(([^)]*)\)", body)
            if mm:
                ops = [("Cust" if mm.group(1) else "") + o.strip() for o in mm.group(2).split(",")]
            else:
                ops = re.findall(r"OpAdapter<\s*(\w+)\s*>", body)
            if not ops:
                continue
            if ms_name is None:
                continue
            entry = {
                "train": ops[0],
                "infer": ops[-1],
                "file": os.path.relpath(path, ms_src),
                "reg": m.group(1),
            }
            out.setdefault(ms_name, entry)
    return out


def input_maps(ms_src):
    """{GE op type: {ms_input_index(1-based): ge_input_name}} from INPUT_MAP / DYN_INPUT_MAP
    (and the CUST_ variants), so MindSpore input k can be matched by NAME to the CANN
    table's ``input<i>.name``. INPUT_ATTR_MAP entries (MindSpore inputs that become GE
    attributes) are recorded under "attr_inputs"."""
    res = {}
    pat = re.compile(r"\b(CUST_)?(DYN_)?INPUT_(ATTR_)?MAP\((\w+)\)\s*=\s*\{(.*?)\};", re.S)
    for path in adapter_files(ms_src):
        for m in pat.finditer(read(path)):
            cust, dyn, attr, op, body = m.groups()
            op = ("Cust" if cust else "") + op
            e = res.setdefault(op, {"inputs": {}, "dyn_inputs": {}, "attr_inputs": {}})
            if attr:
                for i, name in re.findall(r"\{\s*(\w+)\s*,\s*ATTR_DESC\(\s*(\w+)", body):
                    e["attr_inputs"][_idx(i)] = name
            else:
                for i, name in re.findall(
                    r"\{\s*(\w+)\s*,\s*(?:DYN_)?INPUT_DESC\(\s*(\w+)\s*\)", body
                ):
                    (e["dyn_inputs"] if dyn else e["inputs"])[_idx(i)] = name
    return res


def _idx(tok):
    if tok.isdigit():
        return int(tok)
    m = re.fullmatch(r"kIndex(\d+)", tok)
    return int(m.group(1)) if m else tok


def yaml_dispatch(ms_src):
    """{ClassName: {"enable": bool, "ascend": str|None}} from op_def yaml (plain parse)."""
    import yaml  # PyYAML

    res = {}
    for path in glob.glob(
        os.path.join(ms_src, "mindspore/ops/op_def/yaml/**/*_op.yaml"), recursive=True
    ):
        if "/doc/" in path:
            continue
        try:
            data = yaml.safe_load(read(path))
        except Exception:  # noqa: BLE001
            continue
        if not isinstance(data, dict):
            continue
        for op, spec in data.items():
            if not isinstance(spec, dict):
                continue
            cls = (
                (spec.get("class") or {}).get("name")
                if isinstance(spec.get("class"), dict)
                else None
            )
            cls = cls or "".join(w.capitalize() for w in op.split("_"))
            d = spec.get("dispatch") or {}
            res[cls] = {
                "enable": bool(d.get("enable", False)),
                "op": op,
                "ascend": d.get("Ascend", "default") if d.get("enable") else None,
                "yaml": os.path.relpath(path, ms_src),
            }
    return res


def aclnn_apis_in_customize(ms_src, kernel_name):
    """aclnnXxx names used by the hand-written aclnn KernelMod ``kernel_name`` (the class
    that ``MS_ACLNN_KERNEL_FACTORY_REG(Op, kernel_name)`` registers, in opapi/aclnn/*.cc|h)."""
    if not kernel_name or kernel_name == "default":
        return []
    names = set()
    for path in glob.glob(os.path.join(ms_src, "mindspore/ops/kernel/ascend/opapi/aclnn/*.cc")):
        text = read(path)
        if not re.search(
            r"KERNEL_FACTORY_REG\(\s*\w+\s*,\s*" + re.escape(kernel_name) + r"\s*\)", text
        ):
            continue
        hdr = path[:-3] + ".h"
        for t in (text, read(hdr) if os.path.exists(hdr) else ""):
            names.update(re.findall(r"\baclnn[A-Z]\w+", t))
    return sorted(n for n in names if not n.endswith("GetWorkspaceSize"))


def wheel_pyboost():
    """snake names ``x`` of every ``pyboost_x`` the 2.10 wheel's Python imports from
    ``mindspore._c_expression`` (generated only for dispatch-enabled ops)."""
    names = set()
    for path in glob.glob(os.path.join(WHEEL, "ops", "**", "*.py"), recursive=True):
        names.update(re.findall(r"\bpyboost_(\w+)", read(path)))
    return names


def wheel_version() -> str:
    """The installed MindSpore's version (read from its version.py, not imported)."""
    text = read(os.path.join(WHEEL, "version.py"))
    m = re.search(r"__version__\s*=\s*['\"]([^'\"]+)", text)
    return f"MindSpore {m.group(1) if m else '?'} wheel"


def snake(name):
    return re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", name).lower()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ms-src", required=True, help="a MindSpore source tree")
    ap.add_argument("--prims", nargs="+", required=True)
    ap.add_argument("-o", "--out", default="ms_to_cann.json")
    a = ap.parse_args()

    inc = os.path.join(WHEEL, "include")
    consts = string_constants([inc, os.path.join(a.ms_src, "mindspore")])
    prims = prim_defs([inc, os.path.join(a.ms_src, "mindspore")], consts)
    ge = ge_adapters(a.ms_src, consts, prims)
    disp = yaml_dispatch(a.ms_src)
    aclnn_cfg = {}
    cfgp = os.path.join(
        a.ms_src, "mindspore/python/mindspore/ops_generate/pyboost/aclnn_config.yaml"
    )
    if os.path.exists(cfgp):
        import yaml

        aclnn_cfg = yaml.safe_load(read(cfgp)) or {}
    pyboost = wheel_pyboost()
    imaps = input_maps(a.ms_src)

    used = set()
    for p in a.prims:
        with open(p, encoding="utf-8") as f:
            d = json.load(f)
        for rows in d.values():  # {graph: [[primitive, dtypes, count], ...]}
            used.update(row[0] for row in rows)
    used -= VIRTUAL
    binaries = {}
    for key, rel in (("adapters", WHEEL_ADAPTERS), ("aclnn", WHEEL_ACLNN),
                     ("fallback", WHEEL_FALLBACK), ("ge_backend", WHEEL_GE_BACKEND),
                     ("ascend", WHEEL_ASCEND)):  # fmt: skip
        with open(os.path.join(WHEEL, rel), "rb") as f:
            binaries[key] = f.read()

    table = {}
    for name in sorted(used):
        g = ge.get(name)
        dd = disp.get(name, {})
        entry = {
            "cann_op": g["train"] if g else None,
            "cann_op_infer": g["infer"] if g and g["infer"] != g["train"] else None,
            "ge_adapter_file": g["file"] if g else None,
            "kbk_nop": name in KBK_NOP,
            "aclnn_dispatch_2_7_yaml": dd.get("enable", False),
            "aclnn_dispatch_2_10_wheel": (dd.get("op") or snake(name)) in pyboost,
        }
        if g and g["train"] in imaps:
            entry["ge_input_map"] = imaps[g["train"]]
        if not g and name in GE_FALLBACK:
            entry["ge_fallback_expands_to"] = GE_FALLBACK[name]
        if name in BACKEND_SPLIT:
            entry["backend_split_to"] = BACKEND_SPLIT[name]
        if dd.get("enable"):
            asc = dd.get("ascend")
            entry["aclnn_kernel"] = (
                aclnn_cfg.get(name, f"aclnn{name}") if asc == "default" else f"customize:{asc}"
            )
            if asc and asc != "default":
                entry["aclnn_apis_called"] = aclnn_apis_in_customize(a.ms_src, asc)
        entry["wheel_2_10"] = wheel_evidence(entry, name, binaries)
        table[name] = entry

    meta = {
        "how": __doc__.strip().splitlines()[0],
        "mindspore_source": SOURCE_NOTE,
        "mindspore_wheel": f"{wheel_version()} ({WHEEL_ADAPTERS}, {WHEEL_ACLNN}, {WHEEL_FALLBACK})",
        "sources": {
            "ge_adapters": os.path.relpath(os.path.dirname(adapter_files(a.ms_src)[0]), a.ms_src)
            + "/*.cc",
            "names": "the wheel's include/ headers (op_adapter_map.h kName*, *_op_name.h, "
            "GVAR_DEF kPrim*), then the source's",
            "dispatch": "the source's op_def/yaml, and the wheel's "
            "mindspore/ops/auto_generate/gen_ops_prim.py pyboost_* calls",
        },
        "n_ge_adapters_parsed": len(ge),
        "fields": {
            "cann_op": "GE op type the adapter emits in training graphs (ADPT_DESC first arg)",
            "cann_op_infer": "GE op type used for inference graphs when it differs (ADPT_DESC second arg)",
            "kbk_nop": "KBK backend gives it an RT kernel (nothing launched); GE treats it as a reshape-type no-op",
            "aclnn_dispatch_*": "KBK (O0/O1) runs it as an aclnn kernel (yaml dispatch enable), so the TBE table is not what decides",
            "aclnn_kernel": "aclnn API (auto-registered) or customize:<KernelMod> (hand-written, may call several aclnn APIs)",
            "wheel_2_10": "the 2.10 wheel's binaries hold the GE op type (ge_op_string), the "
            "aclnn API (aclnn_string), a fallback expander of this name (fallback_string), the "
            "split pass in the GE and kernel-by-kernel backends (split_pass_ge, _kbk)",
            "adapters": "every primitive the sources give a GE adapter: its GE op (training)",
            "backend_split_to": "the GE operators MindSpore's Ascend backend splits it into "
            "before kernel selection, on both backends (SyncBnSplit, SyncBnGradSplit)",
        },
    }
    adapters = {name: g["train"] for name, g in sorted(ge.items())}
    with open(a.out, "w") as f:
        json.dump({"_meta": meta, "map": table, "adapters": adapters}, f, indent=1)
    missing = [n for n, e in table.items() if not e["cann_op"] and not e["kbk_nop"]]
    print(len(table), "primitives;", len(ge), "GE adapters parsed; without GE adapter:", missing)


if __name__ == "__main__":
    main()
