"""CANN's operator tables, per chip, as the chip check reads them: what the AI Core runs (the
dtype combinations of each input) and which AI CPU or host tables list an operator.

msdet bundles a compact copy for the operators its graphs use (``data/cann-8.1.RC1.json``,
:func:`load_tables`); :func:`check` says where an operator with given input dtypes runs by
them. The copy is derived from a CANN toolkit by ``python -m msdet.dev.cann_tables`` (a
maintainer tool, in a clone only), which also makes the ``--tables`` file the chip check takes
to judge against another CANN.
"""

from __future__ import annotations

import json
import os

from msdet.tools.chip_check.mapping import DATA_DIR

BUNDLED = os.path.join(DATA_DIR, "cann-8.1.RC1.json")


def load_tables(path: str | None = None) -> dict:
    """The compact tables (as ``msdet.dev.cann_tables.compact`` writes them): ``path``, else
    the bundled CANN 8.1.RC1 copy."""
    with open(path or BUNDLED, encoding="utf-8") as f:
        return json.load(f)


def check(entry_for_chip: dict, dtypes, allow_fp32_to_fp16=False):
    """Where would an op with these input dtypes (list aligned with the CANN op's inputs;
    None = don't care) run on this chip, by the tables: ("aicore"|"aicore(fp16)"|
    "aicore?"|"aicpu"|"aicpu?"|"none", reason). ``allow_fp32_to_fp16``: the
    precision mode of the Atlas training series default (float32 -> float16 when the AI
    Core has no float32 kernel)."""
    ac = entry_for_chip.get("aicore")
    if ac and "combos" in ac:  # the compact format
        ac = {
            "input_dtype_combos": ac["combos"],
            "binary_kernels": {"input_dtype_combos": ac.get("binary")},
        }

    def match(combos, want):
        for c in combos:
            if all(
                w is None or (i < len(c) and (c[i] is None or c[i] == w))
                for i, w in enumerate(want)
            ):
                return True
        return False

    if ac:
        combos = ac.get("input_dtype_combos")
        if combos is None:
            bins = (ac.get("binary_kernels") or {}).get("input_dtype_combos")
            if bins and match(bins, dtypes):
                return "aicore", "precompiled binary kernel for these dtypes"
            return "aicore?", "dtypes decided by op_select_format; not in the table"
        if match(combos, dtypes):
            return "aicore", "table combination"
        if allow_fp32_to_fp16 and "float32" in dtypes:
            d16 = ["float16" if d == "float32" else d for d in dtypes]
            if match(combos, d16):
                return "aicore(fp16)", "no float32 kernel: runs in float16 under allow_fp32_to_fp16"
    cpu = entry_for_chip.get("aicpu") or []
    # AI CPU engine tables first; host_cpu_kernel.json (engine DNN_VM_HOST_CPU) last:
    # GE runs those on the host CPU (shape/const ops), not on the chip's AI CPU.
    cpu = sorted(cpu, key=lambda e: e.get("engine") == "DNN_VM_HOST_CPU")
    for e in cpu:
        kind = "host" if e.get("engine") == "DNN_VM_HOST_CPU" else "aicpu"
        if e["inputs"] is None:
            return kind + "?", f"{e['table']} lists the op without dtypes"
        ok = all(
            w is None
            or i >= len(e["inputs"])
            or not e["inputs"][i]["dtypes"]
            or w in e["inputs"][i]["dtypes"]
            for i, w in enumerate(dtypes)
        )
        if ok:
            return kind, e["table"]
    if cpu:
        return "none", "AI CPU lists the op but not these dtypes"
    return "none", "no AI Core kernel for these dtypes and no AI CPU kernel"
