"""The 8-card training step as the chip check builds it for one chip, judged, printed as
JSON (``python -m tests.tools.chip_check.distributed_probe CHIP``: a process of its own,
the IR dump cannot be turned off again)."""

from __future__ import annotations

import dataclasses
import json
import sys
import tempfile

from msdet.common.config import load_config
from msdet.engine.runtime.process import setup_runtime
from msdet.tools.chip_check.cann_tables import load_tables
from msdet.tools.chip_check.graphs import chip_runtime, distributed_graph, training_step
from msdet.tools.chip_check.ir import list_primitives
from msdet.tools.chip_check.mapping import load_mapping, load_waivers
from msdet.tools.chip_check.verdict import DEFAULT_PRECISION, Row, judge

if __name__ == "__main__":
    chip = sys.argv[1]
    cfg = load_config(
        "tool", ["runtime=cpu", "runtime.cpu_kernels=native", "model.depthwise=false"]
    )
    rt = setup_runtime(cfg.runtime, tempfile.mkdtemp())
    ranks = dataclasses.replace(chip_runtime(rt, chip, "auto"), world_size=8, sync_bn=True)
    graph = distributed_graph(8)
    rows = [Row(graph, *r) for r in list_primitives(*training_step(cfg, ranks, 64, 2))]
    backend = "ge" if ranks.backend == "GE graph sink" else "kbk"
    tables, mapping, waivers = load_tables(), load_mapping(), load_waivers()
    findings = [
        judge(
            r,
            chip,
            DEFAULT_PRECISION[chip],
            tables,
            mapping,
            None,
            (),
            waivers,
            backend=backend,
            sunk=(graph,),
        )  # fmt: skip
        for r in rows
    ]
    print(json.dumps([f.to_json() for f in findings]))
