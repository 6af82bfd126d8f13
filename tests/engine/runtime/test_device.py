"""engine.runtime.device and its sides (cpu, ascend): device detection, AMP/sink resolution, the CPU environment and kernels,
Ascend precision and overflow detection, threads per rank."""

from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import sys

import pytest

from msdet.engine.runtime import ascend, cpu
from msdet.engine.runtime import device as dev
from msdet.engine.runtime.device import resolve_amp, resolve_device, resolve_sink
from msdet.engine.runtime.kernel_choice import DECISIONS, choice_path
from msdet.ops import cpu_kernels
from tests.support import ROOT


def test_auto_picks_cpu_without_ascend_devices(monkeypatch):
    monkeypatch.setattr(dev, "ascend_present", lambda: False)
    assert resolve_device("auto") == "CPU"
    monkeypatch.setattr(dev, "ascend_present", lambda: True)
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


def _fresh_python(code: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """``code`` run by a new interpreter from the repository root (its output captured)."""
    return subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True, check=True
    )


def _seen_by_fresh_process(env: dict, var: str) -> str:
    code = (
        "import os; from msdet.engine.runtime.cpu import configure_process_env;"
        f"configure_process_env('CPU'); print(os.environ.get({var!r}))"
    )
    return _fresh_python(code, env).stdout.strip()


@pytest.mark.slow
@pytest.mark.parametrize(
    "var, ours, theirs",
    [("ONEDNN_MAX_CPU_ISA", "AVX2", "AVX512_CORE"), ("OMP_WAIT_POLICY", "PASSIVE", "ACTIVE")],
)
def test_cpu_environment_is_set_unless_the_user_chose(var, ours, theirs):
    env = {k: v for k, v in os.environ.items() if k != var}
    assert _seen_by_fresh_process(env, var) == ours
    assert _seen_by_fresh_process({**env, var: theirs}, var) == theirs


@pytest.mark.slow
def test_a_users_wait_policy_keeps_libgomps_spin_count_for_it():
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    assert _seen_by_fresh_process(env, "GOMP_SPINCOUNT") == "1000"
    assert _seen_by_fresh_process({**env, "GOMP_SPINCOUNT": "50"}, "GOMP_SPINCOUNT") == "50"
    # OMP_WAIT_POLICY=ACTIVE means spin for minutes in libgomp: no spin count overrides it
    active = {**env, "OMP_WAIT_POLICY": "ACTIVE"}
    assert _seen_by_fresh_process(active, "GOMP_SPINCOUNT") == "None"


@pytest.mark.parametrize("entry", ["train.py", "eval.py", "predict.py", "export.py"])
def test_entry_points_load_mindspore_only_after_the_environment_is_set(entry):
    # libgomp (loaded with MindSpore) reads OMP_WAIT_POLICY and GOMP_SPINCOUNT once: an entry
    # point whose imports load MindSpore leaves OpenMP spinning (training steps ~2x slower).
    code = (
        "import runpy, sys; from msdet.engine.runtime.cpu import openmp_loaded;"
        f"runpy.run_path({entry!r}, run_name='imports_only');"
        "print('mindspore' in sys.modules, openmp_loaded())"
    )
    out = _fresh_python(code)
    assert out.stdout.split() == ["False", "False"], f"{entry} imports MindSpore at module level"


def test_openmp_loaded_reads_the_process_map(tmp_path):
    maps = tmp_path / "maps"
    maps.write_text("7f00-7f01 r-xp 0 08:01 1 /usr/lib/x86_64-linux-gnu/libc.so.6\n")
    assert cpu.openmp_loaded(str(maps)) is False
    maps.write_text("7f00-7f01 r-xp 0 08:01 2 /usr/lib/x86_64-linux-gnu/libgomp.so.1.0.0\n")
    assert cpu.openmp_loaded(str(maps)) is True
    assert cpu.openmp_loaded(str(tmp_path / "absent")) is False


@pytest.mark.slow
def test_openmp_loaded_before_the_environment_is_a_warning():
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    code = (
        "import logging; logging.basicConfig();{first}"
        "from msdet.engine.runtime.cpu import configure_process_env;"
        "configure_process_env('CPU')"
    )
    late = _fresh_python(code.format(first="import mindspore;"), env)
    assert "libgomp" in late.stderr and "OMP_WAIT_POLICY=PASSIVE" in late.stderr
    early = _fresh_python(code.format(first=""), env)
    assert "libgomp" not in early.stderr


def test_cpu_threads_share_the_host_between_ranks(monkeypatch):
    from msdet.common.host import LOCAL_RANKS_VAR, available_cores
    from msdet.engine.runtime.cpu import cpu_threads

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
    assert ascend.float_status_register(True, False, None) is True
    assert ascend.float_status_register(False, True, "SATURATION_MODE") is True
    assert ascend.float_status_register(False, True, "INFNAN_MODE") is False
    assert ascend.float_status_register(False, True, None) is False
    assert ascend.float_status_register(False, False, "SATURATION_MODE") is False


# The chips msdet meets, as MindSpore answers its SoC capability queries for them
# (mindspore/amp.py: "amp_loss_scale_train_classic_target" is the Atlas training series,
# "train_hq_dtype_line" A2 and later).
CHIPS = {
    "ascend910": (True, False),  # 910A: classic overflow, no float32 cube
    "ascend910b": (False, True),  # 910B (A2)
    "ascend910_93": (False, True),  # later training chips answer as A2
    "ascend310p": (False, False),  # an inference chip: neither
}


def test_chip_profiles_decide_overflow_nms_and_jit_level_per_chip():
    profiles = {soc: ascend.chip_profile(soc, *answers, None) for soc, answers in CHIPS.items()}
    a, b, b93, infer = (profiles[s] for s in CHIPS)
    # 910A: no float32 cube, the register, host NMS, GE's graph sink by default
    assert (a.cube_fp32, a.float_status, a.host_nms, a.default_jit_level) == (
        False, True, True, "O2",
    )  # fmt: skip
    # 910B and later: overflow in the gradients, NMS on the device within its float16 index
    for chip in (b, b93):
        assert (chip.cube_fp32, chip.float_status, chip.host_nms, chip.nms_max_boxes) == (
            True, False, False, 2048,
        )  # fmt: skip
        assert chip.default_jit_level == "O0"
    # Neither answer: the NMS that is right everywhere
    assert infer.host_nms and not infer.float_status
    # A2 in saturation mode reads the register too
    assert ascend.chip_profile("ascend910b", False, True, "SATURATION_MODE").float_status
    assert "ascend910: cube float32 no" in a.describe()
    assert "NMS on the device (<= 2048 boxes per call)" in b.describe()


def test_precision_mode_auto_leaves_mindspores_default_and_explicit_values_win(caplog):
    """auto sets nothing: MindSpore keeps dtype on A2 and casts to fp16 on the 910A itself,
    and an explicit keep-dtype on A2 would change its HF32 convolutions."""
    a = ascend.chip_profile("ascend910", True, False, None)
    b = ascend.chip_profile("ascend910b", False, True, None)
    assert ascend.DEFAULT_PRECISION_MODE == "auto"
    assert ascend.resolve_precision_mode("auto", a) is None
    assert ascend.resolve_precision_mode(None, b) is None
    assert ascend.resolve_precision_mode("force_fp16", b) == "force_fp16"
    with caplog.at_level("WARNING", logger="msdet.engine.runtime.ascend"):
        assert (
            ascend.resolve_precision_mode("must_keep_origin_dtype", a) == "must_keep_origin_dtype"
        )
    assert "cube unit has no float32" in caplog.text
    with pytest.raises(ValueError, match="runtime.precision_mode must be one of"):
        ascend.check_precision_mode("fp16_please")


@pytest.mark.slow
def test_device_nms_is_checked_against_the_host_before_msdet_relies_on_it(monkeypatch):
    """On this CPU the device NMS (NMSWithMask) equals the host's: no problem. A device NMS
    that fails to compile, or keeps other boxes, is named, and NMS moves to the host."""
    from msdet.ops import nms

    assert ascend.device_nms_problem(256) is None
    real = nms.BatchedNMS

    class Failing(real):
        def construct(self, predictions):
            raise RuntimeError("Compile failed: NMSWithMask input shape must be [N, 8]\nmore")

    monkeypatch.setattr(nms, "BatchedNMS", Failing)
    problem = ascend.device_nms_problem(64)
    assert problem.startswith("NMSWithMask failed on this device (") and "[N, 8]" in problem
    assert "more" not in problem  # one line

    class Wrong(real):
        def construct(self, predictions):
            dets, counts = super().construct(predictions)
            return dets, counts - 1  # one detection lost, as an inexact index would

    monkeypatch.setattr(nms, "BatchedNMS", Wrong)
    assert "NMSWithMask kept" in ascend.device_nms_problem(64)


@pytest.mark.slow
def test_cpu_kernels_on_cpu_in_fp32_only(tmp_path, monkeypatch):
    from msdet.ops import cpu_kernels

    monkeypatch.setenv("MSDET_CACHE_DIR", str(tmp_path))
    kernels = cpu.setup_cpu_kernels("msdet", "CPU")
    if not kernels:
        pytest.skip("no C++ compiler on this machine")
    assert os.path.dirname(kernels.library) == str(tmp_path / "kernels")
    assert kernels.names == cpu_kernels.KERNELS
    # Ascend/GPU keep their native operators (auto too: nothing measured there); so does
    # an explicit "native", and mixed precision (the kernels are float32).
    assert cpu.setup_cpu_kernels("auto", "Ascend") == cpu_kernels.NATIVE
    assert cpu.setup_cpu_kernels("msdet", "Ascend") == cpu_kernels.NATIVE
    assert cpu.setup_cpu_kernels("native", "CPU") == cpu_kernels.NATIVE
    assert cpu.setup_cpu_kernels("msdet", "CPU", "O2") == cpu_kernels.NATIVE
    with pytest.raises(ValueError, match="runtime.cpu_kernels"):
        cpu.setup_cpu_kernels("fast", "CPU")
    # Named kernels, for ablations: exactly those, in KERNELS' order.
    named = cpu.setup_cpu_kernels("upsample+depthwise", "CPU")
    assert named.names == ("depthwise", "upsample")
    assert named.library_for("upsample") == kernels.library
    assert named.library_for("assigner") is None


def test_a_kernel_choice_is_a_value_the_builders_take(tmp_path):
    """Two networks built side by side with different kernels, no state between them."""
    from msdet.models.layers import BaseConv, DWConv
    from msdet.ops.cpu_kernels import NATIVE, CpuKernels
    from msdet.ops.depthwise import DepthwiseConv2d

    lib = tmp_path / "lib.so"
    lib.write_bytes(b"")
    only_dw = CpuKernels(str(lib), ("depthwise",))
    block, plain = DWConv(8, 16, 3, kernels=only_dw), DWConv(8, 16, 3)
    assert isinstance(block.dconv.conv, DepthwiseConv2d) and block.pconv.fused is None
    assert not isinstance(plain.dconv.conv, DepthwiseConv2d)
    assert BaseConv(8, 8, 3, kernels=only_dw.only("batchnorm_silu")).fused is not None
    assert BaseConv(8, 8, 3).fused is None
    assert CpuKernels(str(lib), ("upsample", "depthwise")) == CpuKernels(
        str(lib), ("depthwise", "upsample")
    )
    assert only_dw.key == f"{lib}:depthwise" and NATIVE.key is None and not NATIVE
    with pytest.raises(ValueError, match="unknown msdet kernels"):
        CpuKernels(str(lib), ("fast",))
    with pytest.raises(ValueError, match="need a kernel library"):
        CpuKernels(None, ("depthwise",))


def test_cpu_kernels_named_by_plus_are_checked():
    assert cpu.parse_cpu_kernels("auto") is None
    assert cpu.parse_cpu_kernels("native") == ()
    assert cpu.parse_cpu_kernels("msdet") == cpu_kernels.KERNELS
    assert cpu.parse_cpu_kernels("assigner+batchnorm_silu") == ("batchnorm_silu", "assigner")
    for bad in ("depthwise+fast", "upsample+upsample", "depthwise+", "msdet+upsample"):
        with pytest.raises(
            ValueError, match=r"runtime.cpu_kernels .*joined by '\+'.*" + re.escape(bad)
        ):
            cpu.parse_cpu_kernels(bad)


def kernel_record(kernels, version):
    times = {d.key: dict.fromkeys(d.variants, 1.0) for d in DECISIONS.values()}
    return {"kernels": list(kernels), **times, "mindspore": version, "threads": 2}


@pytest.mark.slow
def test_auto_enables_only_the_kernels_measured_faster(tmp_path, monkeypatch, caplog):
    import mindspore as ms

    monkeypatch.setenv("MSDET_CACHE_DIR", str(tmp_path))
    lib = cpu_kernels.build_kernel_library()
    if lib is None:
        pytest.skip("no C++ compiler on this machine")
    with open(choice_path(lib, 2), "w", encoding="utf-8") as f:
        json.dump(kernel_record(["depthwise"], ms.__version__), f)
    with caplog.at_level(logging.DEBUG, logger="msdet.engine.runtime.cpu"):
        chosen = cpu.setup_cpu_kernels("auto", "CPU", threads=2)
    assert chosen == cpu_kernels.CpuKernels(lib, ("depthwise",))
    # The console: one short line; the log file: which kernels, and the times.
    # (the library's own "built ..." line, on a machine that had none, is not the device's)
    records = [r for r in caplog.records if r.name == "msdet.engine.runtime.cpu"]
    info = [r.getMessage() for r in records if r.levelno == logging.INFO]
    debug = [r.getMessage() for r in records if r.levelno == logging.DEBUG]
    assert info == [f"CPU kernels: 1 of msdet's {len(cpu_kernels.KERNELS)}, measured faster "
                    "on this CPU at 2 threads (the times are in the log file)"]  # fmt: skip
    assert any("depthwise convolutions on msdet's kernels" in m for m in debug)

    from msdet.models.layers import BaseConv, DWConv
    from msdet.ops.depthwise import DepthwiseConv2d

    block = DWConv(8, 16, 3, kernels=chosen)
    assert isinstance(block.dconv.conv, DepthwiseConv2d) and block.pconv.fused is None
    # Measured slower everywhere: MindSpore's operators, nothing enabled.
    with open(choice_path(lib, 2), "w", encoding="utf-8") as f:
        json.dump(kernel_record([], ms.__version__), f)
    chosen = cpu.setup_cpu_kernels("auto", "CPU", threads=2)
    assert chosen == cpu_kernels.NATIVE
    assert BaseConv(8, 8, 3, kernels=chosen).fused is None
    # msdet forces both (tests, benchmarks) without measuring.
    chosen = cpu.setup_cpu_kernels("msdet", "CPU", threads=2)
    assert chosen == cpu_kernels.CpuKernels(lib, cpu_kernels.KERNELS)
    assert BaseConv(8, 8, 3, kernels=chosen).fused is not None
