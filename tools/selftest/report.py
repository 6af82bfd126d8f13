"""The self-test's command line and report (:mod:`.cases` describes the checks).

    python -m msdet.tools.selftest [--size 64] [--cards 8] [--only step,eval] [key=value ...]

This process never loads MindSpore, so it holds no device: it runs, one after the other, the
CPU reference (a child on the host), the single-card checks (a child on the device,
:mod:`.device`) and, with ``--cards N``, the ranks (:mod:`.ranks`, rank 0 on the card the
single-card child has released). Whatever fails, a bad setting, the chip query, a check, a
child that crashes, becomes a failed line of the report, and the report is written.
"""

from __future__ import annotations

import argparse
import collections
import json
import logging
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict
from typing import Any

from msdet.common.config import ROOT
from msdet.tools.selftest.cases import STATUS_ORDER, Check, compose_config, log, skipped
from msdet.tools.selftest.device import (
    ALL_CHECKS,
    CHECKS,
    NO_REFERENCE,
    RANKS_RESULT,
    RESULTS_FILE,
    WORK_VAR,
    error_note,
    read_results,
)

# MindYOLO's YOLOX graphs compile in 170-341 s each on Ascend 910 (jit level O2;
# mindspore-lab/mindyolo/configs/yolox/README.md): the self-test's graphs are nano's, but a
# card's budget is set by how many it compiles.
MINDYOLO_COMPILE_S = (170, 341)
BUDGET_S = 600
REFERENCE_NAME = "CPU reference (host, PyNative)"


def host_environment() -> dict[str, Any]:
    """Versions and the machine, read without loading MindSpore."""
    from msdet.tools.doctor import ascend_versions, package_version

    return {
        "mindspore": package_version("mindspore"),
        **ascend_versions(),
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


def select_checks(only: str | None, cards: int) -> list[str]:
    """The check keys to run: ``--only``'s (comma-separated) or all; unknown keys are an
    error naming the valid ones."""
    if not only:
        return list(ALL_CHECKS)
    keys = [k.strip() for k in only.split(",") if k.strip()]
    unknown = [k for k in keys if k not in ALL_CHECKS]
    if unknown or not keys:
        raise ValueError(f"--only {only!r}: unknown check {unknown or only!r}; choose from "
                         f"{','.join(ALL_CHECKS)}")  # fmt: skip
    return [k for k in ALL_CHECKS if k in keys]


def compile_budget(checks: list[Check]) -> dict[str, Any]:
    """How many graphs the run compiled, and what that costs on a 910 at MindYOLO's pace."""
    graphs = sum(int(c.figures.get("graphs", 0)) for c in checks)
    measured = sum(float(c.figures.get("compile_s", 0.0)) for c in checks)
    low, high = (graphs * s / 60 for s in MINDYOLO_COMPILE_S)
    return {
        "graphs": graphs,
        "compile_s_measured": round(measured, 1),
        "mindyolo_compile_s_per_graph": list(MINDYOLO_COMPILE_S),
        "estimate_min_on_910": [round(low, 1), round(high, 1)],
        "note": (
            f"MindYOLO's YOLOX graphs compile in {MINDYOLO_COMPILE_S[0]}-{MINDYOLO_COMPILE_S[1]} s "
            f"each on Ascend 910 (jit level O2): {graphs} graphs may take {low:.0f}-{high:.0f} min "
            f"to compile there; a {BUDGET_S // 60}-minute budget holds for "
            f"{BUDGET_S // MINDYOLO_COMPILE_S[1]}-{BUDGET_S // MINDYOLO_COMPILE_S[0]} graphs: "
            "choose checks with --only"
        ),
    }


def child_env() -> dict[str, str]:
    """This process's environment without a launcher's role variables."""
    return {k: v for k, v in os.environ.items() if not k.startswith(("MS_ROLE", "MS_SCHED"))}


def run_child(cmd: list[str], cwd: str, env: dict[str, str] | None = None) -> tuple[int, str]:
    """Run ``cmd``, its output passed through to this process's stderr; returns (exit
    status, its last output lines)."""
    tail: collections.deque[str] = collections.deque(maxlen=20)
    with subprocess.Popen(cmd, cwd=cwd, env=env or child_env(), stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, errors="replace") as proc:  # fmt: skip
        for line in proc.stdout:
            sys.stderr.write(line)
            if line.strip():
                tail.append(line.rstrip())
    return proc.returncode, "\n".join(tail)


def self_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "msdet.tools.selftest", *args]


def device_lines(keys: list[str], rc: int, tail: str, work: str) -> tuple[dict, list[Check]]:
    """The device child's report lines, with a failed line for the check a crash cut short
    and a skipped one for each check it never reached."""
    env, lines, started = read_results(os.path.join(work, RESULTS_FILE))
    done = {key for key, _ in lines}
    checks = [c for _, c in lines]
    last = tail.splitlines()[-1] if tail else ""
    for key in keys:
        if key in done:
            continue
        if key in started:
            checks.append(Check(key, "failed", {"output_tail": tail[-2000:]},
                                note=f"the device process died in this check (exit status {rc}): {last}"))  # fmt: skip
        else:
            checks.append(
                skipped(key, f"not run: the device process ended first (exit status {rc})")
            )
    if rc != 0 and not checks:
        checks.append(Check("device process", "failed", {"output_tail": tail[-2000:]},
                            note=f"exit status {rc}: {last}"))  # fmt: skip
    return env, checks


def distributed_lines(cards: int, device: str, overrides: list[str], work: str) -> list[Check]:
    """``cards`` ranks through msdet's launcher (:mod:`.ranks`), after the device child."""
    env = {k: v for k, v in child_env().items() if not k.startswith(("MS_", "RANK_"))}
    env["TRAIN_ENTRY"] = os.path.join(ROOT, "tools", "selftest", "ranks.py")
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    env[WORK_VAR] = work
    run_dir = os.path.join(work, "ranks")
    runtime = "runtime=ascend_8p" if device == "Ascend" else "runtime=cpu"
    settings = [runtime, *overrides, "runtime.cpu_kernels=native", "runtime.sync_bn=true"]
    cmd = ["bash", os.path.join(ROOT, "scripts", "run_distributed_train.sh"), str(cards),
           *settings, f"run.dir={run_dir}"]  # fmt: skip
    started = time.perf_counter()
    rc, tail = run_child(cmd, ROOT, env)
    seconds = time.perf_counter() - started
    result = os.path.join(run_dir, RANKS_RESULT)
    if rc != 0 or not os.path.isfile(result):
        last = tail.splitlines()[-1] if tail else "?"
        return [Check(f"{cards} ranks", "failed", {"output_tail": tail[-2000:]}, seconds=seconds,
                      note=f"exit status {rc}: {last} (rank logs: {run_dir}, kept with --keep)")]  # fmt: skip
    with open(result, encoding="utf-8") as f:
        lines = [Check(**item) for item in json.load(f)]
    for line in lines:
        line.seconds = line.seconds or seconds / len(lines)
    return lines


def run_selftest(overrides: list[str], keys: list[str], size: int, cards: int, work: str
                 ) -> tuple[dict[str, Any], list[Check]]:  # fmt: skip
    """Every selected check, each in the report whatever happens to the others."""
    from msdet.engine.runtime.device import resolve_device

    env = host_environment()
    try:
        device = resolve_device(compose_config(overrides).runtime.device)
    except Exception as err:  # a bad setting: nothing can run
        return env, [Check("configuration", "failed", note=error_note(err))] + [
            skipped(k, "not run: the configuration failed") for k in keys
        ]
    env["device"] = device
    checks: list[Check] = []
    reference_ok = True
    if any(k not in NO_REFERENCE for k in keys):
        started = time.perf_counter()
        rc, tail = run_child(self_command("--reference", work, "--size", str(size)), work)
        log.info("CPU reference: exit status %d in %.1f s", rc, time.perf_counter() - started)
        if rc != 0:
            reference_ok = False
            checks.append(Check(REFERENCE_NAME, "failed", {"output_tail": tail[-2000:]},
                                seconds=time.perf_counter() - started,
                                note=f"exit status {rc}: {(tail.splitlines() or ['?'])[-1]}"))  # fmt: skip
    runnable = [k for k in keys if k in CHECKS and (reference_ok or k in NO_REFERENCE)]
    checks += [skipped(k, "not run: the CPU reference failed")
               for k in keys if k not in runnable and k != "distributed"]  # fmt: skip
    if runnable:
        command = self_command("--device-checks", work, "--size", str(size),
                               "--only", ",".join(runnable), *overrides)  # fmt: skip
        rc, tail = run_child(command, work)
        device_env, lines = device_lines(runnable, rc, tail, work)
        env.update(device_env)
        checks += lines
    if "distributed" in keys:
        if cards < 2:
            checks.append(skipped("collectives (2+ cards)", "needs 2+ cards: run with --cards N"))
        elif not reference_ok:
            checks.append(skipped(f"{cards} ranks", "not run: the CPU reference failed"))
        else:
            checks += distributed_lines(cards, device, overrides, work)
    return env, checks


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m msdet.tools.selftest",
                                     description=__doc__.split("\n\n")[0])  # fmt: skip
    parser.add_argument("--size", type=int, default=320, help="input size (64: the tiny variant)")
    parser.add_argument("--cards", type=int, default=0, help="also check N ranks (2+)")
    parser.add_argument("--only", help=f"comma-separated checks of {','.join(ALL_CHECKS)}")
    parser.add_argument("--report", default="selftest.json", help="where the JSON report goes")
    parser.add_argument("--keep", action="store_true", help="keep the work folder")
    parser.add_argument("--reference", metavar="DIR", help=argparse.SUPPRESS)
    parser.add_argument("--device-checks", metavar="DIR", help=argparse.SUPPRESS)
    parser.add_argument("overrides", nargs="*", help="config settings, e.g. runtime.device=CPU")
    args = parser.parse_args(argv)
    try:
        keys = select_checks(args.only, args.cards)
    except ValueError as err:
        parser.error(str(err))
    if args.reference:
        from msdet.tools.selftest.reference import make_reference

        make_reference(args.reference, args.size)
        return 0
    if args.device_checks:
        from msdet.tools.selftest.device import run_device_checks

        run_device_checks(args.overrides, keys, args.device_checks)
        return 0
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    work = tempfile.mkdtemp(prefix="msdet-selftest-")
    started = time.perf_counter()
    env: dict[str, Any] = {}
    checks: list[Check] = []
    try:
        env, checks = run_selftest(args.overrides, keys, args.size, args.cards, work)
    except Exception as err:  # the report is written whatever happened
        checks.append(Check("self-test", "failed", note=error_note(err)))
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    report = {
        "environment": env,
        "size": args.size,
        "cards": args.cards,
        "checks_selected": keys,
        "total_s": round(time.perf_counter() - started, 1),
        "checks": [asdict(c) for c in checks],
        "summary": {s: sum(c.status == s for c in checks) for s in STATUS_ORDER},
        "compile_budget": compile_budget(checks),
    }
    if checks:
        print(format_table(checks))
    print(report["compile_budget"]["note"])
    print(f"summary: {report['summary']} in {report['total_s']} s; report: {args.report}")
    with open(args.report, "w", encoding="utf-8") as f:
        json.dump(report, f, indent=2, default=str)
    return 1 if report["summary"]["failed"] or not checks else 0
