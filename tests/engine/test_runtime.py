"""engine.runtime: device detection, modes, AMP/sink resolution, the oneDNN setting."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from engine import runtime
from engine.runtime import resolve_amp, resolve_device, resolve_sink

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


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


SETUP_PROBE = """
import json, sys
import mindspore as ms
from omegaconf import OmegaConf
from engine.runtime import setup_runtime
cfg = OmegaConf.merge(OmegaConf.load("configs/runtime/auto.yaml"), json.loads(sys.argv[1]))
try:
    rt = setup_runtime(cfg, ".")
except ValueError as err:
    print(json.dumps({"error": str(err)}))
    sys.exit(0)
print(json.dumps({"device": rt.device, "mode": rt.mode, "amp": rt.amp_level, "sink": rt.sink,
                  "sink_effective": rt.sink_effective, "main": rt.is_main,
                  "distributed": rt.distributed, "dynamic": rt.uses_dynamic_loss_scale,
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


def test_setup_on_cpu_sets_mode_and_reports():
    got = setup_in_fresh_process(device="CPU", mode="pynative", sink=True, amp="O2")
    assert got["device"] == "CPU" and got["mode"] == "pynative" and got["amp"] == "O2"
    assert got["ms_mode"] == got["PYNATIVE"]
    assert got["sink"] and not got["sink_effective"]  # CPU cannot sink: the trainer says so
    assert got["main"] and not got["distributed"]
    assert got["dynamic"]  # O2: dynamic loss scaling, on CPU too
    got = setup_in_fresh_process(device="CPU", mode="graph")
    assert got["ms_mode"] != got["PYNATIVE"] and got["amp"] == "O0" and not got["dynamic"]
    assert "runtime.mode" in setup_in_fresh_process(device="CPU", mode="eager")["error"]


def _seen_by_fresh_process(env: dict, var: str) -> str:
    code = (
        "import os; from engine.runtime import configure_process_env;"
        f"configure_process_env('CPU'); print(os.environ.get({var!r}))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True, check=True
    )
    return out.stdout.strip()


@pytest.mark.parametrize(
    "var, ours, theirs",
    [("ONEDNN_MAX_CPU_ISA", "AVX2", "AVX512_CORE"), ("OMP_WAIT_POLICY", "PASSIVE", "ACTIVE")],
)
def test_cpu_environment_is_set_unless_the_user_chose(var, ours, theirs):
    env = {k: v for k, v in os.environ.items() if k != var}
    assert _seen_by_fresh_process(env, var) == ours
    assert _seen_by_fresh_process({**env, var: theirs}, var) == theirs


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


def test_cpu_threads_share_the_host_between_ranks(monkeypatch):
    from data.config import LOCAL_RANKS_VAR, available_cores
    from engine.runtime import cpu_threads

    monkeypatch.delenv(LOCAL_RANKS_VAR, raising=False)
    cores = available_cores()
    assert cpu_threads(None) is None  # one process: MindSpore's own default
    assert cpu_threads(1) == 1
    assert cpu_threads(cores + 5) == cores  # clamped to what the process may use
    monkeypatch.setenv(LOCAL_RANKS_VAR, str(cores * 2))  # more ranks than cores
    assert cpu_threads(None) == 1
    monkeypatch.setenv(LOCAL_RANKS_VAR, "1")
    assert cpu_threads(None) is None


def test_float_status_register_where_mindspore_reads_it():
    # As mindspore/amp.py and nn/wrap/loss_scale.py decide: the Atlas training series
    # always, A2 only in saturation mode, nowhere else.
    assert runtime.float_status_register(True, False, None) is True
    assert runtime.float_status_register(False, True, "SATURATION_MODE") is True
    assert runtime.float_status_register(False, True, "INFNAN_MODE") is False
    assert runtime.float_status_register(False, True, None) is False
    assert runtime.float_status_register(False, False, "SATURATION_MODE") is False


def test_precision_mode_default_keeps_fp32_and_bad_values_are_named():
    assert runtime.DEFAULT_PRECISION_MODE == "must_keep_origin_dtype"
    assert runtime.check_precision_mode("force_fp16") == "force_fp16"
    with pytest.raises(ValueError, match="runtime.precision_mode must be one of"):
        runtime.check_precision_mode("fp16_please")


def test_sink_plan_profiles_with_one_step_per_sink():
    """With real sinking the step callbacks run once per sink: the profiler, which counts
    steps, gets one step per sink; otherwise sinks follow runtime.sink_size."""
    from engine.runtime import Runtime
    from engine.trainer import _sink_plan

    ascend = Runtime(device="Ascend", mode="graph", amp_level="O2", sink=True, sink_size=-1)
    assert _sink_plan(ascend, 100) == (100, 1)
    assert _sink_plan(ascend, 100, profiling=True) == (1, 100)
    assert _sink_plan(Runtime("Ascend", "graph", "O2", True, 25), 100) == (25, 4)
    cpu = Runtime(device="CPU", mode="graph", amp_level="O0", sink=True, sink_size=-1)
    assert _sink_plan(cpu, 100, profiling=True) == (100, 1)  # no real sink on CPU
    with pytest.raises(ValueError, match="runtime.sink_size=30 must be -1 or divide"):
        _sink_plan(Runtime("Ascend", "graph", "O2", True, 30), 100)


def test_cpu_kernels_on_cpu_in_fp32_only(tmp_path, monkeypatch):
    from ops import cpu_kernels

    monkeypatch.setenv("MSDET_CACHE_DIR", str(tmp_path))
    previous = cpu_kernels.custom_kernel_library()
    try:
        lib, kernels = runtime.setup_cpu_kernels("msdet", "CPU")
        if lib is None:
            pytest.skip("no C++ compiler on this machine")
        assert os.path.dirname(lib) == str(tmp_path / "kernels")
        assert kernels == cpu_kernels.KERNELS
        assert cpu_kernels.custom_kernel_library() == lib
        # Ascend/GPU keep their native operators (auto too: nothing measured there); so does
        # an explicit "native".
        assert runtime.setup_cpu_kernels("auto", "Ascend") == (None, ())
        assert runtime.setup_cpu_kernels("msdet", "Ascend") == (None, ())
        assert cpu_kernels.custom_kernel_library() is None
        runtime.setup_cpu_kernels("msdet", "CPU")
        assert runtime.setup_cpu_kernels("native", "CPU") == (None, ())
        runtime.setup_cpu_kernels("msdet", "CPU")
        assert runtime.setup_cpu_kernels("msdet", "CPU", "O2") == (None, ())  # fp32-only kernel
        assert cpu_kernels.custom_kernel_library() is None
        with pytest.raises(ValueError, match="runtime.cpu_kernels"):
            runtime.setup_cpu_kernels("fast", "CPU")
    finally:
        cpu_kernels.set_custom_kernel_library(previous)


def _composed(*overrides: str):
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=os.path.join(ROOT, "configs"), version_base="1.3"):
        return compose("config", overrides=list(overrides))


def test_graph_key_ignores_what_changes_no_graph():
    base = runtime.graph_key(_composed())
    # A resumed run, another time limit or data folder: the same graphs.
    for neutral in ("train.resume=auto", "train.time_limit_min=5", "data.root=/elsewhere"):
        assert runtime.graph_key(_composed(neutral)) == base, neutral
    # Batch, size range, model and precision change the graphs.
    for changing in (
        "train.batch_size=4",
        "train.multiscale_range=2",
        "model=yolox_s",
        "runtime.amp=O2",
        "data.img_size=[256,256]",
    ):
        assert runtime.graph_key(_composed(changing)) != base, changing


def test_compile_cache_folder_per_key_device_kernel_and_version():
    folder = runtime.compile_cache_folder("/c", "k", "CPU", "/lib/a.so", "2.10.0")
    assert os.path.dirname(folder) == "/c" and len(os.path.basename(folder)) == 16
    assert folder == runtime.compile_cache_folder("/c", "k", "CPU", "/lib/a.so", "2.10.0")
    others = {
        runtime.compile_cache_folder("/c", "k2", "CPU", "/lib/a.so", "2.10.0"),
        runtime.compile_cache_folder("/c", "k", "Ascend", "/lib/a.so", "2.10.0"),
        runtime.compile_cache_folder("/c", "k", "CPU", None, "2.10.0"),
        runtime.compile_cache_folder("/c", "k", "CPU", "/lib/a.so", "2.11.0"),
    }
    assert folder not in others and len(others) == 4


CACHE_PROBE = """
import json, os, sys
from omegaconf import OmegaConf
from engine.runtime import setup_runtime
cfg = OmegaConf.merge(OmegaConf.load("configs/runtime/auto.yaml"), json.loads(sys.argv[1]))
try:
    setup_runtime(cfg, ".", graph_key=sys.argv[2] or None)
except ValueError as err:
    print(json.dumps({"error": str(err)}))
    sys.exit(0)
print(json.dumps({k: os.environ.get(k) for k in ("MS_COMPILER_CACHE_ENABLE", "MS_COMPILER_CACHE_PATH")}))
"""


def _cache_env(tmp_path, key: str, **overrides) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MS_COMPILER_CACHE")}
    env["MSDET_CACHE_DIR"] = str(tmp_path)
    out = subprocess.run(
        [sys.executable, "-c", CACHE_PROBE, json.dumps({"device": "CPU", **overrides}), key],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_compile_cache_switch_sets_mindspores_cache_folder(tmp_path):
    on = _cache_env(tmp_path, "key-a", compile_cache=True)
    assert on["MS_COMPILER_CACHE_ENABLE"] == "1"
    assert os.path.dirname(on["MS_COMPILER_CACHE_PATH"]) == str(tmp_path / "graphs")
    assert _cache_env(tmp_path, "key-a", compile_cache=True) == on  # a repeated run: same folder
    other = _cache_env(tmp_path, "key-b", compile_cache=True)["MS_COMPILER_CACHE_PATH"]
    assert other != on["MS_COMPILER_CACHE_PATH"]
    off = _cache_env(tmp_path, "key-a", compile_cache=False)
    assert off == {"MS_COMPILER_CACHE_ENABLE": None, "MS_COMPILER_CACHE_PATH": None}
    assert "train.py" in _cache_env(tmp_path, "", compile_cache=True)["error"]


def _resident_mib() -> float:
    with open("/proc/self/status", encoding="utf-8") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS in /proc/self/status")


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="Linux only")
def test_release_free_heap_returns_freed_heap_to_the_os():
    chunks = [bytearray(64 * 1024) for _ in range(4000)]  # 250 MiB on the C heap
    pin = bytearray(64 * 1024)  # above them: glibc cannot trim the top by itself
    filled = _resident_mib()
    del chunks
    assert _resident_mib() > filled - 50  # freed, but still resident
    assert runtime.release_free_heap()
    assert _resident_mib() < filled - 200
    del pin
