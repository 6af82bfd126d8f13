"""The self-test's parent: the checks chosen, the compile budget, every failure in the
report (a bad device, a bad setting, a process that dies), no MindSpore in the parent
process (so rank 0 alone opens card 0), and on CPU the whole tiny variant passing and
skipping only what needs a card (slow)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from msdet.tools.selftest.cases import (
    Check,
)
from msdet.tools.selftest.device import RESULTS_FILE, Recorder
from msdet.tools.selftest.report import (
    compile_budget,
    device_lines,
    select_checks,
)
from tests.support import ROOT


def test_check_selection_names_the_valid_checks():
    assert select_checks(None, 0)[0] == "chip" and select_checks(None, 0)[-1] == "distributed"
    assert select_checks("eval, step", 0) == ["step", "eval"]  # in the order they run
    with pytest.raises(ValueError, match="choose from chip,forward,step"):
        select_checks("step,bogus", 0)


def test_compile_budget_counts_the_graphs_against_mindyolos_compile_times():
    checks = [
        Check("forward O0", "passed", {"graphs": 1, "compile_s": 9.0}),
        Check("a step", "passed", {"graphs": 2, "compile_s": 20.0}),
        Check("chip", "passed", {"graphs": 0}),
    ]
    budget = compile_budget(checks)
    assert budget["graphs"] == 3 and budget["compile_s_measured"] == 29.0
    assert budget["estimate_min_on_910"] == [8.5, 17.1]  # 3 x 170 s, 3 x 341 s
    assert (
        "170-341 s" in budget["note"] and "10-minute budget holds for 1-3 graphs" in budget["note"]
    )


def run_selftest(tmp_path, *args: str, python: list[str] | None = None):
    report = tmp_path / "selftest.json"
    done = subprocess.run(
        [*(python or [sys.executable, "-m", "msdet.tools.selftest"]), "--report",
         str(report), *args],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": ROOT},
        capture_output=True,
        text=True,
        timeout=1800,
    )  # fmt: skip
    return done, (json.loads(report.read_text()) if report.is_file() else {})


@pytest.mark.slow
def test_a_device_that_fails_to_set_up_is_in_the_report(tmp_path):
    """MindSpore refuses Ascend on this CPU: the report says so and names what did not run."""
    done, report = run_selftest(tmp_path, "--only", "chip", "runtime.device=Ascend")
    assert done.returncode == 1, done.stdout + done.stderr[-2000:]
    checks = {c["name"]: c for c in report["checks"]}
    assert checks["device set-up"]["status"] == "failed"
    assert "Ascend" in checks["device set-up"]["note"]
    assert checks["chip"]["status"] == "skipped" and "set-up failed" in checks["chip"]["note"]
    assert report["summary"]["failed"] == 1 and report["environment"]["mindspore"]


@pytest.mark.slow
def test_a_bad_setting_is_in_the_report(tmp_path):
    done, report = run_selftest(tmp_path, "--only", "chip", "runtime.amp=O9")
    assert done.returncode == 1
    failed = [c for c in report["checks"] if c["status"] == "failed"]
    assert [c["name"] for c in failed] == ["configuration"] and "amp" in failed[0]["note"]


@pytest.mark.slow
def test_the_parent_process_never_loads_mindspore(tmp_path):
    """No MindSpore in the parent: it can hold no card, so with --cards N rank 0 alone opens
    card 0 (the single-card checks ran in a child that has exited by then)."""
    code = (
        "import runpy, sys\n"
        "sys.argv = ['selftest', *sys.argv[1:]]\n"
        "try:\n    runpy.run_module('msdet.tools.selftest', run_name='__main__')\n"
        "except SystemExit as stop:\n    code = stop.code\n"
        "print('MINDSPORE_LOADED', any(m.split('.')[0] == 'mindspore' for m in sys.modules))\n"
        "sys.exit(code)\n"
    )
    done, report = run_selftest(tmp_path, "--only", "chip", "--cards", "2", "runtime.device=CPU",
                                python=[sys.executable, "-c", code])  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr[-2000:]
    assert "MINDSPORE_LOADED False" in done.stdout
    assert [c["name"] for c in report["checks"]] == ["chip profile (simulated)"]
    assert report["environment"]["device"] == "CPU"  # from the device process


def test_a_device_process_that_dies_mid_check_is_in_the_report(tmp_path):
    """What the device process leaves when it dies in a check: the lines before it, the
    check it died in (failed, with its last output) and the ones it never reached."""
    record = Recorder(str(tmp_path / RESULTS_FILE))
    record.write("environment", device="Ascend")
    record.write("start", key="chip")
    record.check("chip", Check("chip profile and precision mode", "passed"))
    record.write("start", key="step")
    with open(tmp_path / RESULTS_FILE, "a", encoding="utf-8") as f:
        f.write('{"event": "check", "key": "st')  # cut short by the crash
    env, checks = device_lines(["chip", "step", "eval"], -11, "compiling\nSegmentation fault",
                               str(tmp_path))  # fmt: skip
    assert env == {"device": "Ascend"}
    assert [(c.name, c.status) for c in checks] == [
        ("chip profile and precision mode", "passed"), ("step", "failed"), ("eval", "skipped")]  # fmt: skip
    assert "died in this check (exit status -11): Segmentation fault" in checks[1].note
    assert "ended first" in checks[2].note


@pytest.mark.slow
@pytest.mark.long(190)
def test_tiny_selftest_on_cpu_passes_and_skips_what_needs_a_card(tmp_path):
    """The tiny variant (64 px) with 2 ranks: ~5 min on 2 loaded cores, most of it compiling
    14 graphs. The default variant (320 px) runs the same checks on bigger tensors."""
    done, report = run_selftest(tmp_path, "--size", "64", "--cards", "2", "runtime.device=CPU")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    checks = {c["name"]: c for c in report["checks"]}
    status = {name: c["status"] for name, c in checks.items()}
    assert {n for n, s in status.items() if s == "skipped"} == {"data sinking (sink_size > 1)"}
    assert "needs Ascend" in checks["data sinking (sink_size > 1)"]["note"]
    assert report["summary"]["failed"] == 0 and len(status) == 14
    # Figures, not only verdicts: the comparisons compared real values.
    assert checks["NMSWithMask on the device vs host NMS"]["figures"]["kept"] > 1000
    assert checks["injected overflow at O2"]["figures"]["weights_moved"] == []
    step = checks["training step O0: losses, update"]["figures"]
    assert step["update_norm"] > 0 and step["loss_terms"][0] > 0 and step["num_fg"] > 0
    resumed = checks["checkpoint saved and restored on the device"]["figures"]
    assert (
        resumed["tensors"] > 1000 and resumed["differ"] == [] and resumed["changed_by_restore"] > 0
    )
    coco = checks["COCO evaluation vs the host's"]["figures"]
    assert coco["host_mAP"] > 0.5 and coco["ground_truth_boxes"] > 0 and coco["detections"] > 0
    ranks = checks["2 ranks: training step vs one card's"]["figures"]
    assert ranks["ranks_equal_weights"] and len(ranks["ranks_update_norms"]) == 2
    assert checks["2 ranks: one rank overflows, every rank skips"]["figures"]["ranks_skipped"] == [
        True,
        True,
    ]
    assert report["compile_budget"]["graphs"] == 14  # 9 on one card (sinking skipped), 5 per rank
    assert report["environment"]["device"] == "CPU" and report["environment"]["mindspore"]


@pytest.mark.slow
def test_the_selftest_runs_the_jit_loops_step_on_cpu(tmp_path):
    """runtime.loop=jit: the training step called through mindspore.jit in PyNative mode
    against the host's step (equal: update_norm_rel_error 0 on the AMD EPYC), a checkpoint
    restored; sinking skipped, as on CPU for either loop. (``overflow`` passed too, measured;
    its O2 graph would double this test's compile time.)"""
    done, report = run_selftest(
        tmp_path, "--size", "64", "--only", "step,sink,checkpoint",
        "runtime.device=CPU", "runtime.loop=jit")  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert report["environment"]["loop"] == "jit" and report["environment"]["mode"] == "pynative"
    checks = {c["name"]: c for c in report["checks"]}
    assert "needs Ascend" in checks["data sinking (sink_size > 1)"]["note"]
    step = checks["training step O0: losses, update"]
    assert step["status"] == "passed" and step["figures"]["update_norm"] > 0
    assert checks["checkpoint saved and restored on the device"]["status"] == "passed"
