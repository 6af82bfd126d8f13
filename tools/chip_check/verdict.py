"""Where each primitive of a graph runs on a chip, by CANN's own tables: the verdicts of the
chip check.

A primitive (as MindSpore compiled it on CPU, with its input dtypes) is mapped to the CANN
operator MindSpore's GE adapter emits for it (``data/ms_to_cann.json``: derived from
MindSpore's adapter sources, ``mindspore/ccsrc/plugin/res_manager/ascend/op_adapter/
op_declare/*.cc``, version 2.7; the 2.10 wheel's headers and generated Python confirm the
names and which primitives run as aclnn kernels), then looked up in the chip's tables
(:mod:`.cann_tables`) under that name and the names CANN's own graph passes turn it into
(:data:`.mapping.CANN_RENAMES`). Known requirements the tables do not carry (an input shape a
kernel insists on) are :data:`CONSTRAINTS`, each with the CANN file that states it.

Verdicts, per chip and graph: ``aicore`` (a kernel for these dtypes), ``aicore(fp16)``
(only a float16 kernel, and the precision mode casts: checked against the values measured
on CPU, :mod:`.values`), ``aicpu`` (runs on the AI CPU: slow), ``none`` (will not compile),
``guarded`` (would not run as built, but msdet checks it on the device first and falls back),
``aclnn`` (kernel by kernel, an aclnn kernel: the tables cannot tell its dtypes; on the
Atlas training series only where its API is shown to run there, :data:`ACLNN_CHIP`, else
``unverified``, or ``none`` where a document excludes the chip),
``nop`` (a reshape: no kernel), ``unknown`` (the tables cannot tell: dtypes decided by
``op_select_format`` and not emulated), ``unverified`` (mapped, but MindSpore's sources show
no way for the backend to compile it: no GE adapter and no GE fallback; or its CANN operator
is missing from the bundled tables: "may not compile" fails), ``unmapped`` (a primitive the mapping was not derived for: the check does not assume its mapping is
complete, so this fails), ``control-flow`` (a branch in a graph that data sinking runs on the device:
fails), ``waived`` (a failing verdict a person accepted in ``data/waivers.json``, with
the reason).
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field

from msdet.tools.chip_check.cann_tables import check
from msdet.tools.chip_check.depthwise import measured_as
from msdet.tools.chip_check.ir import CONTROL_FLOW, Row, cell_path
from msdet.tools.chip_check.mapping import CANN_RENAMES, HCCL, waiver_for
from msdet.tools.chip_check.values import largest_for

FLOAT16_MAX = 65504.0
FLOAT16_EXACT_INT = 2048  # float16 holds every integer up to 2,048 exactly
# Reshape-type primitives: GE treats them as no-op nodes; kernel by kernel they get a
# runtime kernel that launches nothing.
NOP = {"Reshape", "ExpandDims", "Squeeze", "Flatten", "FlattenGrad", "Unsqueeze", "ReshapeExt"}
# Graph plumbing: no kernel at all.
PLUMBING = {"make_list", "MakeList", "MakeTuple", "TupleGetItem", "Depend", "UpdateState", "Load"}
# Requirements of CANN kernels that the operator tables do not state.
CONSTRAINTS = {
    "NMSWithMask": {
        "input": 0,
        "last_dim": 8,
        "source": "CANN 8.1.RC1 opp/built-in/op_impl/ai_core/tbe/impl/nms_with_mask.py: "
        '"the 2nd-dim of input boxes must be equal to 8"; MindSpore 2.10 builds [N, 5] '
        "and has no pass that pads it",
        "guard": "msdet runs NMSWithMask only after checking it on the device against the "
        "host NMS on first use, with the evaluation's candidate count (engine.runtime.ascend."
        "nms_on_host, device_nms_problem), else NMS runs on the host",
    },
}
# Precision modes under which the AI Core may run a float32 operator in float16 when it has
# no float32 kernel (force_fp16: whenever it has a float16 one).
NARROWING_MODES = ("allow_fp32_to_fp16", "allow_mix_precision", "allow_mix_precision_fp16",
                   "force_fp16")  # fmt: skip
# MindSpore's own precision default per chip when none is set: keep dtype on A2 and later,
# allow_fp32_to_fp16 elsewhere (mindspore/ccsrc .../transform/acl_ir/op_api_util.cc).
DEFAULT_PRECISION = {
    "ascend910": "allow_fp32_to_fp16",
    "ascend910b": "must_keep_origin_dtype",
    "ascend910_93": "must_keep_origin_dtype",
    "ascend310p": "allow_fp32_to_fp16",
    "ascend310b": "must_keep_origin_dtype",
}
FAILING = ("none", "overflows", "unmapped", "control-flow", "unverified")


@dataclass
class Finding:
    """The verdict on a :class:`Row` for one chip."""

    chip: str
    graph: str
    prim: str
    dtypes: list[str]
    count: int
    cann_op: str
    verdict: str
    reason: str
    scope: str = ""
    largest: float | None = None  # of its inputs, measured on CPU (narrowed rows)
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        return asdict(self)


def tensor_dtype(ir_type: str | None) -> str | None:
    """The dtype of a tensor input as :mod:`.ir` writes it (``float32``, ``tuple[float16*3]``);
    None for scalars, None and monads."""
    if ir_type is None:
        return None
    m = re.fullmatch(r"(?:tuple|list)\[(\w+)(?:\*\d+)?(?:,.*)?\]", ir_type)
    if m and not m.group(1).startswith("scalar"):
        return m.group(1)
    if ir_type.startswith(("scalar:", "tuple", "list", "none", "monad")):
        return None
    return ir_type


def _aligned(aicore: dict, ge_map: dict | None, dtypes: list[str]) -> list[str | None]:
    """The row's dtypes in the order of the CANN operator's inputs (matched by name through
    the adapter's input map; None where unknown)."""
    names = aicore.get("inputs", []) if aicore else []
    want: list[str | None] = [None] * len(names)
    placed = False
    for key in ("inputs", "dyn_inputs"):
        for ms_index, ge_name in ((ge_map or {}).get(key) or {}).items():
            k = int(ms_index) - 1
            if ge_name in names and 0 <= k < len(dtypes):
                want[names.index(ge_name)] = tensor_dtype(dtypes[k])
                placed = True
    if not placed and names:
        want[0] = next((tensor_dtype(d) for d in dtypes if tensor_dtype(d)), None)
    return want


def judge(
    row: Row,
    chip: str,
    precision_mode: str,
    tables: dict,
    mapping: dict,
    largest: dict[str, float] | None = None,
    guarded: tuple[str, ...] = (),
    waivers: list[dict] | None = None,
    backend: str = "ge",
    sunk: tuple[str, ...] = (),
) -> Finding:
    """The verdict on ``row`` for ``chip`` under ``precision_mode``. ``largest``: the
    largest magnitude operators' inputs reached on CPU, keyed per operator instance, type
    and shape, or type (:func:`.values.value_key`; the most specific applies); ``guarded``:
    graphs whose :data:`CONSTRAINTS` msdet checks on the device before relying on them;
    ``waivers``: accepted findings (:func:`.mapping.load_waivers`), which turn a failing
    verdict into ``waived``; ``backend``: ``ge`` (jit level O2: the GE adapters' operators,
    judged by the tables) or ``kbk`` (kernel by kernel: ``aclnn`` where MindSpore dispatches
    to an aclnn kernel, else the GE operator, which it compiles alone); ``sunk``: graphs
    that data sinking runs on the device, where control flow fails."""
    if row.prim in CONTROL_FLOW:
        finding = Finding(chip, row.graph, row.prim, row.dtypes, row.count, "-", "nop",
                          "graph control flow: no kernel", row.scope)  # fmt: skip
        if row.graph in sunk:
            finding.verdict = "control-flow"
            finding.reason = (
                "a branch on a tensor in a graph that data sinking runs on the device, a "
                "common first-run failure on both backends: make it a select"
            )
    else:
        finding = _judge(row, chip, precision_mode, tables, mapping, largest, guarded, backend)
    waiver = None
    if finding.verdict in FAILING and waivers:
        waiver = waiver_for(waivers, row.prim, chip, row.graph, finding.verdict, backend)
    if waiver is not None:
        finding.notes.append(f"{finding.verdict}: {finding.reason}")
        finding.verdict, finding.reason = "waived", f"waived: {waiver['reason']}"
    return finding


def _unmapped(prim: str, mapping: dict) -> str:
    """Why a primitive outside the mapping fails, with what MindSpore's adapters say of it."""
    ge_op = (mapping.get("adapters") or {}).get(prim)
    known = (
        f"MindSpore's GE adapters emit {ge_op} for it"
        if ge_op
        else "MindSpore's adapter sources register no GE adapter for it"
    )
    return (
        f"not in the chip check's mapping, which was derived for the primitives msdet used "
        f"({known}): rebuild the mapping and the tables for it (ms_mapping, cann_tables), or "
        "waive it in data/waivers.json with a reason"
    )


# The chip whose aclnn support each API must show (data/aclnn_support.json): CANN's aclnn
# pages exclude the Atlas training series for some APIs; A2 and later are what aclnn is for.
ACLNN_CHIP = "ascend910"


def _aclnn_on_chip(entry: dict, support: dict) -> tuple[str, str]:
    """(verdict, reason) for a primitive run as aclnn kernels on :data:`ACLNN_CHIP`: every
    API it calls must be shown to run there (``support``: data/aclnn_support.json)."""
    kernel = entry.get("aclnn_kernel") or "aclnn"
    apis = entry.get("aclnn_apis_called") or ([kernel] if kernel.startswith("aclnn") else [])
    if not apis:
        return "unverified", (
            f"kernel by kernel on {ACLNN_CHIP}: {kernel} names no aclnn API whose support of the "
            "Atlas training series could be shown; run it on a card (the self-test) and waive "
            "it with the result, or train there with runtime.loop=model (GE)"
        )
    shown = []
    for api in apis:
        known = support.get(api)
        if known is None or known.get(ACLNN_CHIP) is None:
            why = (known or {}).get("source") or "no document read for it"
            return "unverified", (
                f"kernel by kernel on {ACLNN_CHIP}: {api} is not shown to support the Atlas "
                f"training series ({why[:300]}); run it on a card and waive it with the result, "
                "or train there with runtime.loop=model (GE)"
            )
        if known[ACLNN_CHIP] is False:
            return (
                "none",
                f"kernel by kernel on {ACLNN_CHIP}: {api} excludes it ({known['source']})",
            )
        shown.append(f"{api} ({known['evidence']}: {known['source'][:160]})")
    return "aclnn", f"kernel by kernel on {ACLNN_CHIP}: " + "; ".join(shown)


def _aclnn(entry: dict) -> tuple[str, str]:
    """(the aclnn API or MindSpore kernel a primitive runs as kernel by kernel, how to say it)."""
    kernel = entry.get("aclnn_kernel") or "aclnn"
    apis = entry.get("aclnn_apis_called") or ([kernel] if kernel.startswith("aclnn") else [])
    if apis:
        return apis[0], ", ".join(apis)
    if kernel == "aclnn":  # dispatched in the 2.10 wheel, unnamed in the older sources
        return "aclnn", "an aclnn kernel (the 2.10 wheel dispatches it; its API is not named)"
    own = kernel.removeprefix("customize:")
    return own, f"{own} (MindSpore's own kernel over aclnn calls)"


def _hccl(op: str, chip: str, dtypes: list[str]) -> tuple[str, str, str]:
    """(verdict, reason, op) of an HCCL collective from :data:`HCCL`."""
    dtype = next((tensor_dtype(d) for d in dtypes if tensor_dtype(d)), None)
    allowed = HCCL[op].get(chip)
    if allowed is None:
        return "unverified", f"HCCL's reference names no {op} data types for {chip}", op
    if dtype in allowed:
        return "hccl", f"HCCL collective: {dtype} is one of its data types on {chip}", op
    return "none", f"HCCL's {op} takes {', '.join(allowed)} on {chip}, not {dtype}", op


def _judge(row, chip, precision_mode, tables, mapping, largest, guarded, backend="ge") -> Finding:
    """:func:`judge` before waivers."""
    entry = mapping["map"].get(row.prim, {})
    cann = entry.get("cann_op") or "+".join(entry.get("ge_fallback_expands_to") or [])
    finding = Finding(chip, row.graph, row.prim, row.dtypes, row.count, cann or "-", "", "",
                      row.scope)  # fmt: skip
    if row.prim in NOP or entry.get("kbk_nop"):
        finding.verdict, finding.reason = "nop", "a reshape: no kernel"
        return finding
    if row.prim.startswith("Custom:"):
        finding.verdict = "none"
        finding.reason = (
            "msdet's compiled CPU kernel: build the graph with runtime.cpu_kernels=native"
        )
        return finding
    if row.prim not in mapping["map"]:
        finding.verdict, finding.reason = "unmapped", _unmapped(row.prim, mapping)
        return finding
    if backend == "kbk" and entry.get("aclnn_dispatch_2_10_wheel"):
        # Kernel by kernel MindSpore runs it as an aclnn kernel, not as the GE operator.
        finding.cann_op, said = _aclnn(entry)
        finding.verdict = "aclnn"
        finding.reason = (
            f"kernel by kernel: {said}; CANN documents an aclnn API's dtypes and chips per API, "
            "not in these tables, and the precision mode reaches it through its cube math "
            "type: only a card shows it (the self-test)"
        )
        if chip == ACLNN_CHIP:
            finding.verdict, finding.reason = _aclnn_on_chip(
                entry, mapping.get("aclnn_support", {})
            )
        if entry.get("cann_op") or entry.get("ge_fallback_expands_to"):
            ge = _judge(row, chip, precision_mode, tables, mapping, largest, guarded)
            finding.notes.append(f"as a GE operator ({ge.cann_op}): {ge.verdict}, {ge.reason}")
        return finding
    if entry.get("backend_split_to"):
        ops = list(entry["backend_split_to"])
    elif entry.get("cann_op"):
        ops = [entry["cann_op"]]
    else:
        ops = list(entry.get("ge_fallback_expands_to") or [])
    if not ops:
        finding.verdict = "unverified"
        finding.reason = (
            "no GE adapter and no GE fallback expander for it in MindSpore's sources (see the "
            "mapping's _meta): GE (jit level O2) may not compile it; rewrite it, or waive it "
            "with a reason once a card compiled it"
            if backend == "ge"
            else "no aclnn dispatch and no GE adapter for it in MindSpore's sources (see the "
            "mapping's _meta): kernel by kernel MindSpore may find no Ascend kernel for it; "
            "rewrite it, or waive it with a reason once a card ran it"
        )
        return finding
    narrowing = precision_mode in NARROWING_MODES
    verdicts = []
    for op in ops:
        if op in HCCL:
            verdicts.append(_hccl(op, chip, row.dtypes))
            continue
        best = None
        for name in [op, *CANN_RENAMES.get(op, [])]:
            per_chip = (tables.get(name) or {}).get(chip)
            if per_chip is None:
                continue
            want = _aligned(per_chip.get("aicore"), entry.get("ge_input_map"), row.dtypes)
            status, why = check(per_chip, want, allow_fp32_to_fp16=narrowing)
            if best is None or status.startswith("aicore") and not best[0].startswith("aicore"):
                best = (status, why, name)
            if status == "aicore":
                break
        verdicts.append(best or ("unverified", "not in the tables bundled for the check", op))
    status, why, name = min(verdicts, key=lambda v: _RANK.get(v[0].rstrip("?"), 9))
    finding.cann_op = name if len(ops) == 1 else "+".join(v[2] for v in verdicts)
    finding.verdict = {
        "aicore?": "unknown",
        "aicpu?": "aicpu",
        "host?": "aicpu",
        "host": "aicpu",
    }.get(status, status)
    finding.reason = why
    constraint = CONSTRAINTS.get(name) or CONSTRAINTS.get(op)
    if constraint and finding.verdict not in ("none",):
        shape = row.shapes[constraint["input"]] if len(row.shapes) > constraint["input"] else None
        if isinstance(shape, list) and shape and shape[-1] != constraint["last_dim"]:
            guard = row.graph in guarded
            finding.verdict = "guarded" if guard else "none"
            finding.reason = (
                f"input {shape} where CANN's kernel takes [N, {constraint['last_dim']}] "
                f"({constraint['source']})" + (f"; {constraint['guard']}" if guard else "")
            )
    measured, level, measured_prim = None, None, row.prim
    if finding.verdict == "aicore(fp16)" and largest is not None:
        measured_prim, first = measured_as(row.prim, row.shapes)
        measured, level = largest_for(largest, measured_prim, first, cell_path(row.scope))
    if measured is not None:
        finding.largest = float(measured)
        whose = "this operator's" if measured_prim == row.prim else f"its {measured_prim}'s"
        finding.notes.append(f"inputs measured at {whose} {level}")
        if finding.largest > FLOAT16_MAX:
            finding.verdict = "overflows"
            finding.reason = (
                f"runs in float16 under {precision_mode} and its inputs reach "
                f"{finding.largest:.4g} on CPU, beyond float16's {FLOAT16_MAX:.0f}"
            )
    return finding


_RANK = {"none": 0, "overflows": 0, "unmapped": 0, "control-flow": 0, "unverified": 0,
         "aicpu": 1, "host": 1, "aicore(fp16)": 2, "aicore": 3, "hccl": 3,
         "unknown": 4}  # fmt: skip
# The order of a chip's table: what fails first.
TABLE_ORDER = ("none", "overflows", "unmapped", "control-flow", "unverified", "waived", "guarded",
               "aicpu", "aicore(fp16)", "aclnn", "unknown")  # fmt: skip


def summarise(findings: list[Finding]) -> dict[str, dict[str, int]]:
    """Verdict counts per chip."""
    out: dict[str, dict[str, int]] = {}
    for f in findings:
        out.setdefault(f.chip, {}).setdefault(f.verdict, 0)
        out[f.chip][f.verdict] += 1
    return out


def format_chip(chip: str, precision_mode: str, findings: list[Finding], backend: str = "") -> str:
    """One chip's table: every primitive that does not plainly run on the AI Core (rows of
    the same primitive, dtypes and verdict merged, their counts summed; an ``aclnn`` row
    without its reason, said once below the table), then a count of those that do."""
    rows = [f for f in findings if f.chip == chip]
    plain = sum(f.count for f in rows if f.verdict in ("aicore", "nop"))
    merged: dict[tuple, list] = {}
    for f in rows:
        if f.verdict in ("aicore", "nop"):
            continue
        dtypes = ",".join(d for d in (tensor_dtype(t) for t in f.dtypes) if d) or "-"
        key = (f.graph, f.prim, dtypes, f.cann_op, f.verdict, f.reason)
        entry = merged.setdefault(key, [0, None, f.scope])
        entry[0] += f.count
        if f.largest is not None:
            entry[1] = max(entry[1] or 0.0, f.largest)
    order = {v: i for i, v in enumerate(TABLE_ORDER)}
    width = max([22, *(len(k[1]) for k in merged)])  # the primitives' column
    lines = [f"== {chip} (precision mode {precision_mode}{', ' + backend if backend else ''}) ==",
             f"{'graph':7s} {'primitive':{width}s} {'dtypes':20s} {'n':>4s} {'CANN op':16s} verdict"]  # fmt: skip
    for key in sorted(merged, key=lambda k: (order.get(k[4], 9), k[0], k[1])):
        graph, prim, dtypes, cann, verdict, reason = key
        count, largest, scope = merged[key]
        extra = f" (inputs up to {largest:.4g})" if largest is not None else ""
        lines.append(
            f"{graph:7s} {prim:{width}s} {dtypes[:20]:20s} {count:4d} {cann[:16]:16s} {verdict}{extra}"
        )
        if verdict != "aclnn":
            lines.append(
                f"{'':10s}{reason}" + (f" [{scope}]" if verdict in FAILING and scope else "")
            )
    if any(k[4] == "aclnn" for k in merged):
        lines.append(
            "aclnn: run kernel by kernel as the aclnn API named; CANN documents its dtypes and "
            "chips per API, not in these tables (the report's notes say what the table says of "
            "the GE operator): only a card shows it"
        )
    lines.append(f"and {plain} primitives on AI Core kernels or reshapes")
    return "\n".join(lines)
