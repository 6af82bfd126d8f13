"""engine.runtime.process.setup_runtime in fresh processes: modes, launchers, the compile
cache switch."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.support import ROOT

# Every test here takes seconds: it compiles, trains or starts a process.
pytestmark = pytest.mark.slow

SETUP_PROBE = """
import json, sys
import mindspore as ms
from msdet.common.config import load_config
from msdet.engine.runtime.process import setup_runtime
from msdet.engine.training.plan import DataSummary, plan_run
from msdet.engine.training.trainer import build_loop
try:
    cfg = load_config("train", [f"runtime.{k}={v}" for k, v in json.loads(sys.argv[1]).items()])
    rt = setup_runtime(cfg.runtime, ".")
    setup_mode = ms.get_context("mode")
    plan = plan_run(cfg, rt, DataSummary("shapes", 64, 8, ("a", "b", "c")))
    build_loop(plan, rt)  # a training run's loop: it sets the mode its steps run in
except ValueError as err:  # a refused setting (the config's ConfigError is one too)
    print(json.dumps({"error": str(err)}))
    sys.exit(0)
print(json.dumps({"device": rt.device, "mode": rt.mode, "loop": plan.loop.value,
                  "run_mode": plan.mode, "amp": rt.amp_level, "sink": rt.sink,
                  "jit_level": plan.backends["train"].jit_level,
                  "backend": plan.backends["train"].runs, "sink_effective": rt.sink_effective,
                  "main": rt.is_main, "distributed": rt.distributed,
                  "dynamic": rt.uses_dynamic_loss_scale, "setup_mode": setup_mode,
                  "ms_mode": ms.get_context("mode"), "PYNATIVE": ms.PYNATIVE_MODE}))
"""


def setup_in_fresh_process(**overrides) -> dict:
    """setup_runtime in its own process: MindSpore pins the device once a kernel has run,
    so it cannot be set up again inside the test process."""
    out = subprocess.run(
        [sys.executable, "-c", SETUP_PROBE, json.dumps(overrides)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_the_jit_loop_runs_pynative_mode():
    got = setup_in_fresh_process(device="CPU", loop="jit", sink=True)
    assert got["loop"] == "jit" and got["run_mode"] == "pynative" and got["mode"] == "graph"
    assert got["setup_mode"] != got["PYNATIVE"]  # eval and export start in graph mode...
    assert got["ms_mode"] == got["PYNATIVE"]  # ...the jit loop switches: mindspore.jit compiles
    assert got["sink"] and not got["sink_effective"]  # mindspore.data_sink refuses CPU
    assert (got["jit_level"], got["backend"]) == ("O0", "kernel by kernel")
    assert "runtime.mode=pynative" in setup_in_fresh_process(loop="jit", mode="pynative")["error"]
    assert "runtime.loop=model" in setup_in_fresh_process(loop="jit", jit_level="O2")["error"]


def test_setup_on_cpu_sets_mode_and_reports():
    got = setup_in_fresh_process(device="CPU", mode="pynative", sink=True, amp="O2")
    assert got["device"] == "CPU" and got["run_mode"] == "pynative" and got["amp"] == "O2"
    assert got["ms_mode"] == got["PYNATIVE"]
    assert got["sink"] and not got["sink_effective"]  # CPU cannot sink: the trainer says so
    assert got["main"] and not got["distributed"]
    assert got["dynamic"]  # O2: dynamic loss scaling, on CPU too
    got = setup_in_fresh_process(device="CPU", mode="graph")
    assert got["ms_mode"] != got["PYNATIVE"] and got["amp"] == "O0" and not got["dynamic"]
    assert "runtime.mode" in setup_in_fresh_process(device="CPU", mode="eager")["error"]


def test_distributed_outside_a_launcher_names_the_scripts(tmp_path):
    code = (
        "from omegaconf import OmegaConf; from msdet.engine.runtime.process import setup_runtime;"
        "cfg = OmegaConf.load('configs/runtime/auto.yaml'); cfg.device = 'CPU';"
        "cfg.distributed = True; setup_runtime(cfg, '.')"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MS_", "RANK"))}
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode != 0
    assert "run_distributed_train.sh" in out.stderr
