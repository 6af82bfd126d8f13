"""The self-test's command line and report: run every check, print the table, write the JSON.

python -m engine.tools.selftest                       # the device here (Ascend if present)
python -m engine.tools.selftest --size 64             # the tiny variant (CI runs it on CPU)
python -m engine.tools.selftest --cards 8             # also the collectives, on 8 cards
python -m engine.tools.selftest runtime.device=CPU    # key=value: config overrides
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

from msdet.engine.tools.selftest.cases import (
    STATUS_ORDER,
    Check,
    compose_config,
    log,
    make_reference,
    run_reference,
    timed,
    train_step_cell,
)
from msdet.engine.tools.selftest.checks import (
    check_chip,
    check_distributed,
    check_export,
    check_forward,
    check_nms,
    check_overflow,
    check_sink,
    check_train_step,
)

# ---- the report -------------------------------------------------------------------------------


def environment(rt: Any) -> dict[str, Any]:
    """Versions and the machine, for the report."""
    import mindspore as ms

    from msdet.engine.tools.doctor import ascend_versions

    return {
        "mindspore": ms.__version__,
        **ascend_versions(),
        "device": rt.device,
        "chip": rt.chip,
        "precision_mode": rt.precision_mode,
        "amp": rt.amp_level,
        "mode": rt.mode,
        "cpu_kernels": list(rt.kernels.names),
        "python": platform.python_version(),
        "machine": platform.machine(),
        "processor": cpu_model_name(),
    }


def cpu_model_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            return next(
                (ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), ""
            )
    except OSError:
        return platform.processor()


def format_table(checks: list[Check]) -> str:
    """The report as a table: check, status, main figure, tolerance, seconds."""
    width = max(len(c.name) for c in checks)
    lines = [f"{'check':<{width}}  {'status':<7}  {'figure':<24}  {'tolerance':<9}  seconds"]
    for c in checks:
        main = next((f"{k}={v:.3g}" for k, v in c.figures.items() if isinstance(v, float)), "")
        tol = f"{c.tolerance:g}" if c.tolerance is not None else ""
        lines.append(f"{c.name:<{width}}  {c.status:<7}  {main:<24}  {tol:<9}  {c.seconds:7.1f}")
        if c.note:
            lines.append(f"{'':<{width}}  {c.note}")
    return "\n".join(lines)


def run_checks(overrides: list[str], size: int, cards: int, work: str) -> tuple[dict, list[Check]]:
    """Set up the device, build the reference, run every check; returns (environment, checks)."""
    from msdet.engine.runtime.process import setup_runtime

    # MindSpore's operators on both sides: msdet's CPU kernels have parity tests of their own,
    # are float32 only (AMP checks rebuild the network), and never run on a device.
    cfg = compose_config(["runtime.cpu_kernels=native", *overrides])
    rt = setup_runtime(cfg.runtime, work)
    env = environment(rt)
    checks = [check_chip(rt)]
    (ref, seconds) = timed(lambda: run_reference(size, work))
    weights = os.path.join(work, "weights.ckpt")
    log.info("CPU reference computed in %.1f s", seconds)
    cells: dict[str, Any] = {}

    def step_at(amp: str) -> Any:  # one compiled step per AMP level (Ascend: O2 for both)
        if amp not in cells:
            cells[amp] = train_step_cell(cfg, rt, weights, amp)
        return cells[amp]

    steps: list[tuple[str, Callable[[], Check]]] = [
        ("forward O0", lambda: check_forward(cfg, rt, ref, weights, "O0")),
        ("forward O2", lambda: check_forward(cfg, rt, ref, weights, "O2")),
        ("training step", lambda: check_train_step(step_at(rt.amp_level), rt, ref)),
        ("overflow", lambda: check_overflow(step_at("O2"), rt, ref)),
        ("sink", lambda: check_sink(cfg, rt, ref, weights)),
        ("nms", lambda: check_nms(rt, ref)),
        ("export", lambda: check_export(cfg, ref, weights, work)),
        ("distributed", lambda: check_distributed(cards, rt, work)),
    ]
    for label, run in steps:
        started = time.perf_counter()
        try:
            check = run()
        except Exception as err:  # one broken path must not hide the others
            check = Check(
                label,
                "failed",
                note=f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}",
            )
        check.seconds = check.seconds or time.perf_counter() - started
        log.info("%s: %s", check.name, check.status)
        checks.append(check)
    return env, checks


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=320, help="input size (64: the tiny variant)")
    parser.add_argument("--cards", type=int, default=0, help="also check N ranks (2+)")
    parser.add_argument("--report", default="selftest.json", help="where the JSON report goes")
    parser.add_argument("--keep", action="store_true", help="keep the work folder")
    parser.add_argument("--reference", metavar="DIR", help=argparse.SUPPRESS)
    parser.add_argument("overrides", nargs="*", help="Hydra overrides, e.g. runtime.device=CPU")
    args = parser.parse_args(argv)
    if args.reference:
        make_reference(args.reference, args.size)
        return 0
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    work = tempfile.mkdtemp(prefix="msdet-selftest-")
    started = time.perf_counter()
    try:
        env, checks = run_checks(args.overrides, args.size, args.cards, work)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    report = {
        "environment": env,
        "size": args.size,
        "total_s": round(time.perf_counter() - started, 1),
        "checks": [asdict(c) for c in checks],
        "summary": {s: sum(c.status == s for c in checks) for s in STATUS_ORDER},
    }
    print(format_table(checks))
    print(f"summary: {report['summary']} in {report['total_s']} s; report: {args.report}")
    with open(args.report, "w", encoding="utf-8") as f:
        json.dump(report, f, indent=2, default=str)
    return 1 if report["summary"]["failed"] else 0
