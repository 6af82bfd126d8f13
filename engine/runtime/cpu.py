"""The CPU side of where msdet runs: the process environment MindSpore reads when it loads
(oneDNN's instruction set, OpenMP's wait policy), operator threads, and msdet's compiled CPU
kernels (which of them pay off on this CPU: ``engine.runtime.kernel_choice``).

Nothing here imports MindSpore at import time: the environment has to be prepared *before*
MindSpore loads its CPU kernels (:func:`configure_process_env`).
"""

from __future__ import annotations

import logging
import os
from typing import Any

from msdet.ops.cpu_kernels import CpuKernels

log = logging.getLogger(__name__)

# On AVX-512 AMD CPUs MindSpore's oneDNN picks a reference convolution kernel that is
# 25-80x slower than its AVX2 JIT kernel; capping the ISA at AVX2 gives identical results.
ONEDNN_ISA_VAR = "ONEDNN_MAX_CPU_ISA"

ONEDNN_ISA_VALUE = "AVX2"

# ops.cpu_kernels' thread team sleeps between kernels (read by libgomp when it loads)...
WAIT_POLICY_VAR, WAIT_POLICY = "OMP_WAIT_POLICY", "PASSIVE"

# ...after a short spin (about 10 microseconds; libgomp's own default without a policy is
# 300,000 spins, ~3 ms): a barrier inside a kernel, or the next kernel right after, then
# finds the other thread awake instead of waking it through the kernel.
SPIN_COUNT_VAR, SPIN_COUNT = "GOMP_SPINCOUNT", "1000"

CPU_KERNELS = ("auto", "msdet", "native")


def configure_process_env(device: str) -> dict[str, str]:
    """Set the environment variables MindSpore reads when it loads, for ``device``.

    On CPU, cap oneDNN at AVX2 and make OpenMP threads sleep between msdet's kernels
    after a short spin (``ops.cpu_kernels``; threads spinning for long would take the cores
    MindSpore's next operator needs), each unless the user already chose a value (a user's
    ``OMP_WAIT_POLICY`` keeps libgomp's spin count for that policy). Returns the variables
    this call set (for logging and tests).
    """
    changed: dict[str, str] = {}
    if device == "CPU":
        wanted = [(ONEDNN_ISA_VAR, ONEDNN_ISA_VALUE)]
        if WAIT_POLICY_VAR not in os.environ:
            wanted += [(WAIT_POLICY_VAR, WAIT_POLICY), (SPIN_COUNT_VAR, SPIN_COUNT)]
        for key, value in wanted:
            if key not in os.environ:
                os.environ[key] = changed[key] = value
        if WAIT_POLICY_VAR in changed and openmp_loaded():
            log.warning(
                "OpenMP (libgomp) was loaded before msdet set %s=%s %s=%s, so it keeps its "
                "default spinning: msdet's CPU kernels' threads take the cores MindSpore "
                "needs (training steps up to 2x slower). Set both in the environment, or "
                "import MindSpore only after engine.runtime.process.setup_runtime",
                WAIT_POLICY_VAR,
                WAIT_POLICY,
                SPIN_COUNT_VAR,
                SPIN_COUNT,
            )
    return changed


def openmp_loaded(maps: str = "/proc/self/maps") -> bool:
    """Whether libgomp is already mapped into this process (Linux; False where ``maps``
    cannot be read). It reads ``OMP_WAIT_POLICY`` and ``GOMP_SPINCOUNT`` once, when it loads
    (MindSpore loads it), so :func:`configure_process_env` must come first."""
    try:
        with open(maps, encoding="utf-8") as f:
            return any("libgomp" in line for line in f)
    except OSError:
        return False


def cpu_threads(requested: Any) -> int | None:
    """CPU operator threads: ``runtime.threads`` when set (at most the cores this process
    may use), else, when several ranks share this host, an equal share of its cores (each
    rank would otherwise start a thread per core); None leaves MindSpore's default."""
    from msdet.common.host import available_cores, ranks_on_this_host

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


def setup_cpu_kernels(
    choice: str, device: str, amp_level: str = "O0", threads: int | None = None
) -> CpuKernels:
    """Which of msdet's compiled CPU kernels the builders use (``ops.cpu_kernels`` (``ops.cpu_kernels``: depthwise
    convolutions, BatchNorm + SiLU, the Focus stem, 1x1 convolutions, 2x upsampling, SPP's
    max-pools, the head's transpose, SimOTA's pairwise terms, class cost and matching, the
    loss's class term and its four terms, greedy NMS, SGD and the EMA over all parameters)
    where they are faster, on CPU in fp32.

    MindSpore's CPU backend runs these through slow paths (im2col + GEMM, for the stem
    after a convolution that picks the image's phases; oneDNN held to AVX2 for the 1x1s;
    seven element-wise operators and a slow BatchNormGrad; a slow Tile and a ReduceSum; a
    slow MaxPoolGrad; a Transpose that keeps an index per element; some forty small
    operators per pairwise term; a dozen element-wise operators and a slow ReduceSum over
    every anchor's classes for the class cost and the class loss; ~60 operators around the
    head's output for the loss's terms; an NMSWithMask over every candidate slot, valid or
    not; an SGD per parameter; a Reshape per parameter for the EMA),
    but whether msdet's direct loops win depends on the CPU (they lost on an AVX2-only AMD
    EPYC): ``auto`` uses the kernels that ``engine.runtime.kernel_choice`` measured to be faster on
    this CPU at ``threads`` threads (measured once, cached with the library), ``msdet``
    uses all unmeasured (tests, benchmarks), ``native`` none, and kernel names joined by
    ``+`` (``depthwise+upsample``) exactly those (ablations). GPU, Ascend, mixed precision
    (the kernels are float32) and a machine without a working compiler keep MindSpore's
    operators. Logs the decision in one line.
    """
    from msdet.common.host import available_cores
    from msdet.ops import cpu_kernels

    named = parse_cpu_kernels(choice)
    if named == () or device != "CPU" or amp_level != "O0":
        return cpu_kernels.NATIVE
    threads = threads or available_cores()
    library = cpu_kernels.build_kernel_library()
    if library is None:
        return cpu_kernels.NATIVE
    if named is not None:
        kernels = named
        log.info(
            "CPU kernels: %d of msdet's %d, as runtime.cpu_kernels names them",
            len(kernels),
            len(cpu_kernels.KERNELS),
        )
        log.debug("CPU kernels: %s on msdet's kernels", cpu_kernels.kernels_text(kernels))
    else:
        import mindspore as ms

        from msdet.engine.runtime import kernel_choice

        record = kernel_choice.decide(library, threads, ms.__version__)
        kernels = tuple(record["kernels"])
        log.info("%s", kernel_choice.headline(record))
        log.debug("%s", kernel_choice.describe(record))
    if not kernels:
        return cpu_kernels.NATIVE
    return cpu_kernels.enable(threads, kernels=kernels)


def parse_cpu_kernels(choice: str) -> tuple[str, ...] | None:
    """The kernels ``runtime.cpu_kernels=choice`` names (all of them for ``msdet``, none for
    ``native``, the listed ones for ``a+b``), or None for ``auto``; a clear error otherwise."""
    from msdet.ops.cpu_kernels import KERNELS

    choice = str(choice)
    if choice in CPU_KERNELS:
        return {"auto": None, "msdet": KERNELS, "native": ()}[choice]
    names = tuple(choice.split("+"))
    unknown = [name for name in names if name not in KERNELS]
    if unknown or len(set(names)) != len(names):
        raise ValueError(
            f"runtime.cpu_kernels must be one of {CPU_KERNELS} or kernel names joined by '+' "
            f"(each once, from {KERNELS}), got {choice!r}"
        )
    return tuple(name for name in KERNELS if name in names)
