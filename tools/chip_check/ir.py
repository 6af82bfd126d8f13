"""The primitives of the graphs MindSpore compiles for a Cell, with their input dtypes and
shapes as compiled, from MindSpore's own IR dump on this CPU.

With ``MS_DEV_SAVE_GRAPHS=1`` MindSpore 2.10 writes one IR text file per compiler pass into
``MS_DEV_SAVE_GRAPHS_PATH`` (both read at each compile). The file of the last frontend pass,
``NN_validate_NNNN.ir``, holds the whole graph after autodiff, inlining, AMP's casts and the
frontend's optimisation, before any device-specific pass: what an Ascend compile starts from.
Later files are not: the CPU backend expands primitives it has no kernel for (``SiLU`` into
``Mul`` and ``Sigmoid``, ...), which Ascend would not. A node there reads::

    %6(name) = PrimFunc_BatchNorm(%1, %2, ...) {instance name: ...} primitive_attrs: {...}
        : (<Tensor[Float32], (8, 8, 32, 32)>, <Bool, NoShape>, ...) -> (<Tuple[...]>)
        # Fullname with scope: (Default/bn-BatchNorm2d/BatchNorm-op1)

(``PrimFunc_`` marks primitives defined by MindSpore's op_def YAML.) A graph that holds a
primitive the CPU has no kernel for (the Ascend float-status register) still gets its
``validate`` file before the CPU backend refuses it: the listing does not need the compile
to succeed.
"""

from __future__ import annotations

import collections
import glob
import os
import re
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

# Primitive names that are graph plumbing, not kernels (no device kernel is launched).
VIRTUAL_PRIMS = {
    "Return",
    "MakeTuple",
    "TupleGetItem",
    "Depend",
    "UpdateState",
    "Load",
    "MakeList",
    "ListGetItem",
    "make_tuple",
    "tuple_getitem",
    "make_list",
    "list_getitem",
    "StopGradient",
    "stop_gradient",
    "RealMakeTuple",
    "RealTupleGetItem",
    "TensorMove",
    "Partial",
    "Switch",
    "SwitchLayer",
    "J",
    "ZerosLikeLeaf",
    "EnvironCreate",
    "EnvironGet",
    "EnvironSet",
    "MirrorMicroStep",
}
# Graph control flow (an ``if`` on a tensor): no kernel, but listed, because a graph that data
# sinking runs on the device should hold none (the chip check reports them).
CONTROL_FLOW = {"Switch", "SwitchLayer"}
# Primitives that are usually "no-op" (view/shape-only) on Ascend: GE treats Reshape,
# ExpandDims, Squeeze, Flatten as reshape-type nodes that launch no kernel (nop nodes).
NOP_ON_DEVICE = {"Reshape", "ExpandDims", "Squeeze", "Flatten", "FlattenGrad", "Unsqueeze"}

_DTYPE = {
    "Float16": "float16",
    "Float32": "float32",
    "Float64": "float64",
    "BFloat16": "bfloat16",
    "Int8": "int8",
    "Int16": "int16",
    "Int32": "int32",
    "Int64": "int64",
    "UInt8": "uint8",
    "UInt16": "uint16",
    "UInt32": "uint32",
    "UInt64": "uint64",
    "Bool": "bool",
    "Complex64": "complex64",
    "Complex128": "complex128",
}

_NODE_RE = re.compile(r"^\s+%(\d+)\(([^)]*)\)\s*=\s*([A-Za-z_][A-Za-z0-9_.]*)\((.*)$")
_ABS_RE = re.compile(r"^\s+:\s*\((.*)\)\s*->\s*\((.*)\)\s*$")


@dataclass
class Row:
    """One primitive of a graph with its input dtypes (and shapes), as compiled."""

    graph: str
    prim: str
    dtypes: list[str]
    shapes: list[Any]
    count: int
    scope: str = ""


def _split_top(s: str, sep: str = ",") -> list[str]:
    """Split ``s`` on ``sep`` at bracket depth 0 (brackets: <> [] ())."""
    out, depth, cur = [], 0, []
    for ch in s:
        if ch in "<[(":
            depth += 1
        elif ch in ">])":
            depth -= 1
        if ch == sep and depth == 0:
            out.append("".join(cur).strip())
            cur = []
        else:
            cur.append(ch)
    if "".join(cur).strip():
        out.append("".join(cur).strip())
    return out


def _norm_type(t: str) -> str:
    """``Tensor[Float32]`` -> ``float32``; ``Ref[Tensor[Float16]]`` -> ``float16``;
    ``Int64`` -> ``scalar:int64``; ``Tuple[Tensor[Float32]*3]`` -> ``tuple[float32*3]``;
    ``UMonad`` -> ``monad``; ``None`` -> ``none``."""
    t = t.strip()
    m = re.fullmatch(r"Ref\[(.*)\]", t)
    if m:
        return _norm_type(m.group(1))
    m = re.fullmatch(r"Tensor\[(\w+)\]", t)
    if m:
        return _DTYPE.get(m.group(1), m.group(1).lower())
    m = re.fullmatch(r"(Tuple|List)\[(.*)\]", t)
    if m:
        kind, body = m.group(1).lower(), m.group(2)
        if not body:
            return f"{kind}[]"
        parts = []
        for p in _split_top(body):
            mm = re.fullmatch(r"(.*)\*(\d+)", p)
            if mm:
                parts.append(f"{_norm_type(mm.group(1))}*{mm.group(2)}")
            else:
                parts.append(_norm_type(p))
        return f"{kind}[{','.join(parts)}]"
    if t in ("UMonad", "IOMonad"):
        return "monad"
    if t in _DTYPE:
        return "scalar:" + _DTYPE[t]
    if t == "None":
        return "none"
    return t


def _parse_abstract(item: str):
    """``<Tensor[Float32], (8, 3)>`` -> ("float32", [8, 3]); scalars -> (type, None)."""
    item = item.strip()
    if item.startswith("<") and item.endswith(">"):
        item = item[1:-1]
    parts = _split_top(item)
    typ = _norm_type(parts[0]) if parts else "?"
    shape = None
    if len(parts) > 1:
        sh = parts[1].strip()
        m = re.fullmatch(r"\(([-\d, ]*)\)", sh)
        if m:
            shape = [int(v) for v in m.group(1).replace(" ", "").split(",") if v]
        elif sh.startswith("TupleShape"):
            shape = sh  # keep text for tuples
    return typ, shape


def _split_attrs(body: str) -> list[str]:
    """``key: value`` items of a node's attribute text, split at commas outside brackets and
    quotes (values hold ``(3, 3)``, ``[x, w]``, ``"NCHW"``)."""
    out, depth, quoted, start = [], 0, False, 0
    for i, ch in enumerate(body):
        if ch == '"':
            quoted = not quoted
        elif not quoted and ch in "([{":
            depth += 1
        elif not quoted and ch in ")]}":
            depth -= 1
        elif not quoted and ch == "," and depth == 0:
            out.append(body[start:i].strip())
            start = i + 1
    if body[start:].strip():
        out.append(body[start:].strip())
    return out


def primitive_attrs(line: str) -> dict[str, str]:
    """The ``primitive_attrs: {...}`` of a node's line, as ``{name: value text}`` (``group``:
    ``I64(8)``, ``format``: ``"NCHW"``); empty when the line has none."""
    head = "primitive_attrs: {"
    at = line.find(head)
    if at < 0:
        return {}
    start = end = at + len(head)
    depth, quoted = 1, False
    while end < len(line) and depth:
        if line[end] == '"':
            quoted = not quoted
        elif not quoted and line[end] == "{":
            depth += 1
        elif not quoted and line[end] == "}":
            depth -= 1
        end += 1
    attrs = {}
    for item in _split_attrs(line[start : end - 1]):
        name, sep, value = item.partition(":")
        if sep:
            attrs[name.strip()] = value.strip()
    return attrs


def parse_ir_file(path: str) -> list[dict]:
    """All CNodes of one IR text file: dicts with prim, inputs [(dtype, shape)], outputs,
    scope and attrs (:func:`primitive_attrs`)."""
    nodes = []
    with open(path, encoding="utf-8", errors="replace") as f:
        lines = f.readlines()
    i = 0
    while i < len(lines):
        m = _NODE_RE.match(lines[i])
        if not m:
            i += 1
            continue
        prim = m.group(3)
        if prim == "Custom":  # ops.Custom: keep which function/kernel it is
            mf = re.search(r'func_name: "([^"]*)"', lines[i])
            prim = f"Custom:{mf.group(1)}" if mf else prim
        node = {"prim": prim, "inputs": [], "outputs": [], "scope": "",
                "attrs": primitive_attrs(lines[i])}  # fmt: skip
        # Constant tensor arguments are printed inline and may span several lines:
        # the abstract line is the first "    : (...) -> (...)" before the next node.
        j = i + 1
        while j < len(lines) and not _NODE_RE.match(lines[j]):
            ma = _ABS_RE.match(lines[j])
            if ma:
                node["inputs"] = [_parse_abstract(a) for a in _split_top(ma.group(1))]
                node["outputs"] = [_parse_abstract(a) for a in _split_top(ma.group(2))]
                break
            j += 1
        for k in range(j, min(j + 6, len(lines))):
            if "# Fullname with scope:" in lines[k]:
                node["scope"] = lines[k].split("(", 1)[1].rsplit(")", 1)[0]
                break
        nodes.append(node)
        i = j
    return nodes


def prim_name(raw: str) -> str | None:
    """IR callee -> primitive name; None for calls of sub-graphs/closures."""
    if raw.startswith("PrimFunc_"):
        return raw[len("PrimFunc_") :]
    if raw.startswith("S_Prim_"):  # composite/multitype ops (rare after validate)
        return raw[len("S_Prim_") :]
    if raw.startswith("@") or raw.startswith("%"):
        return None
    return raw


def _stage_files(dump_dir: str, stage: str) -> list[str]:
    if stage == "validate":
        pat = "*_validate_*.ir"
    elif stage == "backend_input":
        pat = "hwopt_d_before_optimization_without_backend_graph_*.ir"
    elif stage == "graph_build":
        pat = "graph_build_*.ir"
    else:
        pat = stage
    files = glob.glob(os.path.join(dump_dir, pat))
    return sorted(files, key=lambda p: int(re.search(r"_(\d+)\.ir$", p).group(1)))


def cell_path(scope: str) -> str:
    """The cells an operator sits in, from its scope (``Default/net-Net/conv-Conv2d/Conv2D-op3``
    -> ``Default/net-Net/conv-Conv2d``): what identifies an operator instance across two
    compiles of the same network, whose operator numbers differ."""
    return scope.rsplit("/", 1)[0] if "/" in scope else ""


def collect(
    dump_dir: str,
    stage: str = "validate",
    include_virtual: bool = False,
    by_shape: bool = True,
    by_cell: bool = False,
    rewrite: Callable[[dict], list[dict]] | None = None,
):
    """Parse a dump folder. Returns [(prim, [input dtypes], [input shapes], count, scope of
    the first)], sorted by primitive name; graph plumbing is left out unless
    ``include_virtual``, control flow (:data:`CONTROL_FLOW`) never. Monad inputs are
    dropped. With ``by_shape=False`` shapes are left out of the grouping key (the shapes of
    the first occurrence are returned); with ``by_cell`` the cells an operator sits in
    (:func:`cell_path`) are in it, one row per operator instance and shape. ``rewrite``:
    a backend pass applied to each parsed node first (one node in, the nodes it becomes
    out: :func:`.depthwise.rewrite_node`)."""
    counter = collections.OrderedDict()
    for path in _stage_files(dump_dir, stage):
        parsed = parse_ir_file(path)
        nodes = [new for node in parsed for new in rewrite(node)] if rewrite else parsed
        for node in nodes:
            name = prim_name(node["prim"])
            hidden = name in VIRTUAL_PRIMS and name not in CONTROL_FLOW
            if name is None or (not include_virtual and hidden):
                continue
            ins = [(t, s) for t, s in node["inputs"] if t != "monad"]
            dtypes = tuple(t for t, _ in ins)
            shapes = tuple(tuple(s) if isinstance(s, list) else s for _, s in ins)
            key = (name, dtypes, shapes if by_shape else None,
                   cell_path(node["scope"]) if by_cell else None)  # fmt: skip
            if key in counter:
                counter[key][3] += 1
            else:
                counter[key] = [
                    name,
                    list(dtypes),
                    [list(s) if isinstance(s, tuple) else s for s in shapes],
                    1,
                    node["scope"],
                ]
    return sorted((tuple(v) for v in counter.values()), key=lambda r: (r[0], r[1]))


def summarize(rows):
    """Group rows by (primitive, input dtypes): {(prim, dtypes): count}."""
    agg = collections.Counter()
    for prim, dtypes, _shapes, count, _scope in rows:
        agg[(prim, tuple(dtypes))] += count
    return dict(sorted(agg.items()))


def list_primitives(
    cell=None,
    *inputs,
    fn=None,
    stage="validate",
    keep_dir=None,
    include_virtual=False,
    by_shape=True,
    by_cell=False,
    rewrite=None,
):
    """Compile ``cell`` (``Cell.compile(*inputs)``, nothing runs) or call ``fn(*inputs)``
    once, with MindSpore's IR dump on; return ``collect(...)`` of the dump (``rewrite``:
    :func:`collect`'s).

    Put the context (GRAPH_MODE, device CPU, ``cell.set_train(True)`` for training
    graphs, AMP) in place before calling. ``keep_dir``: where to leave the IR files
    (default: a temporary folder that is removed)."""
    import mindspore as ms  # noqa: F401  (import after the caller set its environment)

    dump_dir = keep_dir or tempfile.mkdtemp(prefix="ms_ir_")
    os.makedirs(dump_dir, exist_ok=True)
    old = {k: os.environ.get(k) for k in ("MS_DEV_SAVE_GRAPHS", "MS_DEV_SAVE_GRAPHS_PATH")}
    os.environ["MS_DEV_SAVE_GRAPHS"] = "1"
    os.environ["MS_DEV_SAVE_GRAPHS_PATH"] = dump_dir
    try:
        if fn is not None:
            fn(*inputs)
        else:
            cell.compile(*inputs)
    except (RuntimeError, TypeError, ValueError):
        # The CPU backend may refuse a device-only primitive after the frontend's passes:
        # the validate file is there; without it there is nothing to list.
        if not _stage_files(dump_dir, stage):
            raise
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        if old["MS_DEV_SAVE_GRAPHS"] is None:
            _keep_later_dumps_out_of_the_working_directory()
    try:
        return collect(dump_dir, stage=stage, include_virtual=include_virtual, by_shape=by_shape,
                       by_cell=by_cell, rewrite=rewrite)  # fmt: skip
    finally:
        if keep_dir is None:
            shutil.rmtree(dump_dir, ignore_errors=True)


def _keep_later_dumps_out_of_the_working_directory() -> None:
    """MindSpore 2.10 keeps dumping IR once a process turned the dump on (unsetting the
    variables, or setting them to 0, does not stop it), into the working directory when no
    path is set: send this process's later dumps to a temporary folder removed at its exit.
    Callers that compile much afterwards should list primitives in a process of their own."""
    import atexit

    later = tempfile.mkdtemp(prefix="ms_ir_after_")
    os.environ["MS_DEV_SAVE_GRAPHS_PATH"] = later
    atexit.register(shutil.rmtree, later, ignore_errors=True)


if __name__ == "__main__":
    import argparse
    import json

    ap = argparse.ArgumentParser(description="parse a MindSpore IR dump folder")
    ap.add_argument("dump_dir")
    ap.add_argument("--stage", default="validate")
    ap.add_argument("--no-shapes", action="store_true")
    a = ap.parse_args()
    for r in collect(a.dump_dir, a.stage, by_shape=not a.no_shapes):
        print(json.dumps(r))
