"""The one place that knows about devices: CPU, GPU, Ascend, modes and distribution.

Everything else asks the :class:`Runtime` returned by :func:`setup_runtime`. This module
must not import MindSpore at import time: the oneDNN ISA setting has to reach the process
environment *before* MindSpore loads its CPU kernels (see :func:`configure_process_env`).
"""

from __future__ import annotations

import glob
import logging
import os
import shutil
from dataclasses import dataclass
from typing import Any

from ops.cpu_kernels import user_cache_dir

log = logging.getLogger(__name__)

DEVICES = ("auto", "CPU", "GPU", "Ascend")
MODES = ("graph", "pynative")
AMP_LEVELS = ("auto", "O0", "O1", "O2", "O3")
CPU_KERNELS = ("auto", "msdet", "native")

# On AVX-512 AMD CPUs MindSpore's oneDNN picks a reference convolution kernel that is
# 25-80x slower than its AVX2 JIT kernel; capping the ISA at AVX2 gives identical results.
ONEDNN_ISA_VAR = "ONEDNN_MAX_CPU_ISA"
ONEDNN_ISA_VALUE = "AVX2"
# ops.cpu_kernels' thread team sleeps between kernels (read by libgomp when it loads).
WAIT_POLICY_VAR, WAIT_POLICY = "OMP_WAIT_POLICY", "PASSIVE"

ASCEND_DEVICE_FILES = ("/dev/davinci_manager", "/dev/davinci0")

# MindSpore's persistent compile cache (runtime.compile_cache): it names graphs by compile
# order and checks only the Python sources they came from, so msdet gives every graph-
# relevant configuration its own folder. These keys change no compiled graph: a resumed
# run, or one with another time limit or data folder, finds the first run's graphs.
COMPILE_CACHE_VARS = ("MS_COMPILER_CACHE_ENABLE", "MS_COMPILER_CACHE_PATH")
# Graph kernel fusion (runtime.fusion): MindSpore fuses element-wise chains at jit_level O1
# (AKG-generated kernels on CPU, DVM on Ascend). "safe" leaves Log, Exp and Sqrt out of the
# clusters: AKG's versions of them moved the first loss by ~1e-5 relative, which SimOTA's
# discrete assignment turns into different losses a few steps later; without them the
# losses equal the unfused graph's within float32 rounding (BENCHMARKS.md, "Kernel fusion").
FUSION_FLAGS = {
    "off": None,
    "safe": "--opt_level=1 --disable_cluster_ops=Log,Exp,Sqrt",
    "all": "--opt_level=1",
}
GRAPH_KERNEL_FLAGS_VAR = "MS_DEV_GRAPH_KERNEL_FLAGS"
GRAPH_NEUTRAL_KEYS = (
    "train.resume",
    "train.time_limit_min",
    "train.stop_at_epoch",
    "train.tensorboard",
    "data.root",
    "data.cache_dir",
    "data.num_workers",
    "data.python_multiprocessing",
    "runtime.compile_cache",
    "runtime.profile_steps",
    "runtime.save_graphs",
)

# Ascend operator precision. The Atlas training series defaults to force_fp16, which runs
# every operator that has an fp16 kernel in fp16, fp32 graphs and AMP black-listed layers
# included; must_keep_origin_dtype keeps each operator in the dtype the graph gives it, so
# that AMP (runtime.amp) alone decides what runs in fp16.
PRECISION_MODES = (
    "must_keep_origin_dtype",
    "force_fp16",
    "allow_fp32_to_fp16",
    "allow_mix_precision",
    "force_fp32",
    "allow_fp32_to_bf16",
    "allow_mix_precision_fp16",
    "allow_mix_precision_bf16",
)
DEFAULT_PRECISION_MODE = "must_keep_origin_dtype"
# MindSpore's names (mindspore/amp.py, nn/wrap/loss_scale.py) for the SoC features that
# decide how overflow is detected: the Atlas training series ("classic") reports it only in
# its float-status register; A2 does too in saturation mode (MS_ASCEND_CHECK_OVERFLOW_MODE).
SOC_CLASSIC_OVERFLOW = "amp_loss_scale_train_classic_target"
SOC_A2 = "train_hq_dtype_line"
OVERFLOW_MODE_VAR = "MS_ASCEND_CHECK_OVERFLOW_MODE"

# runtime.save_graphs=true: MindSpore's level 1 writes the IR after every compiler pass
# (a tiny nano run: 625 files, 2.5 GB; filtered as below: 32 entries, 164 MB). Unless
# MS_DEV_DUMP_IR_PASSES is already set, keep the stages worth reading: after type inference
# (every node's shape and dtype), the final front-end graph and the backend's kernel graph.
# runtime.save_graphs=2 or 3 dumps every pass.
IR_PASSES_VAR = "MS_DEV_DUMP_IR_PASSES"
IR_PASSES_VALUE = "type_inference,validate,graph_build"
# A failed graph compile writes MindSpore's analysis here, relative to the working
# directory whatever MS_DEV_SAVE_GRAPHS_PATH says (see collect_compile_failure).
ANALYZE_FAIL_GLOB = os.path.join("rank_*", "om", "analyze_fail.ir")


@dataclass(frozen=True)
class Runtime:
    """What the rest of msdet needs to know about where it runs."""

    device: str  # "CPU" | "GPU" | "Ascend"
    mode: str  # "graph" | "pynative"
    amp_level: str  # "O0" .. "O3", resolved from "auto"
    sink: bool  # dataset sink mode requested (real only on Ascend/GPU)
    sink_size: int
    loss_scale: float = 1.0  # initial (dynamic) or fixed loss scale when amp_level != O0
    rank: int = 0
    world_size: int = 1
    device_id: int = 0
    run_dir: str = "."
    sync_bn: bool = False  # BatchNorm statistics synced over ranks (Ascend, several ranks)
    float_status: bool = False  # overflow read from the device's float-status register
    precision_mode: str | None = None  # Ascend operator precision mode set at start-up
    cpu_kernels: str | None = None  # msdet's compiled CPU kernel library models use, or None
    kernel_names: tuple[str, ...] = ()  # the kernels models run on it (ops.cpu_kernels.KERNELS)

    @property
    def is_main(self) -> bool:
        """True on the process that writes logs, checkpoints and metrics."""
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1

    @property
    def sink_effective(self) -> bool:
        """Whether MindSpore will really sink data (it silently falls back on CPU)."""
        return self.sink and self.device != "CPU"

    @property
    def uses_dynamic_loss_scale(self) -> bool:
        """Dynamic loss scaling (overflowed steps skipped) whenever fp16 is in play.

        MindSpore's Model-level DynamicLossScaleManager is refused on CPU, but msdet's own
        training step (``ms.amp.all_finite`` + a skipped update) runs on every device, so
        the Ascend code path is the one exercised on CPU too.
        """
        return self.amp_level != "O0"


def ascend_present() -> bool:
    """Ascend NPU device files exist on this host (no MindSpore import needed)."""
    return any(os.path.exists(p) for p in ASCEND_DEVICE_FILES) or bool(
        glob.glob("/dev/davinci[0-9]*")
    )


def resolve_device(requested: str) -> str:
    """Turn ``runtime.device`` into a concrete target; ``auto`` prefers Ascend over CPU."""
    if requested not in DEVICES:
        raise ValueError(f"runtime.device must be one of {DEVICES}, got {requested!r}")
    if requested == "auto":
        return "Ascend" if ascend_present() else "CPU"
    return requested


def configure_process_env(
    device: str, save_graphs_dir: str | None = None, save_graphs_level: int = 1
) -> dict[str, str]:
    """Set environment variables that MindSpore reads when it loads.

    On CPU, cap oneDNN at AVX2 and make OpenMP threads sleep between msdet's kernels
    (``ops.cpu_kernels``; spinning threads would take the cores MindSpore's next operator
    needs), each unless the user already chose a value. With
    ``save_graphs_dir``, compiled graphs' IR is written there (``save_graphs_level`` 1:
    the stages in :data:`IR_PASSES_VALUE`; 2 or 3: every pass, 3 adds .dot files).
    Returns the variables this call set (for logging and tests).
    """
    changed: dict[str, str] = {}
    if device == "CPU":
        for key, value in ((ONEDNN_ISA_VAR, ONEDNN_ISA_VALUE), (WAIT_POLICY_VAR, WAIT_POLICY)):
            if key not in os.environ:
                os.environ[key] = changed[key] = value
    if save_graphs_dir:
        os.makedirs(save_graphs_dir, exist_ok=True)
        for key, value in (
            ("MS_DEV_SAVE_GRAPHS", str(int(save_graphs_level))),
            ("MS_DEV_SAVE_GRAPHS_PATH", save_graphs_dir),
        ):
            os.environ[key] = value
            changed[key] = value
        if int(save_graphs_level) == 1 and IR_PASSES_VAR not in os.environ:
            os.environ[IR_PASSES_VAR] = changed[IR_PASSES_VAR] = IR_PASSES_VALUE
    return changed


def collect_compile_failure(run_dir: str, since: float) -> str | None:
    """Move MindSpore's ``analyze_fail.ir`` written since ``since`` (a time.time()) from the
    working directory into ``run_dir``; returns its new path, or None when there is none."""
    fresh = [p for p in glob.glob(ANALYZE_FAIL_GLOB) if os.path.getmtime(p) >= since]
    if not fresh:
        return None
    dst = os.path.join(run_dir, "analyze_fail.ir")
    os.makedirs(run_dir, exist_ok=True)
    shutil.move(max(fresh, key=os.path.getmtime), dst)
    return dst


def resolve_amp(level: str, device: str) -> str:
    """``auto`` is O2 on Ascend/GPU and O0 on CPU, where fp16 kernels are 2-4x slower."""
    if level not in AMP_LEVELS:
        raise ValueError(f"runtime.amp must be one of {AMP_LEVELS}, got {level!r}")
    if level == "auto":
        return "O0" if device == "CPU" else "O2"
    return level


def resolve_sink(sink: Any, device: str) -> bool:
    """``auto`` sinks on Ascend only; an explicit bool is kept (CPU falls back silently)."""
    if sink == "auto":
        return device == "Ascend"
    return bool(sink)


def setup_runtime(
    cfg: Any,
    run_dir: str = ".",
    cpu_kernels: str | None = None,
    graph_key: str | None = None,
) -> Runtime:
    """Configure MindSpore from the ``runtime`` config group and return a :class:`Runtime`.

    ``cfg`` needs: device, mode, seed, amp, sink, sink_size, save_graphs, jit_level,
    threads, deterministic, distributed (optional: cpu_kernels, fusion, sync_bn,
    compile_cache).
    ``cpu_kernels`` overrides ``cfg.cpu_kernels`` (export.py: native operators only).
    ``graph_key`` (:func:`graph_key` of the whole config) turns on MindSpore's persistent
    compile cache when ``cfg.compile_cache`` is true. Call before building any network.
    """
    device = resolve_device(cfg.device)
    if cfg.mode not in MODES:
        raise ValueError(f"runtime.mode must be one of {MODES}, got {cfg.mode!r}")
    launcher_role = os.environ.get("MS_ROLE")
    if launcher_role and not cfg.distributed:
        # Under msrun every worker (and the scheduler) runs this script: without init()
        # each would train alone and all would write into the same run folder.
        raise ValueError(
            f"launched by msrun (MS_ROLE={launcher_role}) but runtime.distributed=false: "
            "use scripts/run_distributed_train.sh, which sets runtime.distributed=true"
        )
    graphs_level = int(cfg.save_graphs)  # true -> 1; 2 or 3 dump every compiler pass
    graphs_dir = os.path.join(run_dir, "graphs") if graphs_level else None
    changed = configure_process_env(device, graphs_dir, graphs_level)
    fusion = cfg.get("fusion", "off")
    fusion = "off" if fusion is False else str(fusion)  # YAML 1.1 reads a bare off as false
    jit_level, fusion_flags = fusion_settings(fusion, cfg.jit_level)
    if fusion_flags:
        _check_fusion_compiler(device)
        os.environ[GRAPH_KERNEL_FLAGS_VAR] = fusion_flags
        # AKG writes its kernels under MS_COMPILER_CACHE_PATH (default: the working folder)
        os.environ.setdefault(COMPILE_CACHE_VARS[1], user_cache_dir("fusion"))

    import mindspore as ms  # after the environment is prepared

    device_id = int(os.environ.get("DEVICE_ID", "0")) if device != "CPU" else 0
    ms.set_device(device, device_id)
    mode = ms.GRAPH_MODE if cfg.mode == "graph" else ms.PYNATIVE_MODE
    context: dict[str, Any] = {"mode": mode}
    if jit_level:
        context["jit_config"] = {"jit_level": jit_level}
    ms.set_context(**context)
    if cfg.deterministic:
        ms.set_deterministic(True)
    threads = cpu_threads(cfg.threads) if device == "CPU" else None
    if threads:
        ms.device_context.cpu.op_tuning.threads_num(threads)

    rank, world = 0, 1
    if cfg.distributed:
        rank, world = _init_distributed(ms, device)
    sync_bn = _resolve_sync_bn(bool(cfg.get("sync_bn", False)), device, world)
    precision = None
    if device == "Ascend":
        precision = check_precision_mode(str(cfg.get("precision_mode", DEFAULT_PRECISION_MODE)))
        ms.device_context.ascend.op_precision.precision_mode(precision)
    # Every rank gets the same seed: identical initial weights are what data parallelism
    # assumes; per-rank data order comes from sharding, not from the seed.
    ms.set_seed(int(cfg.seed))
    amp_level = resolve_amp(cfg.amp, device)
    cpu_kernels, kernel_names = setup_cpu_kernels(
        cpu_kernels or str(cfg.get("cpu_kernels", "auto")), device, amp_level, threads
    )

    rt = Runtime(
        device=device,
        mode=cfg.mode,
        amp_level=amp_level,
        sink=resolve_sink(cfg.sink, device),
        sink_size=int(cfg.sink_size),
        loss_scale=float(cfg.loss_scale),
        rank=rank,
        world_size=world,
        device_id=device_id,
        run_dir=run_dir,
        sync_bn=sync_bn,
        float_status=device == "Ascend" and _ascend_uses_float_status(),
        precision_mode=precision,
        cpu_kernels=cpu_kernels,
        kernel_names=kernel_names,
    )
    if cfg.get("compile_cache", False):
        if graph_key is None:
            raise ValueError("runtime.compile_cache is only available to train.py")
        folder = compile_cache_folder(
            user_cache_dir("graphs"), graph_key, device, _kernel_key(rt), ms.__version__
        )
        os.environ.update(dict(zip(COMPILE_CACHE_VARS, ("1", folder))))
        log.info("compile cache: graphs kept in %s", folder)
    if changed.get(ONEDNN_ISA_VAR):
        log.info("CPU: %s=%s set for fast oneDNN convolutions", ONEDNN_ISA_VAR, ONEDNN_ISA_VALUE)
    if fusion_flags:
        log.info("graph kernel fusion at jit_level O1 (runtime.fusion): %s", fusion_flags)
    return rt


def _kernel_key(rt: Runtime) -> str | None:
    """The kernel library and the kernels in use: both change the compiled graphs."""
    if rt.cpu_kernels is None:
        return None
    return f"{rt.cpu_kernels}:{','.join(rt.kernel_names)}"


def graph_key(cfg: Any) -> str:
    """The composed config as canonical JSON, without :data:`GRAPH_NEUTRAL_KEYS`: two runs
    with the same key compile the same graphs (given the same sources, which MindSpore's
    cache checks itself)."""
    import json

    from omegaconf import OmegaConf

    tree = OmegaConf.to_container(cfg, resolve=True)
    for dotted in GRAPH_NEUTRAL_KEYS:
        group, _, key = dotted.partition(".")
        if isinstance(tree.get(group), dict):
            tree[group].pop(key, None)
    return json.dumps(tree, sort_keys=True, default=str)


def compile_cache_folder(
    root: str, key: str, device: str, cpu_kernels: str | None, version: str
) -> str:
    """``root/<digest>``: one folder per graph key, device, msdet kernel library and
    MindSpore version (MindSpore adds ``rank_<n>/`` inside for each rank)."""
    import hashlib

    digest = hashlib.sha256(
        "\n".join((key, device, str(cpu_kernels), version)).encode()
    ).hexdigest()
    return os.path.join(root, digest[:16])


def cpu_threads(requested: Any) -> int | None:
    """CPU operator threads: ``runtime.threads`` when set (at most the cores this process
    may use), else, when several ranks share this host, an equal share of its cores (each
    rank would otherwise start a thread per core); None leaves MindSpore's default."""
    from data.config import available_cores, ranks_on_this_host

    cores = available_cores()
    if requested:
        if int(requested) > cores:
            log.info(
                "runtime.threads=%d: this process may use %d cores; using %d",
                int(requested),
                cores,
                cores,
            )
        return max(1, min(int(requested), cores))
    local = ranks_on_this_host(1)  # the launcher's count; 1 outside a launcher
    return max(1, cores // local) if local > 1 else None


def release_free_heap() -> bool:
    """Hand the C heap's free pages back to the operating system (glibc's ``malloc_trim``).

    Compiling a graph frees ~270 MiB of heap (YOLOX-nano training step, BENCHMARKS.md) that
    glibc keeps resident; MindSpore's memory pool then maps new memory for the step's
    tensors instead of reusing it. Called between a compile and the first run, it lowers the
    training peak by that much. Returns False where there is no glibc (nothing to do).
    """
    import ctypes
    import ctypes.util

    name = ctypes.util.find_library("c")
    try:
        trim = ctypes.CDLL(name).malloc_trim if name else None
    except (OSError, AttributeError):
        trim = None
    if trim is None:
        return False
    trim(ctypes.c_size_t(0))
    return True


def fusion_settings(choice: str, jit_level: Any) -> tuple[str | None, str | None]:
    """(jit_level, graph kernel flags) for ``runtime.fusion``; ``jit_level`` is the
    configured one (None: MindSpore's default). Fusion runs at O1 only."""
    if choice not in FUSION_FLAGS:
        raise ValueError(f"runtime.fusion must be one of {tuple(FUSION_FLAGS)}, got {choice!r}")
    flags = FUSION_FLAGS[choice]
    if flags is None:
        return (str(jit_level) if jit_level else None), None
    if jit_level and str(jit_level) != "O1":
        raise ValueError(
            f"runtime.fusion={choice} fuses at jit_level O1: set runtime.jit_level=O1 or null "
            f"(got {jit_level})"
        )
    return "O1", flags


def _check_fusion_compiler(device: str) -> None:
    """AKG, MindSpore's CPU fusion compiler, imports the ``decorator`` package."""
    if device != "CPU":
        return
    try:
        import decorator  # noqa: F401
    except ImportError as err:
        raise ValueError(
            "runtime.fusion on CPU needs the 'decorator' package (pip install -r "
            "requirements.txt); or set runtime.fusion=off"
        ) from err


def check_precision_mode(mode: str) -> str:
    """``runtime.precision_mode`` checked against the modes CANN knows."""
    if mode not in PRECISION_MODES:
        raise ValueError(f"runtime.precision_mode must be one of {PRECISION_MODES}, got {mode!r}")
    return mode


def float_status_register(classic_soc: bool, a2_soc: bool, overflow_mode: str | None) -> bool:
    """Whether overflow must be read from the float-status register (as MindSpore's own
    loss-scale cell decides): always on the Atlas training series, on A2 only in
    saturation mode; elsewhere inf/NaN reach the gradients and ``all_finite`` sees them."""
    return classic_soc or (a2_soc and overflow_mode == "SATURATION_MODE")


def _ascend_uses_float_status() -> bool:
    from mindspore._c_expression import MSContext

    ctx = MSContext.get_instance()
    return float_status_register(
        ctx.ascend_soc_supports_feature(SOC_CLASSIC_OVERFLOW),
        ctx.ascend_soc_supports_feature(SOC_A2),
        os.environ.get(OVERFLOW_MODE_VAR),
    )


def float_status_ops() -> tuple:
    """(clear, get) primitives of the Ascend float-status register, for
    ``engine.train_step.TrainStep(float_status=...)``; only where ``Runtime.float_status``."""
    from mindspore.ops.operations.math_ops import NPUClearFloatStatusV2, NPUGetFloatStatusV2

    return NPUClearFloatStatusV2(), NPUGetFloatStatusV2()


def setup_cpu_kernels(
    choice: str, device: str, amp_level: str = "O0", threads: int | None = None
) -> tuple[str | None, tuple[str, ...]]:
    """Make models run on msdet's compiled CPU kernels (``ops.cpu_kernels``: depthwise
    convolutions, BatchNorm + SiLU) where they are faster, on CPU in fp32.

    MindSpore's CPU backend runs both through slow paths (im2col + GEMM; seven element-wise
    operators and a slow BatchNormGrad), but whether msdet's direct loops win depends on the
    CPU (they lost on an AVX2-only AMD EPYC): ``auto`` uses the kernels that
    ``ops.kernel_choice`` measured to be faster on this CPU at ``threads`` threads (measured
    once, cached with the library), ``msdet`` uses both unmeasured (tests, benchmarks),
    ``native`` neither. GPU, Ascend, mixed precision (the kernels are float32) and a machine
    without a working compiler keep MindSpore's operators. Logs the decision in one line.
    Returns (the kernel library's path or None, the kernels models use).
    """
    if choice not in CPU_KERNELS:
        raise ValueError(f"runtime.cpu_kernels must be one of {CPU_KERNELS}, got {choice!r}")
    from data.config import available_cores
    from ops import cpu_kernels

    cpu_kernels.set_custom_kernel_library(None)
    if choice == "native" or device != "CPU" or amp_level != "O0":
        return None, ()
    threads = threads or available_cores()
    library = cpu_kernels.build_kernel_library()
    if library is None:
        return None, ()
    if choice == "msdet":
        kernels = cpu_kernels.KERNELS
        log.info("CPU kernels: depthwise convolutions and BatchNorm+SiLU on msdet's kernels")
    else:
        import mindspore as ms

        from ops import kernel_choice

        record = kernel_choice.decide(library, threads, ms.__version__)
        kernels = tuple(record["kernels"])
        log.info("%s", kernel_choice.describe(record))
    if not kernels:
        return None, ()
    cpu_kernels.enable(threads, kernels=kernels)
    return library, kernels


def _init_distributed(ms: Any, device: str) -> tuple[int, int]:
    """Initialise collectives (HCCL on Ascend, NCCL on GPU, mccl on CPU) for data parallel.

    Must run under a launcher (msrun, or a rank table on Ascend); MindSpore's own error
    is replaced by one that names the launch scripts. Ranks other than 0 stop writing the
    run folder's log file (their console output is the launcher's per-rank log).
    """
    from mindspore.communication import get_group_size, get_rank, init

    try:
        init()
    except RuntimeError as err:
        raise RuntimeError(
            "runtime.distributed=true needs a launcher: use "
            "scripts/run_distributed_train.sh NUM_CARDS (msrun) or set RANK_TABLE_FILE. "
            f"MindSpore said: {err}"
        ) from err
    rank, world = get_rank(), get_group_size()
    ms.reset_auto_parallel_context()
    ms.set_auto_parallel_context(
        parallel_mode=ms.ParallelMode.DATA_PARALLEL,
        gradients_mean=True,
        device_num=world,
    )
    if rank != 0:
        _close_file_logs()
    log.info("data parallel: rank %d of %d (pid %d, %s)", rank, world, os.getpid(), device)
    return rank, world


def _close_file_logs() -> None:
    """Detach the root logger's file handlers (Hydra's <run dir>/<job>.log): rank 0 owns it."""
    root = logging.getLogger()
    for handler in list(root.handlers):
        if isinstance(handler, logging.FileHandler):
            root.removeHandler(handler)
            handler.close()


def _resolve_sync_bn(requested: bool, device: str, world: int) -> bool:
    """SyncBatchNorm only where MindSpore has it (Ascend) and only when there are ranks."""
    if not requested:
        return False
    if device != "Ascend":
        log.warning("runtime.sync_bn is only supported on Ascend; using per-rank BatchNorm")
        return False
    if world < 2:
        log.info("runtime.sync_bn: a single rank has nothing to sync; using BatchNorm")
        return False
    return True


def convert_sync_batchnorm(network: Any) -> int:
    """Replace every ``nn.BatchNorm2d`` in ``network`` by an ``nn.SyncBatchNorm`` (all ranks).

    Keeps eps, momentum and the current values of gamma/beta/moving statistics, and the
    parameter names (checkpoints stay interchangeable with plain BatchNorm). Call after
    :func:`setup_runtime` initialised the ranks and before building the optimizer/EMA.
    Returns how many layers were replaced.
    """
    from mindspore import nn

    replaced = 0
    for _, cell in list(network.cells_and_names()):
        for child_name, child in list(cell.name_cells().items()):
            if type(child) is not nn.BatchNorm2d:
                continue
            sync = nn.SyncBatchNorm(
                child.num_features,
                eps=child.eps,
                momentum=1.0 - child.momentum,  # _BatchNorm stores 1 - momentum
                affine=child.gamma.requires_grad,
            )
            setattr(cell, child_name, sync)
            # Attaching a Cell names its parameters relative to the parent only ("bn.gamma"):
            # give them back the full names checkpoints and the optimizer groups rely on.
            for attr in ("gamma", "beta", "moving_mean", "moving_variance"):
                src, dst = getattr(child, attr), getattr(sync, attr)
                dst.set_data(src.data.copy())
                dst.name = src.name
            replaced += 1
    return replaced
