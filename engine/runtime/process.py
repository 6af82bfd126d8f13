"""Set up the process for where it runs, and tell the rest of msdet about it.

:func:`setup_runtime` applies, in order, the decisions of ``engine.runtime.device`` (device, AMP,
sinking), ``cpu`` (process environment, threads, kernels), ``distributed`` (ranks) and
``ascend`` (chip profile, precision, overflow detection, jit level), and
the compile settings of ``engine.runtime.compiler`` (jit level, fusion, compile cache, IR dumps),
and returns a :class:`Runtime`: everything else asks it, never the hardware. Call it
before building any network. Importing this module does not import MindSpore.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from dataclasses import dataclass
from typing import Any

from msdet.common import logs
from msdet.engine.runtime import ascend, compiler, cpu, distributed
from msdet.engine.runtime import device as dev
from msdet.ops.cpu_kernels import NATIVE, CpuKernels

log = logging.getLogger(__name__)

MODES = ("graph", "pynative")
RANK_TABLE_VAR = "RANK_TABLE_FILE"


@dataclass(frozen=True)
class Runtime:
    """What the rest of msdet needs to know about where it runs."""

    device: str  # "CPU" | "GPU" | "Ascend"
    mode: str  # "graph" | "pynative": MindSpore's execution mode (PyNative under loop "jit")
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
    precision_mode: str | None = None  # Ascend precision mode set at start-up (None: MindSpore's)
    chip: str | None = None  # the Ascend chip (MindSpore's SoC name); None elsewhere
    cube_fp32: bool = False  # the Ascend chip's matrix unit computes float32 (A2 and later)
    host_nms: bool = False  # NMS on the host by the chip's profile (else ascend.nms_on_host)
    nms_max_boxes: int = ascend.NMS_MAX_BOXES  # candidates per NMSWithMask call, exact here
    # How graph-mode graphs compile here (Model.train's, evaluation's, export's): the global
    # jit level msdet set and the backend it gives (ascend.graph_backends). The jit training
    # loop gives its mindspore.jit graphs their own (engine.training.loops).
    graphs: ascend.Backend = ascend.Backend("O0", ascend.MS_BACKEND, "CPU")
    kernels: CpuKernels = NATIVE  # msdet's compiled CPU kernels the builders take
    chip_profile: ascend.ChipProfile | None = None  # what msdet does differently on this chip
    rank_table: bool = False  # launched from a rank table (Ascend): every graph at jit level O2

    @property
    def jit_level(self) -> str:
        """The global jit level in effect for graph-mode graphs."""
        return self.graphs.jit_level

    @property
    def backend(self) -> str:
        """How graph-mode graphs run here, in words (GE graph sink, kernel by kernel)."""
        return self.graphs.runs

    @property
    def is_main(self) -> bool:
        """True on the process that writes logs, checkpoints and metrics."""
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1

    @property
    def sink_effective(self) -> bool:
        """Whether MindSpore will really sink data (it silently falls back on CPU, and
        ``mindspore.data_sink``, the jit loop's, refuses CPU)."""
        return self.sink and self.device != "CPU"

    @property
    def uses_dynamic_loss_scale(self) -> bool:
        """Dynamic loss scaling (overflowed steps skipped) whenever fp16 is in play.

        MindSpore's Model-level DynamicLossScaleManager is refused on CPU, but msdet's own
        training step (a finite check on the gradients + a skipped update, see
        :attr:`finite_check`) runs on every device, so the Ascend code path is the one
        exercised on CPU too.
        """
        return self.amp_level != "O0"

    @property
    def finite_check(self) -> str:
        """How the training step checks its gradients for NaN/Inf (``TrainStep``): on
        Ascend ``ms.amp.all_finite``, one ``AllFinite`` operator over all gradients; on CPU
        and GPU, where that function runs four operators per gradient, one check over the
        gradients concatenated."""
        return "mindspore" if self.device == "Ascend" else "flat"


def setup_runtime(cfg: Any, run_dir: str = ".") -> Runtime:
    """Configure MindSpore from the ``runtime`` config group and return a :class:`Runtime`.

    ``cfg`` needs: device, mode, seed, amp, sink, sink_size, save_graphs, jit_level,
    threads, deterministic, distributed (optional: cpu_kernels, fusion, sync_bn,
    compile_cache, precision_mode).
    ``cfg.compile_cache`` is the trainer's to apply: its key needs the data's class count.
    What only a training run decides (its loop, with its execution mode, backends and the
    data-parallel context ``Model.train`` compiles under) is the run plan's and its loop's
    (``engine.training.plan``, ``engine.training.loops``): ranks are set up here without it.
    """
    device = dev.resolve_device(cfg.device)
    if cfg.mode not in MODES:
        raise ValueError(f"runtime.mode must be one of {MODES}, got {cfg.mode!r}")
    distributed.check_launcher(bool(cfg.distributed))
    changed = cpu.configure_process_env(device)
    graphs_level = int(cfg.save_graphs)  # true -> 1; 2 or 3 dump every compiler pass
    compiler.configure_graph_dumps(
        os.path.join(run_dir, "graphs") if graphs_level else None, graphs_level
    )
    fusion_level, fusion_flags = compiler.configure_fusion(cfg.fusion, cfg.jit_level, device)

    import mindspore as ms  # after the environment is prepared
    from mindspore import log as ms_log

    # MindSpore's Python-side warnings (deprecations, export notes) go to the log file; its
    # C++ side writes to the process's stderr itself (GLOG_v), out of logging's reach.
    # (_get_logger is private: the pinned MindSpore 2.10 has it.)
    logs.speak_through_msdet(ms_log._get_logger())

    card = dev.device_id(device)
    try:
        ms.set_device(device, card)
    except RuntimeError as err:
        # A second command in one process (a tool run from Python after training, the
        # tests) finds the runtime already started: on the same device it simply goes on.
        if "has been initialized" not in str(err) or ms.get_context("device_target") != device:
            raise
    chip = ascend.ascend_chip() if device == "Ascend" else None
    rank_table = chip is not None and bool(os.environ.get(RANK_TABLE_VAR))
    configured = cfg.jit_level or fusion_level
    graphs = ascend.graph_backends("model", chip, configured, rank_table)["eval"]
    context: dict[str, Any] = {"mode": ms.GRAPH_MODE if cfg.mode == "graph" else ms.PYNATIVE_MODE}
    if chip is not None or configured:  # on Ascend always: never a default that may move
        context["jit_config"] = {"jit_level": graphs.jit_level}
    ms.set_context(**context)
    if cfg.deterministic:
        ms.set_deterministic(True)
    threads = cpu.cpu_threads(cfg.threads) if device == "CPU" else None
    if threads:
        ms.device_context.cpu.op_tuning.threads_num(threads)

    rank, world = 0, 1
    if cfg.distributed:
        rank, world = distributed.init_distributed(ms, device, parallel_context=False)
    sync_bn = distributed.resolve_sync_bn(bool(cfg.sync_bn), device, world)
    precision = None
    if chip is not None:
        precision = ascend.resolve_precision_mode(cfg.precision_mode, chip)
        ascend.apply_precision_mode(ms, precision)
        log.info("%s", chip.describe())
        log.info("graphs in graph mode: %s (from %s)", graphs.describe(), graphs.why)
        log.info(
            "operator precision mode: %s",
            ascend.precision_mode_in_effect() or precision or "MindSpore's default for this chip",
        )
    # Every rank gets the same seed: identical initial weights are what data parallelism
    # assumes; per-rank data order comes from sharding, not from the seed.
    ms.set_seed(int(cfg.seed))
    amp_level = dev.resolve_amp(cfg.amp, device)
    kernels = cpu.setup_cpu_kernels(str(cfg.cpu_kernels), device, amp_level, threads)
    if cfg.mode == "pynative":  # op by op: the in-place kernels without graph signatures
        kernels = dataclasses.replace(kernels, eager=True)

    rt = Runtime(
        device=device,
        mode=cfg.mode,
        amp_level=amp_level,
        sink=dev.resolve_sink(cfg.sink, device),
        sink_size=int(cfg.sink_size),
        loss_scale=float(cfg.loss_scale),
        rank=rank,
        world_size=world,
        device_id=card,
        run_dir=run_dir,
        sync_bn=sync_bn,
        float_status=chip is not None and chip.float_status,
        precision_mode=precision,
        chip=chip.soc if chip else None,
        cube_fp32=chip is not None and chip.cube_fp32,
        host_nms=chip is not None and chip.host_nms,
        nms_max_boxes=chip.nms_max_boxes if chip else ascend.NMS_MAX_BOXES,
        graphs=graphs,
        kernels=kernels,
        chip_profile=chip,
        rank_table=rank_table,
    )
    if changed.get(cpu.ONEDNN_ISA_VAR):
        log.info(
            "CPU: %s=%s set for fast oneDNN convolutions", cpu.ONEDNN_ISA_VAR, cpu.ONEDNN_ISA_VALUE
        )
    if fusion_flags:
        log.info("graph kernel fusion at jit_level O1 (runtime.fusion): %s", fusion_flags)
    return rt
