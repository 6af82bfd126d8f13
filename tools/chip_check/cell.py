"""The chip check for any Cell: a team porting its own detector holds its graphs against an
Ascend chip's CANN tables as msdet holds its own.

    import mindspore as ms
    from msdet.tools.chip_check.cell import check_cell
    from msdet.tools.chip_check.verdict import FAILING

    ms.set_context(mode=ms.GRAPH_MODE, device_target="CPU")
    findings = check_cell(net, images, chips=("ascend910", "ascend910b"))
    failing = [f for f in findings if f.verdict in FAILING]

The Cell is compiled (not run) as it stands: put it in training mode and apply the AMP level
the chip will use before calling, as ``python -m msdet.tools.chip_check`` does for
msdet's graphs. Value ranges are the caller's to give (``largest``: primitive name -> the
largest input magnitude measured on real data); without them an operator the chip runs in
float16 is reported as narrowed, not judged against float16's range.

MindSpore 2.10 cannot switch its IR dump off once a process has turned it on: later compiles
of the same process dump to a temporary folder. Run the check in a process of its own when
that matters.
"""

from __future__ import annotations

from msdet.tools.chip_check.mapping import load_mapping, load_waivers
from msdet.tools.chip_check.verdict import (
    DEFAULT_PRECISION,
    Finding,
    Row,
    judge,
)


def check_cell(
    cell,
    *inputs,
    chips: tuple[str, ...] = ("ascend910", "ascend910b"),
    precision_mode: str = "auto",
    largest: dict[str, float] | None = None,
    graph: str = "cell",
    tables_path: str | None = None,
    waivers_path: str | None = None,
    sunk: bool = False,
) -> list[Finding]:
    """One :class:`Finding` per primitive of ``cell(*inputs)`` and chip: ``verdict`` is
    ``aicore``, ``aicore(fp16)`` (runs in float16 under the chip's precision mode),
    ``aicpu``, ``nop`` (a reshape), ``overflows``, ``none`` (will not compile), ``unmapped``
    (a primitive the bundled mapping does not hold) or ``waived``, with the reason.
    ``precision_mode``: ``auto`` takes MindSpore's default for each chip; ``waivers_path``:
    accepted findings (default: the bundled ones); ``sunk``: the Cell runs under data
    sinking, where graph control flow fails (``control-flow``)."""
    from msdet.tools.chip_check.cann_tables import load_tables
    from msdet.tools.chip_check.ir import list_primitives

    unknown = [c for c in chips if c not in DEFAULT_PRECISION]
    if unknown:
        raise ValueError(
            f"chips: {', '.join(unknown)} not known; the tables hold {', '.join(DEFAULT_PRECISION)}"
        )
    tables, mapping = load_tables(tables_path), load_mapping()
    waivers = load_waivers(waivers_path)
    rows = [
        Row(graph, prim, dtypes, shapes, count, scope)
        for prim, dtypes, shapes, count, scope in list_primitives(cell, *inputs)
    ]
    findings = []
    for chip in chips:
        mode = DEFAULT_PRECISION[chip] if precision_mode == "auto" else precision_mode
        findings += [
            judge(
                row,
                chip,
                mode,
                tables,
                mapping,
                largest,
                (),
                waivers,
                sunk=(graph,) if sunk else (),
            )  # fmt: skip
            for row in rows
        ]
    return findings
