"""The self-test's device process: sets up the device, runs the single-card checks on it and
writes each result as one JSON line the moment it has it, so that the report holds every
check run before anything failed, and names the check a crash of this process interrupted.

    python -m msdet.tools.selftest --device-checks WORK --size 64 --only step,eval

Each check key of :data:`CHECKS` maps to a function of the run's context giving its report
lines; an exception in one (the chip query, a compile, a launch) becomes a failed line with
the error, and the next check runs.
"""

from __future__ import annotations

import json
import os
import platform
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from msdet.engine.training.plan import Loop
from msdet.tools.selftest.cases import (
    WEIGHTS_FILE,
    Check,
    compose_config,
    load_reference,
    set_up_device,
    skipped,
    train_step_cell,
)

# Check keys in the order they run; "distributed" runs in its own processes (:mod:`.ranks`).
CHECKS = ("chip", "forward", "step", "overflow", "sink", "nms", "checkpoint", "eval", "export")
ALL_CHECKS = (*CHECKS, "distributed")
NO_REFERENCE = ("chip",)  # the others compare with the CPU reference
# Graphs each report line of a check compiles (the training step's is shared by step,
# overflow at O2 and checkpoint): what the compile budget counts.
GRAPHS = {"chip": 0, "forward": 1, "step": 1, "overflow": 1, "sink": 2, "nms": 1,
          "checkpoint": 0, "eval": 2, "export": 2}  # fmt: skip
RESULTS_FILE = "device_checks.jsonl"
RANKS_RESULT = "selftest_ranks.json"  # rank 0's report lines, in the ranks' run folder
WORK_VAR = "MSDET_SELFTEST_WORK"  # tells the ranks the single-card run's folder


@dataclass
class Context:
    """What the checks share in the device process."""

    cfg: Any
    rt: Any
    work: str
    ref: dict | None = None
    cells: dict[str, Any] = field(default_factory=dict)

    @property
    def weights(self) -> str:
        return os.path.join(self.work, WEIGHTS_FILE)

    def step_at(self, amp: str) -> Any:
        """One training step per AMP level (compiled once, shared by the checks)."""
        if amp not in self.cells:
            self.cells[amp] = train_step_cell(self.cfg, self.rt, self.weights, amp)
        return self.cells[amp]


def runners() -> dict[str, Callable[[Context], list[Check]]]:
    """Check key -> its report lines (imported here: they import MindSpore)."""
    from msdet.tools.selftest import checks as c
    from msdet.tools.selftest.evaluation import check_evaluation

    return {
        "chip": lambda x: [c.check_chip(x.rt)],
        "forward": lambda x: [c.check_forward(x.cfg, x.rt, x.ref, x.weights, a) for a in ("O0", "O2")],
        "step": lambda x: [c.check_train_step(x.step_at(x.rt.amp_level), x.rt, x.ref)],
        "overflow": lambda x: [c.check_overflow(x.step_at("O2"), x.rt, x.ref)],
        "sink": lambda x: [c.check_sink(x.cfg, x.rt, x.ref, x.weights)],
        "nms": lambda x: [c.check_nms(x.rt, x.ref)],
        "checkpoint": lambda x: [
            c.check_checkpoint(x.cfg, x.rt, x.step_at(x.rt.amp_level), x.ref, x.weights, x.work)
        ],
        "eval": lambda x: [check_evaluation(x.rt, x.ref, x.weights, x.work)],
        "export": lambda x: [c.check_export(x.cfg, x.ref, x.weights, x.work)],
    }  # fmt: skip


def error_note(err: BaseException) -> str:
    """``Type: first line`` of an exception, for a report line."""
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0][:300] if text else ''}".rstrip(": ")


class Recorder:
    """Appends the device process's results to a JSON-lines file, flushed line by line."""

    def __init__(self, path: str):
        self.path = path

    def write(self, event: str, **fields: Any) -> None:
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(json.dumps({"event": event, **fields}, default=str) + "\n")

    def check(self, key: str, check: Check) -> None:
        self.write("check", key=key, **asdict(check))


def environment(rt: Any) -> dict[str, Any]:
    """The device side of the report's environment."""
    return {
        "device": rt.device,
        "chip": rt.chip,
        "precision_mode": rt.precision_mode,
        "amp": rt.amp_level,
        "mode": rt.mode,
        "loop": rt.loop.value,
        "jit_level": (rt.loop_backend if rt.loop is Loop.JIT else rt.graphs).jit_level,
        "backend": (rt.loop_backend if rt.loop is Loop.JIT else rt.graphs).runs,
        "host_nms": rt.host_nms,
        "cpu_kernels": list(rt.kernels.names),
        "python": platform.python_version(),
    }


def run_device_checks(overrides: list[str], keys: list[str], work: str) -> None:
    """Set up the device from ``overrides`` and run the checks ``keys`` (of :data:`CHECKS`),
    each result appended to ``<work>/device_checks.jsonl`` as it comes."""
    record = Recorder(os.path.join(work, RESULTS_FILE))
    try:
        # MindSpore's operators on both sides: msdet's CPU kernels have parity tests of their
        # own, are float32 only (AMP checks rebuild the network), and never run on a device.
        cfg = compose_config(["runtime.cpu_kernels=native", *overrides])
        rt = set_up_device(cfg.runtime, work)  # the device, its chip query, precision mode
    except Exception as err:  # the report must say why nothing ran
        record.check("setup", Check("device set-up", "failed", note=error_note(err)))
        for key in keys:
            record.check(key, skipped(key, "not run: the device set-up failed"))
        return
    record.write("environment", **environment(rt))
    ctx = Context(cfg, rt, work)
    if any(k not in NO_REFERENCE for k in keys):
        ctx.ref = load_reference(work)
    table = runners()
    for key in keys:
        record.write("start", key=key)
        started = time.perf_counter()
        try:
            lines = table[key](ctx)
        except Exception as err:  # one broken path must not hide the others
            lines = [Check(key, "failed", note=error_note(err))]
        for check in lines:
            check.seconds = check.seconds or time.perf_counter() - started
            compiled = GRAPHS.get(key, 0) if check.status != "skipped" else 0
            check.figures.setdefault("graphs", compiled)
            record.check(key, check)


def read_results(path: str) -> tuple[dict[str, Any], list[tuple[str, Check]], list[str]]:
    """(environment, (key, check) lines, keys started) from a device process's file."""
    env: dict[str, Any] = {}
    lines: list[tuple[str, Check]] = []
    started: list[str] = []
    if not os.path.isfile(path):
        return env, lines, started
    with open(path, encoding="utf-8") as f:
        for text in f:
            try:
                item = json.loads(text)
            except json.JSONDecodeError:  # a line cut short by a crash
                continue
            event = item.pop("event", None)
            if event == "environment":
                env = item
            elif event == "start":
                started.append(item["key"])
            elif event == "check":
                key = item.pop("key")
                lines.append((key, Check(**item)))
    return env, lines, started
