"""Depthwise convolution on CPU as a compiled custom operator (forward and backward).

MindSpore 2.10's CPU ``Conv2D(group=C)`` computes a depthwise convolution through im2col +
GEMM, ~7x slower (forward + backward) than a direct loop; YOLOX-nano is built from them.
``kernels/depthwise_conv.cc`` holds direct loops for the forward pass and both gradients.
It is compiled once with the system C++ compiler and optimisation flags (MindSpore would
compile a ``.cc`` itself, but without any) into a cache folder outside the source tree,
keyed by the source, the compiler, the flags and the CPU, so a cache shared between
machines never hands one CPU's ``-march=native`` code to another.

The switch is process-wide and set by the device module (``engine.runtime``): on CPU it
calls :func:`enable_custom_kernel`; models ask :func:`custom_kernel_library` when they are
built and fall back to ``nn.Conv2d`` when it is None (GPU, Ascend, no compiler, export).
Importing this module loads MindSpore: the device module imports it only after it has
prepared the process environment.
"""

from __future__ import annotations

import hashlib
import logging
import os
import platform
import shutil
import subprocess
import tempfile

from mindspore import Parameter, nn, ops
from mindspore.common.initializer import initializer

log = logging.getLogger(__name__)

SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "kernels", "depthwise_conv.cc")
COMPILER_VAR = "CXX"  # the compiler used: $CXX, else g++
CACHE_VAR = "MSDET_CACHE_DIR"
# -march=native: the kernels' inner loops are vectorised for this CPU (the cache key holds
# the CPU, see _cpu_signature); -fopenmp-simd: the `omp simd` loop hints without an OpenMP
# thread team (see the source for why the kernels stay on MindSpore's calling thread).
CXX_FLAGS = ("-O3", "-march=native", "-fopenmp-simd", "-std=c++17", "-shared", "-fPIC")
STRIDES = (1, 2)

_library: str | None = None


def custom_kernel_library() -> str | None:
    """The compiled kernel library models should use, or None for MindSpore's Conv2D."""
    return _library


def set_custom_kernel_library(path: str | None) -> None:
    """Set (a path) or clear (None) the kernel library used by models built from now on."""
    global _library
    if path is not None and not os.path.isfile(path):
        raise FileNotFoundError(f"depthwise kernel library {path} does not exist")
    _library = path


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


def build_kernel_library(cache_dir: str | None = None) -> str | None:
    """Compile the depthwise kernels (once per source/compiler/flags/CPU) and return the .so.

    Returns None, with one log line saying why, when there is no working compiler or the
    build fails; callers then keep MindSpore's own Conv2D.
    """
    compiler = os.environ.get(COMPILER_VAR) or "g++"
    version = _compiler_version(compiler) if shutil.which(compiler) else None
    if version is None:
        log.info("no C++ compiler (%s): depthwise convolutions use MindSpore's Conv2D", compiler)
        return None
    with open(SOURCE, "rb") as f:
        source = f.read()
    key = hashlib.sha256()
    for part in (source, version.encode(), " ".join(CXX_FLAGS).encode(), _cpu_signature().encode()):
        key.update(part)
        key.update(b"\0")
    cache_dir = cache_dir or default_cache_dir()
    lib = os.path.join(cache_dir, f"depthwise_conv-{key.hexdigest()[:16]}.so")
    if os.path.isfile(lib):
        return lib
    tmp = ""
    try:
        os.makedirs(cache_dir, exist_ok=True)
        # Build under a unique name and rename: concurrent ranks never load a half-written
        # file.
        fd, tmp = tempfile.mkstemp(suffix=".so", dir=cache_dir)
        os.close(fd)
        cmd = [compiler, *CXX_FLAGS, SOURCE, "-o", tmp]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        if done.returncode != 0:
            last = (done.stderr.strip().splitlines() or ["?"])[-1]
            log.warning("building the depthwise kernel failed (%s): using MindSpore's Conv2D", last)
            return None
        os.replace(tmp, lib)
    except (OSError, subprocess.TimeoutExpired) as err:
        log.warning("building the depthwise kernel failed (%s): using MindSpore's Conv2D", err)
        return None
    finally:
        if tmp and os.path.exists(tmp):
            os.remove(tmp)
    log.info("built the depthwise convolution kernel: %s", lib)
    return lib


def enable_custom_kernel(cache_dir: str | None = None) -> str | None:
    """Build (or find cached) the kernel library and make models use it; returns its path."""
    lib = build_kernel_library(cache_dir)
    set_custom_kernel_library(lib)
    return lib


def _conv_out(size: int, k: int, stride: int) -> int:
    pad = (k - 1) // 2
    return (size + 2 * pad - k) // stride + 1


def depthwise_ops(library: str, stride: int):
    """The forward Custom operator for ``stride``, with its backward attached (bprop)."""
    if stride not in STRIDES:
        raise ValueError(f"custom depthwise kernel supports strides {STRIDES}, got {stride}")

    def fwd_shape(x, w):
        return (x[0], x[1], _conv_out(x[2], w[2], stride), _conv_out(x[3], w[2], stride))

    def same_as_first(first, *_):
        return first

    def weight_shape(_x, _dy, w):
        return w

    grad_input = ops.Custom(
        f"{library}:DepthwiseConvGradInputS{stride}",
        out_shape=same_as_first,
        out_dtype=same_as_first,
        func_type="aot",
    )
    grad_weight = ops.Custom(
        f"{library}:DepthwiseConvGradWeightS{stride}",
        out_shape=weight_shape,
        out_dtype=same_as_first,
        func_type="aot",
    )

    def bprop(x, w, out, dout):
        return grad_input(x, dout, w), grad_weight(x, dout, w)

    return ops.Custom(
        f"{library}:DepthwiseConvForwardS{stride}",
        out_shape=fwd_shape,
        out_dtype=same_as_first,
        func_type="aot",
        bprop=bprop,
    )


class DepthwiseConv2d(nn.Cell):
    """A depthwise ``k x k`` convolution (padding ``(k - 1) // 2``, no bias) on the kernel.

    Holds one parameter, ``weight`` of shape ``[channels, 1, k, k]``, named and shaped like
    ``nn.Conv2d(group=channels)``'s, so checkpoints and converted weights are interchangeable.
    """

    def __init__(self, channels: int, ksize: int, stride: int, weight_init, library: str):
        super().__init__()
        if ksize % 2 != 1:
            raise ValueError(f"custom depthwise kernel needs an odd kernel size, got {ksize}")
        self.in_channels = self.out_channels = self.group = channels
        self.kernel_size = (ksize, ksize)
        self.stride = (stride, stride)
        self.weight = Parameter(
            initializer(weight_init, [channels, 1, ksize, ksize]), name="weight"
        )
        self.conv = depthwise_ops(library, stride)

    def construct(self, x):
        return self.conv(x, self.weight)
