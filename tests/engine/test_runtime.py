"""engine.runtime: device detection, modes, AMP/sink resolution, the oneDNN setting."""

from __future__ import annotations

import os
import subprocess
import sys

import mindspore as ms
import pytest
from omegaconf import OmegaConf

from engine import runtime
from engine.runtime import resolve_amp, resolve_device, resolve_sink, setup_runtime

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def runtime_cfg(**overrides):
    cfg = OmegaConf.load(os.path.join(ROOT, "configs", "runtime", "auto.yaml"))
    return OmegaConf.merge(cfg, overrides)


def test_auto_picks_cpu_without_ascend_devices(monkeypatch):
    monkeypatch.setattr(runtime, "ascend_present", lambda: False)
    assert resolve_device("auto") == "CPU"
    monkeypatch.setattr(runtime, "ascend_present", lambda: True)
    assert resolve_device("auto") == "Ascend"
    assert resolve_device("GPU") == "GPU"
    with pytest.raises(ValueError, match="runtime.device"):
        resolve_device("TPU")


def test_amp_and_sink_defaults_per_device():
    assert resolve_amp("auto", "CPU") == "O0" and resolve_amp("auto", "Ascend") == "O2"
    assert resolve_amp("O3", "CPU") == "O3"
    with pytest.raises(ValueError, match="runtime.amp"):
        resolve_amp("O4", "CPU")
    assert resolve_sink("auto", "Ascend") is True and resolve_sink("auto", "CPU") is False
    assert resolve_sink(True, "CPU") is True


def test_setup_on_cpu_sets_mode_and_reports(tmp_path):
    rt = setup_runtime(runtime_cfg(device="CPU", mode="pynative", sink=True), str(tmp_path))
    try:
        assert rt.device == "CPU" and rt.mode == "pynative" and rt.amp_level == "O0"
        assert ms.get_context("mode") == ms.PYNATIVE_MODE
        assert rt.sink and not rt.sink_effective  # CPU cannot sink: the trainer says so
        assert rt.is_main and not rt.distributed and not rt.uses_dynamic_loss_scale  # O0
    finally:
        ms.set_context(mode=ms.GRAPH_MODE)
    rt = setup_runtime(runtime_cfg(device="CPU", mode="graph"), str(tmp_path))
    assert ms.get_context("mode") == ms.GRAPH_MODE
    with pytest.raises(ValueError, match="runtime.mode"):
        setup_runtime(runtime_cfg(device="CPU", mode="eager"), str(tmp_path))


def _isa_seen_by_fresh_process(env: dict) -> str:
    code = (
        "import os; from engine.runtime import configure_process_env;"
        "configure_process_env('CPU'); print(os.environ.get('ONEDNN_MAX_CPU_ISA'))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True, check=True
    )
    return out.stdout.strip()


def test_onednn_isa_is_set_on_cpu_unless_the_user_chose():
    env = {k: v for k, v in os.environ.items() if k != "ONEDNN_MAX_CPU_ISA"}
    assert _isa_seen_by_fresh_process(env) == "AVX2"
    assert _isa_seen_by_fresh_process({**env, "ONEDNN_MAX_CPU_ISA": "AVX512_CORE"}) == "AVX512_CORE"


def test_distributed_outside_a_launcher_names_the_scripts(tmp_path):
    code = (
        "from omegaconf import OmegaConf; from engine.runtime import setup_runtime;"
        "cfg = OmegaConf.load('configs/runtime/auto.yaml'); cfg.device = 'CPU';"
        "cfg.distributed = True; setup_runtime(cfg, '.')"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MS_", "RANK"))}
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode != 0
    assert "run_distributed_train.sh" in out.stderr
