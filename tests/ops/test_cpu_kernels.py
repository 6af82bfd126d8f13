"""ops.cpu_kernels: building, caching and configuring msdet's compiled CPU kernel library."""

from __future__ import annotations

import logging
import os

import pytest

from msdet.ops import cpu_kernels
from msdet.ops.cpu_kernels import build_kernel_library, set_kernel_threads


@pytest.mark.slow
def test_build_is_cached_and_keyed_by_cpu(tmp_path, monkeypatch):
    first = build_kernel_library(str(tmp_path))
    if first is None:
        pytest.skip("no C++ compiler on this machine")
    built_at = os.path.getmtime(first)
    assert build_kernel_library(str(tmp_path)) == first
    assert os.path.getmtime(first) == built_at  # not rebuilt
    # Another CPU must not load code compiled with -march=native for this one.
    monkeypatch.setattr(cpu_kernels, "_cpu_signature", lambda: "model name : another CPU")
    other = build_kernel_library(str(tmp_path))
    assert other is not None and other != first
    assert sorted(os.listdir(tmp_path)) == sorted(
        [os.path.basename(first), os.path.basename(other)]
    )


def test_missing_compiler_falls_back_with_one_log_line(tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("CXX", str(tmp_path / "no-such-compiler"))
    with caplog.at_level(logging.INFO, logger="msdet.ops.cpu_kernels"):
        assert build_kernel_library(str(tmp_path)) is None
    lines = [r.getMessage() for r in caplog.records if r.name == "msdet.ops.cpu_kernels"]
    assert len(lines) == 1 and "no C++ compiler" in lines[0] and "MindSpore" in lines[0]
    assert os.listdir(tmp_path) == []


def test_broken_compiler_falls_back(tmp_path, monkeypatch, caplog):
    fake = tmp_path / "cxx"
    fake.write_text(
        '#!/bin/sh\nif [ "$1" = --version ]; then echo fake 1.0; exit 0; fi\necho boom >&2; exit 1\n'
    )
    fake.chmod(0o755)
    monkeypatch.setenv("CXX", str(fake))
    cache = tmp_path / "cache"
    with caplog.at_level(logging.INFO, logger="msdet.ops.cpu_kernels"):
        assert build_kernel_library(str(cache)) is None
    assert any("boom" in r.getMessage() for r in caplog.records)
    assert os.listdir(cache) == []  # no half-written library left behind


def test_extra_flags_reach_the_compiler_and_the_cache_key(tmp_path, monkeypatch):
    """$MSDET_KERNEL_FLAGS is appended to the flags, split as a shell splits it, and builds
    another library than the flags without it (an AVX2 build never replaces the native)."""
    calls = tmp_path / "calls"
    fake = tmp_path / "cxx"
    fake.write_text(
        "#!/bin/sh\n"
        'if [ "$1" = --version ]; then echo fake 1.0; exit 0; fi\n'
        f'for a in "$@"; do echo "$a" >> {calls}; done; echo --- >> {calls}\n'
        'while [ $# -gt 0 ]; do if [ "$1" = -o ]; then echo lib > "$2"; fi; shift; done\n'
    )
    fake.chmod(0o755)
    monkeypatch.setenv("CXX", str(fake))
    cache = str(tmp_path / "cache")
    monkeypatch.delenv(cpu_kernels.FLAGS_VAR, raising=False)
    plain = build_kernel_library(cache)
    monkeypatch.setenv(cpu_kernels.FLAGS_VAR, "-mno-avx512f -DNOTE='two words'")
    extra = build_kernel_library(cache)
    assert plain is not None and extra is not None and extra != plain
    first, second = calls.read_text().split("---\n")[:2]
    assert "-mno-avx512f" not in first.splitlines()
    args = second.splitlines()
    assert args[: len(cpu_kernels.CXX_FLAGS)] == list(cpu_kernels.CXX_FLAGS)
    assert args[len(cpu_kernels.CXX_FLAGS) : len(cpu_kernels.CXX_FLAGS) + 2] == [
        "-mno-avx512f",
        "-DNOTE=two words",
    ]
    assert build_kernel_library(cache) == extra  # cached under its own key


def test_unwritable_cache_falls_back(tmp_path, caplog):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    with caplog.at_level(logging.INFO, logger="msdet.ops.cpu_kernels"):
        assert build_kernel_library(str(blocker / "kernels")) is None
    assert any("using MindSpore's" in r.getMessage() for r in caplog.records)


def test_the_library_holds_every_kernel_and_takes_a_thread_count(library):
    import ctypes

    lib = ctypes.CDLL(library)
    for name in (
        "DepthwiseConvForwardS1",
        "DepthwiseConvGradWeightS2",
        "BatchNormSiluForward",
        "BatchNormSiluGrad",
        "BatchNormSiluInfer",
        "SppPoolForward",
        "SppPoolGrad",
        "SwapLastAxes",
        "FlatSGD",
    ):
        assert hasattr(lib, name), name
    try:
        assert set_kernel_threads(library, 3) == 3
        assert set_kernel_threads(library, 0) == 1  # at least one
    finally:
        set_kernel_threads(library, 1)


@pytest.mark.slow
def test_the_cache_key_covers_every_source(tmp_path, monkeypatch):
    first = build_kernel_library(str(tmp_path))
    if first is None:
        pytest.skip("no C++ compiler on this machine")
    original = cpu_kernels.SOURCES[0]
    edited = tmp_path / os.path.basename(original)
    with open(original, encoding="utf-8") as f:
        edited.write_text(f.read() + "\n// edited\n")
    monkeypatch.setattr(cpu_kernels, "SOURCES", (str(edited), *cpu_kernels.SOURCES[1:]))
    # the same set with one file changed is another library (built from the edited file)
    assert build_kernel_library(str(tmp_path)) not in (None, first)


def test_a_kernel_choice_is_checked_and_ordered(library):
    chosen = cpu_kernels.CpuKernels(library, ("nms", "upsample"))
    assert chosen.names == ("upsample", "nms")  # KERNELS' order
    assert chosen.library_for("nms") == library and chosen.library_for("sgd") is None
    assert chosen.only("sgd") == cpu_kernels.CpuKernels(library, ("sgd",))
    assert chosen.only() == cpu_kernels.NATIVE and cpu_kernels.NATIVE.library_for("sgd") is None
    assert cpu_kernels.CpuKernels.all(library).names == cpu_kernels.KERNELS
    assert cpu_kernels.CpuKernels.all(None) == cpu_kernels.NATIVE
    with pytest.raises(ValueError, match="unknown msdet kernel"):
        chosen.library_for("fast")
