"""msdet's compiled CPU operators: one library built from ``ops/kernels/*.cc``.

MindSpore 2.10's CPU backend leaves eleven spots of YOLOX slow or large (BENCHMARKS.md):
depthwise convolutions run through im2col + GEMM, conv -> BatchNorm -> SiLU runs as seven
element-wise operators plus a slow BatchNormGrad, the neck's 2x upsampling runs as a
slow ``Tile`` and a ``ReduceSum``, SPP's max-pools have a slow ``MaxPoolGrad``, the head's
``Transpose`` keeps an index per element, SimOTA's assignment runs as ~100 small operators
over [B, M, A], the loss's class term runs as a dozen element-wise operators and a slow
``ReduceSum`` over every anchor's classes, the loss's four terms together take ~60
operators around the head's output, ``NMSWithMask`` works on every candidate slot, valid
or not, SGD runs one operator per parameter, and the EMA reshapes every parameter into one
buffer. ``ops.depthwise``, ``ops.batchnorm_silu``, ``ops.upsample``, ``ops.spp_pool``,
``ops.transpose``, ``ops.assigner``, ``ops.bce``, ``ops.loss_terms``, ``ops.nms``,
``ops.sgd`` and ``ops.ema`` put them on ``ops.Custom(func_type="aot")`` operators whose
C++ lives in ``kernels/``. The library is compiled once with the system C++ compiler and
optimisation flags (MindSpore would compile a ``.cc`` itself, but without any) into a cache folder
outside the source tree, keyed by the sources, the compiler, the flags and the CPU, so a
cache shared between machines never hands one CPU's ``-march=native`` code to another.

The switch is process-wide and set by the device module (``engine.runtime``): on CPU it
calls :func:`enable` with the kernels to use (``runtime.cpu_kernels=auto``: those that
``ops.kernel_choice`` measured to be faster on this CPU); models ask
:func:`custom_kernel_library` for each kernel when they are built and keep MindSpore's
operator when it is None (GPU, Ascend, mixed precision, no compiler, export, a kernel that
lost on this CPU).
"""

from __future__ import annotations

import contextlib
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
from collections.abc import Iterator

log = logging.getLogger(__name__)

KERNEL_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "kernels")
SOURCES = tuple(sorted(glob.glob(os.path.join(KERNEL_DIR, "*.cc"))))
HEADERS = tuple(sorted(glob.glob(os.path.join(KERNEL_DIR, "*.h"))))
COMPILER_VAR = "CXX"  # the compiler used: $CXX, else g++
# Extra compiler flags, appended after CXX_FLAGS (and part of the cache key): for example
# "-mno-avx512f" builds for this CPU without AVX-512, as on an AVX2-only CPU of the same
# family (bench.compare_torch --isa avx2).
FLAGS_VAR = "MSDET_KERNEL_FLAGS"
CACHE_VAR = "MSDET_CACHE_DIR"
# -march=native: the inner loops are vectorised for this CPU (the cache key holds the CPU,
# see _cpu_signature); -fopenmp: outer loops split over a thread team (kernels/threads.h).
# -fno-trapping-math: without it GCC vectorises the sigmoid loops of batchnorm_silu.cc only
# where AVX-512 masks can hide the comparisons of exp's clamp (they might raise an FP
# exception); on AVX2 or SSE those loops stayed scalar, and BatchNorm + SiLU ran 2-2.7x
# slower than MindSpore's operators (BENCHMARKS.md). msdet reads no FP exception flags, and
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
# The default of a ``library`` argument (ops.assigner, ops.nms): ask
# :func:`custom_kernel_library`; an explicit path or None (MindSpore's operators) is what
# ops.kernel_choice passes to compare the two.
FROM_RUNTIME = "runtime"


def kernels_text(kernels: tuple[str, ...] | list[str]) -> str:
    """``kernels`` for a log line: "depthwise convolutions, BatchNorm+SiLU and 2x upsampling"
    ("" for none)."""
    names = [LABELS[k] for k in kernels]
    return " and ".join(filter(None, (", ".join(names[:-1]), *names[-1:])))


_library: str | None = None
_kernels: tuple[str, ...] = ()


def custom_kernel_library(kernel: str | None = None) -> str | None:
    """The compiled kernel library models should use for ``kernel`` (one of
    :data:`KERNELS`; None: for any of them), or None for MindSpore's operator."""
    if kernel is not None and kernel not in KERNELS:
        raise ValueError(f"unknown msdet kernel {kernel!r}; one of {KERNELS}")
    if kernel is not None and kernel not in _kernels:
        return None
    return _library


def enabled_kernels() -> tuple[str, ...]:
    """The kernels models built from now on run on msdet's library (empty: none)."""
    return _kernels if _library else ()


def set_custom_kernel_library(path: str | None, kernels: tuple[str, ...] = KERNELS) -> None:
    """Set (a path) or clear (None) the kernel library used by models built from now on,
    for ``kernels`` (default: all of them)."""
    global _library, _kernels
    if path is not None and not os.path.isfile(path):
        raise FileNotFoundError(f"msdet kernel library {path} does not exist")
    unknown = [k for k in kernels if k not in KERNELS]
    if unknown:
        raise ValueError(f"unknown msdet kernels {unknown}; choose from {KERNELS}")
    _library = path if kernels else None
    _kernels = tuple(k for k in KERNELS if k in kernels) if path else ()


@contextlib.contextmanager
def kernels_enabled(library: str | None, kernels: tuple[str, ...]) -> Iterator[None]:
    """Models built inside the block run ``kernels`` on ``library`` (none: MindSpore's
    operators); the setting before is restored after it (benchmarks, tests)."""
    previous = _library, _kernels
    set_custom_kernel_library(library, kernels)
    try:
        yield
    finally:
        set_custom_kernel_library(previous[0], previous[1])


def user_cache_dir(name: str) -> str:
    """``$MSDET_CACHE_DIR/<name>`` or ``~/.cache/msdet/<name>`` (``$XDG_CACHE_HOME``)."""
    if os.environ.get(CACHE_VAR):
        return os.path.join(os.path.abspath(os.environ[CACHE_VAR]), name)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "msdet", name)


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
) -> str | None:
    """Build (or find cached) the kernel library, set its thread count, and make models
    built from now on use it for ``kernels``; returns its path (None: no compiler,
    MindSpore's operators)."""
    lib = build_kernel_library(cache_dir)
    if lib is not None:
        set_kernel_threads(lib, threads)
    set_custom_kernel_library(lib, kernels)
    return lib
