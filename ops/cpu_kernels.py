"""msdet's compiled CPU operators: one library built from ``ops/kernels/*.cc``.

MindSpore 2.10's CPU backend runs thirteen parts of YOLOX through slow or memory-hungry
paths: depthwise and 1x1 convolutions, the Focus stem, BatchNorm + SiLU, the neck's 2x
upsampling, SPP's max-pools, the head's transpose, SimOTA's assignment, the loss's class
term and its four terms, NMS, SGD and the EMA. ``ops.depthwise``, ``ops.pointwise_conv``,
``ops.focus_conv``, ``ops.batchnorm_silu``, ``ops.upsample``, ``ops.spp_pool``,
``ops.transpose``, ``ops.assigner``, ``ops.bce``, ``ops.loss_terms``, ``ops.nms``,
``ops.sgd`` and ``ops.ema`` put them on ``ops.Custom(func_type="aot")`` operators
(``ops.aot``) whose C++ lives in ``kernels/``; each module's docstring says what
MindSpore's own path costs. The library is compiled once with the system C++ compiler and
optimisation flags (MindSpore would compile a ``.cc`` itself, but without any) into a
cache folder outside the source tree, keyed by the sources, the compiler, the flags and the
CPU, so a cache shared between machines never hands one CPU's ``-march=native`` code to
another.

Which kernels a network runs on is a value, :class:`CpuKernels`: the device module decides
it once per process (``runtime.cpu_kernels``; ``auto``: the kernels ``engine.runtime.kernel_choice``
measured to be faster on this CPU) and the builders take it as an argument. :data:`NATIVE`
(no kernels) is what GPU, Ascend, mixed precision, a machine without a compiler and an
exported model get.
"""

from __future__ import annotations

import ctypes
import functools
import glob
import hashlib
import logging
import os
import platform
import shlex
import shutil
import subprocess
import tempfile
from dataclasses import dataclass

from msdet.common.cache import CACHE_VAR, user_cache_dir  # noqa: F401  (re-exported: callers read them here)

log = logging.getLogger(__name__)

KERNEL_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "kernels")
SOURCES = tuple(sorted(glob.glob(os.path.join(KERNEL_DIR, "*.cc"))))
HEADERS = tuple(sorted(glob.glob(os.path.join(KERNEL_DIR, "*.h"))))
COMPILER_VAR = "CXX"  # the compiler used: $CXX, else g++
# Extra compiler flags, appended after CXX_FLAGS (and part of the cache key): for example
# "-mno-avx512f" builds for this CPU without AVX-512, as on an AVX2-only CPU of the same
# family (bench.compare_torch --isa avx2).
FLAGS_VAR = "MSDET_KERNEL_FLAGS"
# -march=native: the inner loops are vectorised for this CPU (the cache key holds the CPU,
# see _cpu_signature); -fopenmp: outer loops split over a thread team (kernels/threads.h).
# -fno-trapping-math: without it GCC vectorises the sigmoid loops of batchnorm_silu.cc only
# where AVX-512 masks can hide the comparisons of exp's clamp (they might raise an FP
# exception); on AVX2 or SSE those loops stayed scalar, and BatchNorm + SiLU ran 2-2.7x
# slower than MindSpore's operators. msdet reads no FP exception flags, and
# the flag changes no result (no reassociation, unlike -ffast-math).
# -fno-math-errno: sqrt() need not set errno, so the loops calling it vectorise (the
# SimOTA class cost's); it changes no result either.
CXX_FLAGS = (
    "-O3",
    "-march=native",
    "-fno-trapping-math",
    "-fno-math-errno",
    "-fopenmp",
    "-std=c++17",
    "-shared",
    "-fPIC",
)

# The operators the library provides, by the name models ask for, and what logs call them.
KERNELS = (
    "depthwise",
    "batchnorm_silu",
    "focus",
    "pointwise",
    "upsample",
    "spp",
    "transpose",
    "assigner",
    "class_bce",
    "loss_terms",
    "nms",
    "sgd",
    "ema",
)
LABELS = {
    "depthwise": "depthwise convolutions",
    "batchnorm_silu": "BatchNorm+SiLU",
    "focus": "the Focus stem",
    "pointwise": "1x1 convolutions",
    "upsample": "2x upsampling",
    "spp": "SPP's max-pools",
    "transpose": "the head's transpose",
    "assigner": "SimOTA's assignment",
    "class_bce": "the class loss",
    "loss_terms": "the loss's terms",
    "nms": "NMS",
    "sgd": "SGD",
    "ema": "the EMA",
}


def kernels_text(kernels: tuple[str, ...] | list[str]) -> str:
    """``kernels`` for a log line: "depthwise convolutions, BatchNorm+SiLU and 2x upsampling"
    ("" for none)."""
    names = [LABELS[k] for k in kernels]
    return " and ".join(filter(None, (", ".join(names[:-1]), *names[-1:])))


@dataclass(frozen=True)
class CpuKernels:
    """Which of msdet's compiled CPU kernels a network is built with: the library and the
    kernels taken from it. The empty value, :data:`NATIVE`, builds MindSpore's operators.

    Decided once per process (``engine.runtime.cpu.setup_cpu_kernels``: what
    ``runtime.cpu_kernels`` asks for, measured on this CPU for ``auto``; held by the
    ``Runtime``) and passed to the builders (``build_model``, ``YOLOXLoss``,
    ``build_optimizer``, ``ModelEMA``, ``BatchedNMS``), each of which asks
    :meth:`library_for` for its own kernel.
    """

    library: str | None = None
    names: tuple[str, ...] = ()
    # The kernels that write their inputs in place run op by op in PyNative mode
    # (runtime.mode=pynative), not in graphs: ops.aot.in_place_op builds them without the
    # write signature. Graph mode and mindspore.jit graphs (runtime.loop=jit) need it.
    eager: bool = False

    def __post_init__(self) -> None:
        unknown = [k for k in self.names if k not in KERNELS]
        if unknown:
            raise ValueError(f"unknown msdet kernels {unknown}; choose from {KERNELS}")
        if self.library is None and self.names:
            raise ValueError(f"the kernels {list(self.names)} need a kernel library")
        if self.library is not None and not os.path.isfile(self.library):
            raise FileNotFoundError(f"msdet kernel library {self.library} does not exist")
        # One order whatever the caller's: equal choices compare (and key caches) equal.
        object.__setattr__(self, "names", tuple(k for k in KERNELS if k in self.names))

    @classmethod
    def all(cls, library: str | None) -> CpuKernels:
        """Every kernel on ``library`` (``runtime.cpu_kernels=msdet``); NATIVE without one."""
        return cls(library, KERNELS) if library else NATIVE

    def library_for(self, kernel: str) -> str | None:
        """The library a builder takes ``kernel`` (one of :data:`KERNELS`) from, or None for
        MindSpore's operator."""
        if kernel not in KERNELS:
            raise ValueError(f"unknown msdet kernel {kernel!r}; one of {KERNELS}")
        return self.library if kernel in self.names else None

    def only(self, *kernels: str) -> CpuKernels:
        """The same library with exactly ``kernels`` (tests and benchmarks compare them)."""
        return CpuKernels(self.library, kernels, self.eager) if kernels and self.library else NATIVE

    @property
    def key(self) -> str | None:
        """The library and the kernels in use, as a cache key (both change the compiled
        graphs); None for MindSpore's operators."""
        return f"{self.library}:{','.join(self.names)}" if self.names else None

    def __bool__(self) -> bool:
        return bool(self.names)


NATIVE = CpuKernels()


def default_cache_dir() -> str:
    """Where compiled kernels are kept: :func:`user_cache_dir` ``("kernels")``."""
    return user_cache_dir("kernels")


def _cpu_signature() -> str:
    """The CPU model and its feature flags: what ``-march=native`` compiles for."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError:
        return platform.processor() or platform.machine()
    keep = [ln for ln in lines if ln.split(":")[0].strip() in ("model name", "flags")]
    return "\n".join(sorted(set(keep)))


def _compiler_version(compiler: str) -> str | None:
    try:
        done = subprocess.run([compiler, "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 else None


def compiler_flags() -> tuple[str, ...]:
    """CXX_FLAGS followed by those in ``$MSDET_KERNEL_FLAGS`` (split as a shell would)."""
    return CXX_FLAGS + tuple(shlex.split(os.environ.get(FLAGS_VAR, "")))


def compiler() -> tuple[str, str | None]:
    """The C++ compiler used (``$CXX``, else g++) and its ``--version`` text, None when it
    does not run."""
    name = os.environ.get(COMPILER_VAR) or "g++"
    return name, _compiler_version(name) if shutil.which(name) else None


def library_path(cache_dir: str | None = None, version: str | None = None) -> str | None:
    """Where the library for these sources, compiler (``version``: its ``--version`` text,
    asked for when None), flags and CPU is kept, built or not; None without a compiler."""
    if version is None:
        version = compiler()[1]
        if version is None:
            return None
    key = hashlib.sha256()
    for path in SOURCES + HEADERS:
        with open(path, "rb") as f:
            key.update(os.path.basename(path).encode() + b"\0" + f.read() + b"\0")
    for part in (version, " ".join(compiler_flags()), _cpu_signature()):
        key.update(part.encode() + b"\0")
    cache_dir = cache_dir or default_cache_dir()
    return os.path.join(cache_dir, f"msdet_kernels-{key.hexdigest()[:16]}.so")


def build_kernel_library(cache_dir: str | None = None) -> str | None:
    """Compile the kernels (once per sources/compiler/flags/CPU) and return the .so.

    Returns None, with one log line saying why, when there is no working compiler or the
    build fails; callers then keep MindSpore's own operators.
    """
    cxx, version = compiler()
    if version is None:
        log.info("no C++ compiler (%s): MindSpore's own CPU operators are used", cxx)
        return None
    lib = library_path(cache_dir, version)
    if os.path.isfile(lib):
        return lib
    cache_dir = os.path.dirname(lib)
    flags = compiler_flags()
    tmp = ""
    try:
        os.makedirs(cache_dir, exist_ok=True)
        # Build under a unique name and rename: concurrent ranks never load a half-written
        # file.
        fd, tmp = tempfile.mkstemp(suffix=".so", dir=cache_dir)
        os.close(fd)
        cmd = [cxx, *flags, "-I", KERNEL_DIR, *SOURCES, "-o", tmp]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        if done.returncode != 0:
            last = (done.stderr.strip().splitlines() or ["?"])[-1]
            log.warning("building msdet's CPU kernels failed (%s): using MindSpore's", last)
            return None
        os.replace(tmp, lib)
    except (OSError, subprocess.TimeoutExpired) as err:
        log.warning("building msdet's CPU kernels failed (%s): using MindSpore's", err)
        return None
    finally:
        if tmp and os.path.exists(tmp):
            os.remove(tmp)
    log.info("built msdet's CPU kernels: %s", lib)
    return lib


@functools.cache
def _handle(library: str) -> ctypes.CDLL:
    """``library`` opened once in this process (the dynamic loader shares it with MindSpore's
    own load of the same file)."""
    return ctypes.CDLL(library)


def set_kernel_threads(library: str, threads: int) -> int:
    """Threads the kernels in ``library`` split their loops over (this process); returns the
    count in force. MindSpore loads the same file, so both see one copy of the setting."""
    lib = _handle(library)
    lib.MsdetSetThreads(ctypes.c_int(max(1, int(threads))))
    return int(lib.MsdetThreads())


def set_depthwise_general(library: str, general: bool) -> None:
    """Make stride-1 3x3 depthwise convolutions in ``library`` take the general loops that
    every other case takes (True) or their fast path (False, the default): the two give the
    same bits, so this is for tests and benchmarks that compare them (this process)."""
    _handle(library).MsdetDepthwiseGeneral(ctypes.c_int(int(general)))


def enable(
    threads: int = 1, cache_dir: str | None = None, kernels: tuple[str, ...] = KERNELS
) -> CpuKernels:
    """Build (or find cached) the kernel library and set its thread count; returns
    ``kernels`` on it (NATIVE when there is no compiler: MindSpore's operators)."""
    lib = build_kernel_library(cache_dir)
    if lib is None:
        return NATIVE
    set_kernel_threads(lib, threads)
    return CpuKernels(lib, kernels)
