"""Environment check: ``python -m engine.doctor``.

Prints the MindSpore version, the device targets usable here, the Ascend driver and CANN
versions when present, numpy/OpenCV versions, whether the CPU oneDNN fix is active, msdet's
compiled CPU kernels (the compiler, whether the library for this CPU is built, which kernels
``runtime.cpu_kernels=auto`` measured to be faster here), and a verdict with what to fix.
The version matrix (MindSpore x CANN x driver) is the first wall Ascend users hit; this
shows where a machine stands.
"""

from __future__ import annotations

import glob
import importlib.metadata as md
import os
import platform
import re
import sys
from dataclasses import dataclass, field

from msdet.engine.runtime.device import (
    ONEDNN_ISA_VALUE,
    ONEDNN_ISA_VAR,
    ascend_present,
    configure_process_env,
)

REQUIRED_MINDSPORE = "2.10.0"
# MindSpore -> (CANN, Ascend driver/firmware), as published with MindSpore Transformers'
# installation guides (mindspore.cn/mindformers). Versions not listed: see mindspore.cn/install.
KNOWN_MATRIX = {
    "2.9.0": ("9.0.0", "26.0.RC1"),
    "2.7.2": ("8.5.0", "25.5.0"),
    "2.7.1": ("8.3.RC1", "25.3.RC1"),
    "2.7.0": ("8.2.RC1", "25.2.0"),
    "2.6.0": ("8.1.RC1", "25.0.RC1"),
    "2.4.10": ("8.0.0", "24.1.0"),
}
ASCEND_ROOT = os.environ.get("ASCEND_HOME_PATH", "/usr/local/Ascend")


@dataclass
class Report:
    """Facts found and problems to fix."""

    facts: list[tuple[str, str]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def fact(self, key: str, value: str) -> None:
        self.facts.append((key, value))


def package_version(name: str) -> str | None:
    try:
        return md.version(name)
    except md.PackageNotFoundError:
        return None


def read_version_file(pattern: str) -> str | None:
    """First ``version=...`` value in the first file matching ``pattern``."""
    for path in sorted(glob.glob(pattern)):
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                for line in f:
                    m = re.match(r"\s*(?:Version|version|package_version)\s*=\s*(\S+)", line)
                    if m:
                        return m.group(1).strip("\"'")
        except OSError:
            continue
    return None


def check_python_packages(report: Report) -> None:
    report.fact("python", f"{platform.python_version()} ({sys.executable})")
    np_v = package_version("numpy")
    report.fact("numpy", np_v or "missing")
    if np_v is None:
        report.problems.append("numpy is not installed: pip install -r requirements.txt")
    elif int(np_v.split(".")[0]) >= 2:
        report.problems.append(
            f"numpy {np_v}: MindSpore 2.10 is built against NumPy 1.x (PyNative mode and some "
            "losses crash). pip install 'numpy<2' 'opencv-python-headless<4.12'"
        )
    cv_v = package_version("opencv-python-headless") or package_version("opencv-python")
    report.fact("opencv", cv_v or "missing")
    if cv_v is None:
        report.problems.append("OpenCV is missing: pip install 'opencv-python-headless<4.12'")
    for name in ("pycocotools", "hydra-core", "tensorboardX"):
        version = package_version(name)
        report.fact(name, version or "missing")
        if version is None:
            report.problems.append(f"{name} is missing: pip install -r requirements.txt")


def check_mindspore(report: Report) -> list[str]:
    """MindSpore version and usable device targets (CPU checked by running an op)."""
    ms_v = package_version("mindspore")
    report.fact("mindspore", ms_v or "missing")
    if ms_v is None:
        report.problems.append(f"MindSpore is missing: pip install mindspore=={REQUIRED_MINDSPORE}")
        return []
    if ms_v != REQUIRED_MINDSPORE:
        report.problems.append(
            f"msdet is tested with mindspore=={REQUIRED_MINDSPORE}, found {ms_v}"
        )
    configure_process_env("CPU")
    usable = []
    try:
        import mindspore as ms
        import numpy as np

        value = (ms.Tensor(np.ones(3, np.float32)) * 2).sum().asnumpy()
        if float(value) == 6.0:
            usable.append("CPU")
    except Exception as err:  # the point is to report whatever breaks
        report.problems.append(f"MindSpore fails on CPU: {type(err).__name__}: {err}")
        return usable
    present = {"Ascend": ascend_present(), "GPU": os.path.exists("/dev/nvidia0")}
    for target in ("Ascend", "GPU"):
        if not present[target]:
            continue  # asking MindSpore without the hardware only prints loader noise
        try:
            if ms.hal.is_available(target):
                usable.append(target)
            elif target == "Ascend":
                report.problems.append(
                    "Ascend devices exist but MindSpore cannot load its Ascend backend: "
                    "source the CANN environment (source <CANN>/set_env.sh) and check the matrix below"
                )
        except Exception as err:
            report.notes.append(f"{target} check failed: {err}")
    report.fact("devices usable", ", ".join(usable) or "none")
    return usable


def ascend_versions() -> dict[str, str | None]:
    """The Ascend driver and CANN toolkit versions installed under ``ASCEND_HOME_PATH``
    (None where not found)."""
    driver = read_version_file(os.path.join(ASCEND_ROOT, "driver", "version.info"))
    cann = read_version_file(
        os.path.join(ASCEND_ROOT, "ascend-toolkit", "latest", "*", "ascend_toolkit_install.info")
    ) or read_version_file(os.path.join(ASCEND_ROOT, "ascend-toolkit", "latest", "version.cfg"))
    return {"ascend_driver": driver, "cann": cann}


def check_ascend(report: Report, ms_version: str | None) -> None:
    if not ascend_present():
        report.fact("Ascend", "no NPU device files (/dev/davinci*)")
        return
    versions = ascend_versions()
    driver, cann = versions["ascend_driver"], versions["cann"]
    report.fact("Ascend driver", driver or "not found")
    report.fact("CANN", cann or "not found")
    if driver is None:
        report.problems.append(f"NPU present but no driver version under {ASCEND_ROOT}/driver")
    if cann is None:
        report.problems.append(f"no CANN toolkit under {ASCEND_ROOT}/ascend-toolkit")
    expected = KNOWN_MATRIX.get(ms_version or "")
    if expected is None:
        report.notes.append(
            f"no CANN/driver pairing recorded for MindSpore {ms_version}; check "
            "https://www.mindspore.cn/install for the matching CANN and driver"
        )
    elif cann and not cann.startswith(expected[0]):
        report.problems.append(f"MindSpore {ms_version} expects CANN {expected[0]} (found {cann})")


def check_cpu_speed(report: Report) -> None:
    isa = os.environ.get(ONEDNN_ISA_VAR)
    report.fact("oneDNN ISA cap", isa or "unset")
    flags = ""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            flags = next((line for line in f if line.startswith("flags")), "")
    except OSError:
        pass
    if "avx512" in flags and isa not in (ONEDNN_ISA_VALUE, "AVX2_VNNI"):
        report.notes.append(
            f"this CPU has AVX-512: without {ONEDNN_ISA_VAR}={ONEDNN_ISA_VALUE} MindSpore's "
            "3x3 convolutions take a reference kernel 25-80x slower (msdet sets it on CPU)"
        )


def check_cpu_kernels(report: Report, threads: int | None = None) -> None:
    """msdet's compiled CPU kernels on this machine: facts only (without them training runs
    on MindSpore's operators, slower but correct), nothing built or measured here."""
    from msdet.common.host import available_cores
    from msdet.ops import cpu_kernels, kernel_choice

    name, version = cpu_kernels.compiler()
    if version is None:
        report.fact("C++ compiler", f"none ({name})")
        report.notes.append(
            f"no C++ compiler ({name}): CPU training runs on MindSpore's operators only, "
            "without msdet's faster kernels (install g++ or set $CXX)"
        )
        return
    report.fact("C++ compiler", version.splitlines()[0])
    extra = os.environ.get(cpu_kernels.FLAGS_VAR)
    if extra:
        report.fact("kernel flags", extra)
    library = cpu_kernels.library_path(version=version)
    if not os.path.isfile(library):
        report.fact("CPU kernels", "not built yet: the first CPU run builds them")
        return
    report.fact("CPU kernels", library)
    threads = threads or available_cores()
    record = kernel_choice.cached_choice(library, threads, package_version("mindspore") or "")
    if record is None:
        chosen = f"not measured yet at {threads} threads: the first CPU training run measures"
    else:
        kept = cpu_kernels.kernels_text(record["kernels"]) or "none (MindSpore's operators)"
        chosen = f"{kept} (measured at {threads} threads)"
    report.fact("kernel choice", chosen)


def build_report() -> Report:
    report = Report()
    check_python_packages(report)
    check_mindspore(report)
    check_ascend(report, package_version("mindspore"))
    check_cpu_speed(report)
    check_cpu_kernels(report)
    return report


def main() -> int:
    """Print the report; exit 1 when something must be fixed."""
    report = build_report()
    width = max(len(k) for k, _ in report.facts)
    print("msdet environment check")
    for key, value in report.facts:
        print(f"  {key:<{width}}  {value}")
    for note in report.notes:
        print(f"note: {note}")
    if report.problems:
        print("verdict: NOT READY")
        for p in report.problems:
            print(f"  fix: {p}")
        return 1
    print("verdict: ready")
    return 0


if __name__ == "__main__":
    sys.exit(main())
