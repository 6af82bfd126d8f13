"""The chip check: every operator of every graph msdet runs on an Ascend chip, held against
that chip's own CANN operator tables, on this CPU.

    python -m msdet.tools.chip_check [--chips ascend910,ascend910b,ascend310p,ascend310b]
        [--tables TABLES.json] [--waivers WAIVERS.json] [--json REPORT.json] [--no-values]
        [--cards N] [--depthwise-rewrite auto|on|off] [key=value ...]

Per chip it runs msdet's runtime set-up against the chip stood in on this CPU
(``engine.runtime.standin``), so it judges the precision mode in effect there (MindSpore's
default for the chip, or ``runtime.precision_mode``) and the backend msdet sets there
(``engine.runtime.ascend.graph_backends``: GE's graph sink on the 910A under ``Model.train``;
kernel by kernel elsewhere and under ``runtime.loop=jit``; or ``runtime.jit_level``), compiles the
graphs msdet runs on it (:mod:`.graphs`) and lists their primitives from MindSpore's IR
dump, maps each to what runs it on that backend (the GE operator; kernel by kernel the
aclnn kernel where MindSpore dispatches to one) and looks it up in the chip's tables
(:mod:`.verdict`); where the chip runs a float32
operator in float16, the inputs' largest magnitude in a few real training steps
(:mod:`.values`) must fit float16. One table per chip is printed and a JSON report written;
the exit status is 1 when any operator will not compile or overflows, or is a primitive the
mapping does not hold (what the check cannot place fails: it does not assume its mapping is
complete), unless a waiver
(``data/waivers.json`` or ``--waivers``) accepts it with a reason.

Depthwise convolutions: older MindSpore Ascend backends rewrote them into CANN's depthwise
operators (:mod:`.depthwise`); ``--depthwise-rewrite auto`` (the default) models that
rewrite where the installed MindSpore's backend carries it (none of 2.7 to 2.10 does),
``on`` always, ``off`` never. The report says which, and why.

What the tables cannot tell: kernel by kernel (jit level O0/O1, msdet's choice on A2) many
primitives run as aclnn kernels, whose dtype and chip support CANN documents per API, not
in these tables (their verdict is ``aclnn``, with what the table says of the GE operator;
on the 910A only where the API is shown to support the Atlas training series,
``data/aclnn_support.json``, else it fails); dtypes some AI Core operators decide
in their ``op_select_format`` code are emulated from CANN's sources, not compiled; MindSpore
branches that test the device at build time (``ms.amp.all_finite``) take the CPU branch
here. Only a card shows what really compiles and how fast: ``python -m
msdet.tools.selftest`` on it.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import tempfile

from msdet.common import logs
from msdet.tools.chip_check import depthwise
from msdet.tools.chip_check.mapping import load_mapping, load_waivers
from msdet.tools.chip_check.verdict import (
    DEFAULT_PRECISION,
    FAILING,
    format_chip,
    judge,
    summarise,
)

log = logging.getLogger("chip_check")
CHIPS = ("ascend910", "ascend910b", "ascend310p", "ascend310b")
# engine.runtime.ascend.Backend.runs -> the verdicts' backends (ms_backend's whole-graph
# executor, under a rank-table launch, runs the same kernels as kernel by kernel).
BACKEND = {"GE graph sink": "ge", "kernel by kernel": "kbk", "ms_backend, whole graph": "kbk"}
NOTE = (
    "not told by the tables: aclnn kernels (the 'aclnn' rows, kernel by kernel) have their own "
    "dtype support per API; op_select_format dtypes are emulated from CANN's sources; MindSpore "
    "code that tests the device at build time took the CPU branch. A card's self-test shows "
    "the rest."
)


def run_check(
    chips: tuple[str, ...],
    overrides: list[str],
    tables_path: str | None = None,
    values: bool = True,
    img: int = 128,
    waivers_path: str | None = None,
    cards: int = 8,
    depthwise_rewrite: str = "auto",
) -> dict:
    """The check's report: ``{"chips": {chip: {precision_mode, counts}}, "findings": [...],
    "failures": n, "depthwise_rewrite": {setting, applied, why}}``."""
    from msdet.common.config import load_config
    from msdet.engine.runtime.process import setup_runtime
    from msdet.tools.chip_check import values as value_ranges
    from msdet.tools.chip_check.cann_tables import load_tables
    from msdet.tools.chip_check.graphs import (
        TRAINING_CHIPS,
        chip_runtime,
        distributed_graph,
        graph_rows,
    )

    rewrites, rewrite_why = depthwise.decide(depthwise_rewrite)
    cfg = load_config("tool", ["runtime=cpu", *overrides, "runtime.cpu_kernels=native"])
    rt = setup_runtime(cfg.runtime, tempfile.mkdtemp(prefix="msdet-chip-check-"))
    tables, mapping = load_tables(tables_path), load_mapping()
    waivers = load_waivers(waivers_path)
    requested = str(cfg.runtime.precision_mode)
    modes = {c: DEFAULT_PRECISION.get(c, "allow_fp32_to_fp16") if requested == "auto" else requested
             for c in chips}  # fmt: skip
    from msdet.engine.runtime.device import resolve_sink
    from msdet.engine.training.plan import Loop

    # Data sinking runs the training step on the device (msdet's default on Ascend, both
    # loops).
    loop = Loop.parse(cfg.runtime.get("loop", "model")).value
    sunk = ("train", distributed_graph(cards)) if resolve_sink(cfg.runtime.sink, "Ascend") else ()
    rows, backends = {}, {}
    rewrite = {"rewrite": depthwise.rewrite_node} if rewrites else {}
    for chip in chips:
        _, backend = chip_runtime(cfg.runtime, chip, loop)
        backends[chip] = (backend.jit_level, backend.runs)
        log.info("%s: compiling msdet's graphs on this CPU (jit level %s: %s)", chip,
                 *backends[chip])  # fmt: skip
        rows[chip] = graph_rows(cfg, rt, chip, img=img, cards=cards, **rewrite)

    def findings(largest=None):
        out = []
        for chip in chips:
            guarded = ("nms",)  # msdet checks NMSWithMask on the device before relying on it
            out += [
                judge(
                    r,
                    chip,
                    modes[chip],
                    tables,
                    mapping,
                    largest,
                    guarded,
                    waivers,
                    backend=BACKEND[backends[chip][1]],
                    sunk=sunk,
                )  # fmt: skip
                for r in rows[chip]
            ]
        for f in out:
            if f.verdict in FAILING and f.prim in depthwise.MEASURED_AS:
                f.reason += depthwise.way_out(f.dtypes)
        return out

    result = findings()
    # A rewritten operator's inputs are measured on the convolution it replaces.
    narrowed = sorted({depthwise.MEASURED_AS.get(f.prim, (f.prim,))[0] for f in result
                       if f.verdict == "aicore(fp16)"})  # fmt: skip
    if values and narrowed:
        log.info("measuring the inputs of %d primitives run in float16: %s", len(narrowed),
                 ", ".join(narrowed))  # fmt: skip
        result = findings(value_ranges.measure(narrowed, img=img, overrides=overrides))
    counts = summarise(result)
    return {
        "tables": tables["_meta"],
        "mapping": mapping["_meta"],
        "waivers": waivers,
        "loop": loop,
        "depthwise_rewrite": {
            "setting": depthwise_rewrite,
            "applied": rewrites,
            "why": rewrite_why,
        },
        "chips": {
            c: {
                "precision_mode": modes[c],
                "jit_level": backends[c][0],
                "backend": backends[c][1],
                "counts": counts.get(c, {}),
                "primitives": primitive_counts(rows[c]),
                # None: an inference chip's exported network goes to ATC, not MindSpore's backend
                "depthwise_rewrite": rewrites if c in TRAINING_CHIPS else None,
            }
            for c in chips
        },
        "findings": [f.to_json() for f in result if f.verdict not in ("aicore", "nop")],
        "failures": sum(1 for f in result if f.verdict in FAILING),
        "note": NOTE,
        "_findings": result,
    }


def primitive_counts(rows: list) -> dict[str, dict[str, int]]:
    """``{graph: {primitive: how many}}``: what each graph compiled to."""
    out: dict[str, dict[str, int]] = {}
    for r in rows:
        graph = out.setdefault(r.graph, {})
        graph[r.prim] = graph.get(r.prim, 0) + r.count
    return {g: dict(sorted(p.items())) for g, p in out.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m msdet.tools.chip_check", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--chips", default=",".join(CHIPS))
    parser.add_argument(
        "--tables", help="tables derived from your CANN (python -m msdet.dev.cann_tables)"
    )
    parser.add_argument("--waivers", help="accepted findings, each with a reason "
                        "(default: the bundled data/waivers.json)")  # fmt: skip
    parser.add_argument("--json", default="chip_check.json", help="the report (JSON)")
    parser.add_argument("--no-values", action="store_true", help="skip the value ranges")
    parser.add_argument("--img", type=int, default=128, help="input size of the graphs built")
    parser.add_argument("--cards", type=int, default=8,
                        help="also the data-parallel training step of this many cards (1: none)")  # fmt: skip
    parser.add_argument("--depthwise-rewrite", choices=("auto", "on", "off"), default="auto",
                        help="judge depthwise convolutions as older MindSpore Ascend backends "
                        "rewrote them (auto: where the installed MindSpore does)")  # fmt: skip
    parser.add_argument("overrides", nargs="*", help="config settings, e.g. model=yolox_s")
    args = parser.parse_args(argv)
    logs.setup_logging()
    chips = tuple(c.strip() for c in args.chips.split(",") if c.strip())
    report = run_check(
        chips, args.overrides, args.tables, not args.no_values, args.img, args.waivers, args.cards,
        args.depthwise_rewrite,
    )  # fmt: skip
    findings = report.pop("_findings")
    rewrite = report["depthwise_rewrite"]
    print(f"depthwise rewrite {rewrite['why']}", end="\n\n")
    for chip in chips:
        info = report["chips"][chip]
        backend = f"runtime.loop={report['loop']}, jit level {info['jit_level']}: {info['backend']}"
        if info["depthwise_rewrite"] is not None:
            backend += f"; depthwise rewrite {'on' if info['depthwise_rewrite'] else 'off'}"
        print(format_chip(chip, info["precision_mode"], findings, backend), end="\n\n")
    print(NOTE)
    with open(args.json, "w", encoding="utf-8") as f:
        json.dump(report, f, indent=1)
    verdict = "fails" if report["failures"] else "passes"
    print(f"chip check {verdict}: {report['failures']} operators will not compile, overflow or "
          f"are not in the mapping "
          f"(report: {args.json})")  # fmt: skip
    return 1 if report["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
