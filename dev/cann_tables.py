"""CANN's operator tables, per chip, read from a CANN install: what the AI Core runs (the
dtype combinations of each input) and which AI CPU or host tables list an operator. A
maintainer tool (in a clone, not in the wheel): it writes the compact tables that
:mod:`msdet.tools.chip_check.cann_tables` loads and checks against.

msdet bundles a compact copy for the operators its graphs use
(``tools/chip_check/data/cann-8.1.RC1.json``), derived from CANN 8.1.RC1's toolkit by:

    python -m msdet.dev.cann_tables --cann-root $ASCEND_HOME_PATH \
        [--select-format] [-o tables.json]

``--cann-root`` is a real install's ``$ASCEND_HOME_PATH`` (``.../ascend-toolkit/latest``), a
version folder, its ``opp`` folder, or an extracted copy of the toolkit; the chip check then
takes ``--tables tables.json`` to check against that CANN instead of the bundled one.

Files read (relative to ``opp``): the AI Core tables
``built-in/op_impl/ai_core/tbe/config/<chip>/aic-<chip>-ops-info*.json`` (and vendors'
custom ones), the precompiled-binary lists ``.../tbe/kernel/config/<chip>/<opFile>.json``,
and the AI CPU / host CPU tables ``built-in/op_impl/aicpu/**/config/*.json``; with MindSpore
installed, also its own AI CPU and Ascend C operator tables. In an AI Core table each
``input<i>.dtype`` is a comma list with one entry per supported combination (the k-th
entries of all inputs form combination k); about a hundred operators per chip list no dtypes
at all (Conv2D, BNTraining*, Mul, Add, ...): their ``op_select_format`` decides at compile
time, which ``--select-format`` emulates (:mod:`msdet.dev.select_format`). AI CPU tables list
a set of dtypes per input, or none.

The readers of each kind of CANN file, the compact format and the command that writes it
belong together here (one file format, read and written in one place).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import sys

from msdet.tools.chip_check.mapping import cann_ops_needed

DEFAULT_CHIPS = ["ascend910", "ascend910b", "ascend310p", "ascend310b"]
CHIP_NAMES = {
    "ascend910": "Atlas training series (910A/910 ProA/ProB/PremiumA; SoC Short name Ascend910)",
    "ascend910b": "Atlas A2 training/inference (910B1-B4; Ascend910B)",
    "ascend910_93": "Atlas A3 (Ascend910_93)",
    "ascend310p": "Atlas inference 300I Pro/Duo, 300V (Ascend310P)",
    "ascend310b": "Atlas 200I/500 A2 (Ascend310B)",
}

_DT = {
    "float": "float32",
    "float32": "float32",
    "float16": "float16",
    "half": "float16",
    "double": "float64",
    "float64": "float64",
    "bfloat16": "bfloat16",
    "bf16": "bfloat16",
    "bool": "bool",
    "int8": "int8",
    "int16": "int16",
    "int32": "int32",
    "int64": "int64",
    "uint8": "uint8",
    "uint16": "uint16",
    "uint32": "uint32",
    "uint64": "uint64",
    "uint1": "uint1",
    "int4": "int4",
    "complex32": "complex32",
    "complex64": "complex64",
    "complex128": "complex128",
    "hifloat8": "hifloat8",
    "float8_e5m2": "float8_e5m2",
    "float8_e4m3fn": "float8_e4m3fn",
}


def norm_dtype(d: str) -> str:
    d = d.strip()
    if d.upper().startswith("DT_"):
        d = d[3:].lower()
        d = {"bf16": "bfloat16", "float": "float32", "double": "float64"}.get(d, d)
        return d
    return _DT.get(d.lower(), d.lower())


def snake(name: str) -> str:
    """CANN's default opFile for an op type: Conv2DBackpropInput -> conv2d_backprop_input,
    TopKV2 -> top_k_v2, BNTrainingReduce -> bn_training_reduce (used when no "opFile")."""
    s = re.sub(r"(\d)D(?=[A-Z]|$)", r"\1d", name)
    s = re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", s)
    s = re.sub(r"(?<=[A-Z])([A-Z](?:[a-z]|\d))", r"_\1", s)
    return s.lower()


# ---------------------------------------------------------------------------- locate


def find_opp(root: str | None) -> str:
    cands = []
    if root:
        root = os.path.abspath(os.path.expanduser(root))
        cands += [root, os.path.join(root, "opp")]
        cands += sorted(glob.glob(os.path.join(root, "*", "opp")))
        cands += sorted(glob.glob(os.path.join(root, "Ascend", "ascend-toolkit", "*", "opp")))
        cands += sorted(glob.glob(os.path.join(root, "ascend-toolkit", "*", "opp")))
        cands += sorted(glob.glob(os.path.join(root, "**", "opp"), recursive=True))
    else:
        for var in ("ASCEND_OPP_PATH",):
            if os.environ.get(var):
                cands.append(os.environ[var])
        for var in ("ASCEND_HOME_PATH", "ASCEND_TOOLKIT_HOME"):
            if os.environ.get(var):
                cands.append(os.path.join(os.environ[var], "opp"))
        cands.append("/usr/local/Ascend/ascend-toolkit/latest/opp")
    for c in cands:
        if os.path.isdir(os.path.join(c, "built-in", "op_impl")):
            return c
    raise SystemExit(f"no CANN opp folder (built-in/op_impl) under {root or cands}")


def mindspore_dir(path: str | None) -> str | None:
    if path:
        return path
    try:
        import importlib.util

        spec = importlib.util.find_spec("mindspore")  # does not import it
        if spec and spec.submodule_search_locations:
            return list(spec.submodule_search_locations)[0]
    except Exception:  # noqa: BLE001
        pass
    return None


# ---------------------------------------------------------------------------- loading


def _load(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def _found(*parts: str) -> list[str]:
    """Sorted paths matching ``parts`` joined (a pattern; ``**`` crosses folders)."""
    return sorted(glob.glob(os.path.join(*parts), recursive=True))


def load_aicore(opp: str, chip: str, ms_dir: str | None = None):
    """(merged table {op: info}, [files]) for one chip. Built-in first; vendor/custom
    tables override (GE gives custom ops priority)."""
    tables = f"op_impl/ai_core/tbe/config/{chip}/aic-{chip}-ops-info*.json"
    files = _found(opp, "built-in", tables) + _found(opp, "vendors", "*", tables)
    if ms_dir:
        files += _found(ms_dir, "lib/plugin/ascend/custom_*", tables)
    table = {}
    for f in files:
        for op, info in _load(f).items():
            info = dict(info)
            info["_file"] = f
            table[op] = info
    return table, files


def load_aicpu(opp: str, ms_dir: str | None = None):
    """{op: [entries from each AI CPU / host CPU table that lists it]}"""
    files = _found(opp, "built-in/op_impl/aicpu/**/config/*.json")
    files += _found(opp, "vendors/*/op_impl/cpu/config/*.json")
    if ms_dir:
        files += _found(ms_dir, "lib/plugin/ascend/custom_aicpu_ops/op_impl/cpu/config/*.json")
    table = {}
    for f in files:
        try:
            data = _load(f)
        except Exception:  # noqa: BLE001
            continue
        if not isinstance(data, dict):
            continue
        for op, info in data.items():
            if not isinstance(info, dict) or "opInfo" not in info:
                continue
            table.setdefault(op, []).append((f, info))
    return table, files


def _ios(info: dict, kind: str):
    keys = sorted(
        (k for k in info if re.fullmatch(kind + r"\d+", k)), key=lambda k: int(k[len(kind) :])
    )
    return [info[k] for k in keys]


def _split(v):
    return [x.strip() for x in str(v).replace("\\", "").split(",") if x.strip()]


def aicore_entry(info: dict, opp: str, chip: str, op: str) -> dict:
    ins, outs = _ios(info, "input"), _ios(info, "output")
    has_dtype = any("dtype" in i for i in ins + outs)
    flag = lambda k: (info.get(k) or {}).get("flag")  # noqa: E731
    op_file = (info.get("opFile") or {}).get("value") or snake(op)

    def io(lst):
        res = []
        for x in lst:
            d = {"name": x.get("name"), "paramType": x.get("paramType")}
            if "dtype" in x:
                d["dtype"] = [norm_dtype(t) for t in _split(x["dtype"])]
            for k in ("format", "unknownshape_format"):
                if k in x:
                    d[k] = _split(x[k])
            if "valueDepend" in x:
                d["valueDepend"] = x["valueDepend"]
            res.append(d)
        return res

    e = {
        "opFile": op_file,
        "dtype_source": "table"
        if has_dtype
        else f"op_select_format (impl/{op_file}.py or impl/dynamic/{op_file}.py)",
        "inputs": io(ins),
        "outputs": io(outs),
        "flags": {
            k: flag(k)
            for k in (
                "dynamicFormat",
                "dynamicShapeSupport",
                "dynamicRankSupport",
                "dynamicCompileStatic",
                "needCheckSupport",
                "precision_reduce",
                "jitCompile",
                "heavyOp",
            )
            if flag(k) is not None
        },
    }
    for k in ("aclnnSupport", "coreType", "op", "slicePattern"):
        if k in info:
            e["flags"][k] = info[k].get("value") or info[k].get("pattern")
    if has_dtype:
        lists = [x.get("dtype") for x in e["inputs"]]
        n = max((len(values) for values in lists if values), default=0)
        combos = []
        for k in range(n):
            c = tuple(values[k] if values and k < len(values) else None for values in lists)
            if c not in combos:
                combos.append(c)
        e["input_dtype_combos"] = [list(c) for c in combos]
    bins = binary_combos(opp, chip, op_file)
    if bins is not None:
        e["binary_kernels"] = bins
    src = info.get("_file", "")
    if "/vendors/" in src or "/custom_" in src:
        e["file"] = src
    return e


def binary_combos(opp: str, chip: str, op_file: str):
    base = os.path.join(opp, "built-in", "op_impl", "ai_core", "tbe", "kernel", "config", chip)
    cands = [op_file, re.sub(r"v(\d)d$", r"v\1_d", op_file), op_file.replace("_", "")]
    path = next(
        (
            os.path.join(base, c + ".json")
            for c in cands
            if os.path.exists(os.path.join(base, c + ".json"))
        ),
        None,
    )
    if path is None:
        return None
    try:
        data = _load(path)
    except Exception:  # noqa: BLE001
        return None
    combos = []
    for b in data.get("binList", []):
        c = [
            norm_dtype(i["dtype"]) if isinstance(i, dict) and i.get("dtype") else None
            for i in b.get("inputs", [])
        ]
        if c not in combos:
            combos.append(c)
    return {
        "file": os.path.relpath(path, opp),
        "input_dtype_combos": combos,
        "note": "precompiled dynamic-shape binaries; op_select_format/static compile may allow more",
    }


def aicpu_entry(entries):
    res = []
    for f, info in entries:
        oi = info.get("opInfo", {})
        e = {
            "table": os.path.basename(f),
            "opKernelLib": oi.get("opKernelLib"),
            "engine": oi.get("engine"),
            "kernelSo": oi.get("kernelSo"),
        }
        ins = _ios(info, "input")
        if ins and any("type" in i for i in ins):
            e["inputs"] = [
                {
                    "name": i.get("name"),
                    "dtypes": [norm_dtype(t) for t in _split(i.get("type", ""))] or None,
                }
                for i in ins
            ]
        else:
            e["inputs"] = None  # the table does not say
        res.append(e)
    return res


# ---------------------------------------------------------------------------- query


def derive(opp: str, ops, chips, ms_dir=None, select_format=False):
    out = {"_meta": {"opp": opp, "chips": {c: CHIP_NAMES.get(c, c) for c in chips}, "files": {}}}
    emu = None
    if select_format:
        from msdet.dev.select_format import Emulator

        try:
            emu = Emulator(os.path.dirname(opp))
            out["_meta"]["select_format"] = (
                "op_select_format emulated (dev.select_format) with "
                "platform_config ini per chip; see its docstring for limits"
            )
        except FileNotFoundError as e:
            out["_meta"]["select_format"] = f"not available: {e}"
    aicpu, cpu_files = load_aicpu(opp, ms_dir)
    out["_meta"]["files"]["aicpu"] = cpu_files
    ver = os.path.join(opp, "version.info")
    if os.path.exists(ver):
        with open(ver, encoding="utf-8") as f:
            out["_meta"]["opp_version"] = f.read().strip()
    tables = {}
    for chip in chips:
        tables[chip], files = load_aicore(opp, chip, ms_dir)
        out["_meta"]["files"][chip] = files
    for op in ops:
        out[op] = {}
    for chip in chips:  # chip-major: the emulator keeps one chip's modules loaded
        for op in ops:
            info = tables[chip].get(op)
            ac = aicore_entry(info, opp, chip, op) if info else None
            if (
                ac
                and emu
                and "input_dtype_combos" not in ac
                and "/vendors/" not in info.get("_file", "")
                and "/custom_" not in info.get("_file", "")
            ):
                try:
                    r = emu.run(chip, op, ac["opFile"], info)
                except Exception as e:  # noqa: BLE001
                    r = {"error": f"{type(e).__name__}: {e}"}
                ac["select_format_emulated"] = r
                if r.get("combos"):
                    ac["input_dtype_combos"] = r["combos"]
                    ac["dtype_source"] = "op_select_format (emulated for {})".format(r.get("soc"))
            out[op][chip] = {
                "aicore": ac,
                "aicpu": aicpu_entry(aicpu[op]) if op in aicpu else None,
            }
    if emu:
        emu.close()
    return out


def compact(derived: dict, ops) -> dict:
    """What the chip check needs of :func:`derive`'s result, for ``ops``: per op and chip the
    AI Core's input names and dtype combinations (None when the table leaves them to
    ``op_select_format`` and nothing emulated them) and the AI CPU tables that list it."""
    meta = derived["_meta"]
    out = {
        "_meta": {
            "cann": meta.get("opp_version")
            or f"CANN {os.path.basename(os.path.dirname(meta['opp']))}",
            "chips": meta.get("chips"),
            "select_format": meta.get("select_format", "not emulated"),
            "derived_by": "python -m msdet.dev.cann_tables --select-format",
        }
    }
    for op in ops:
        per_chip = {}
        for chip, entry in (derived.get(op) or {}).items():
            ac, item = entry.get("aicore"), {}
            if ac:
                combos = ac.get("input_dtype_combos")
                item["aicore"] = {
                    "inputs": [i.get("name") for i in ac.get("inputs", [])],
                    "combos": [list(c) for c in dict.fromkeys(map(tuple, combos))]
                    if combos
                    else None,
                    "source": ac.get("dtype_source"),
                    "binary": (ac.get("binary_kernels") or {}).get("input_dtype_combos"),
                }
            if entry.get("aicpu"):
                item["aicpu"] = [
                    {"table": e["table"], "engine": e.get("engine"), "inputs": e["inputs"]}
                    for e in entry["aicpu"]
                ]
            per_chip[chip] = item
        out[op] = per_chip
    return out


def dumps_compact(tables: dict) -> str:
    """The compact tables as JSON text, one operator per line (diffs stay readable)."""
    lines = [f"{json.dumps(k)}: {json.dumps(v, sort_keys=True)}" for k, v in tables.items()]
    return "{\n" + ",\n".join(lines) + "\n}\n"


def summary_md(res) -> str:
    """One line per op: per chip the AI Core input-0 dtypes (or '-' when the op is not in
    the chip's AI Core table) and the AI CPU/host tables that list it."""
    chips = list(res["_meta"]["chips"])
    short = lambda d: (d or "?").replace("float", "f").replace("bf16", "bf16")  # noqa: E731
    lines = [
        "| op | " + " | ".join(chips) + " | AI CPU / host tables |",
        "|---|" + "---|" * len(chips) + "---|",
    ]
    for op, v in res.items():
        if op == "_meta":
            continue
        cells = []
        for c in chips:
            ac = v[c]["aicore"]
            if not ac:
                cells.append("**-**")
                continue
            combos = ac.get("input_dtype_combos")
            if combos is None:
                cells.append("select_format?" if ac.get("inputs") else "(no inputs)")
                continue
            first = sorted({x[0] for x in combos if x and x[0]})
            tag = "" if ac.get("dtype_source") == "table" else " (sel)"
            cells.append(",".join(short(d) for d in first) + tag)
        cpu = v[chips[0]]["aicpu"] or []
        cells.append(", ".join(sorted({e["table"].replace(".json", "") for e in cpu})) or "")
        lines.append(f"| {op} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cann-root")
    ap.add_argument("--chips", default=",".join(DEFAULT_CHIPS))
    ap.add_argument("--ops")
    ap.add_argument("--ops-file")
    ap.add_argument(
        "--mindspore", help="MindSpore package dir (its custom AI CPU / Ascend C op tables)"
    )
    ap.add_argument("--no-mindspore", action="store_true")
    ap.add_argument(
        "--select-format",
        action="store_true",
        help="emulate op_select_format for ops whose table has no dtype lists (needs the "
        "CANN tree's opp/.../tbe/impl, python/site-packages/tbe and <arch>-linux/data/platform_config)",
    )
    ap.add_argument("-o", "--out", default="-")
    ap.add_argument("--md", help="also write a one-line-per-op markdown summary here")
    ap.add_argument(
        "--full", action="store_true", help="every field CANN gives, not the compact form"
    )
    a = ap.parse_args(argv)
    ops = []
    if a.ops:
        ops += [o.strip() for o in a.ops.split(",") if o.strip()]
    if a.ops_file:
        with open(a.ops_file, encoding="utf-8") as f:
            ops += [line.split("#")[0].strip() for line in f if line.split("#")[0].strip()]
    if not ops:
        ops = cann_ops_needed()
    opp = find_opp(a.cann_root)
    ms = None if a.no_mindspore else mindspore_dir(a.mindspore)
    res = derive(opp, ops, [c.strip() for c in a.chips.split(",")], ms, a.select_format)
    res["_meta"]["mindspore_dir"] = ms
    if not a.full:
        res = compact(res, ops)
    if a.md and a.full:
        with open(a.md, "w") as f:
            f.write(summary_md(res))
    text = json.dumps(res, indent=1) if a.full else dumps_compact(res)
    if a.out == "-":
        sys.stdout.write(text + "\n")
    else:
        with open(a.out, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
