"""Environment check: ``msdet doctor`` (``python -m msdet.tools.doctor``).

Prints the MindSpore version and the CANN (and driver) it pairs with, whether msdet supports
it, the device targets usable here, the Ascend driver and CANN versions when present (found from ``ASCEND_HOME_PATH`` as CANN's ``set_env.sh`` sets it, or
CANN's default root), whether that CANN is the one MindSpore's bundled kernels were built
with, numpy/OpenCV versions, whether the CPU oneDNN fix is active, msdet's
compiled CPU kernels (the compiler, whether the library for this CPU is built, which kernels
``runtime.cpu_kernels=auto`` measured to be faster here), and a verdict with what to fix.
The version matrix (MindSpore x CANN x driver) is the first wall Ascend users hit; this
shows where a machine stands.
"""

from __future__ import annotations

import argparse
import glob
import importlib.metadata as md
import importlib.util
import os
import platform
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field

from msdet.engine.runtime import mindspore_compat
from msdet.engine.runtime.cpu import ONEDNN_ISA_VALUE, ONEDNN_ISA_VAR, configure_process_env
from msdet.engine.runtime.device import ascend_present

# The MindSpore/CANN/driver pairings live with the rest of msdet's version knowledge.
KNOWN_MATRIX = mindspore_compat.CANN_PAIRINGS
DEFAULT_ASCEND_ROOT = "/usr/local/Ascend"
# Where MindSpore keeps the CANN version its bundled Ascend C kernels (AllFinite among them)
# were built with, relative to its package folder.
BUNDLED_KERNELS_VERSION = os.path.join(
    "lib", "plugin", "ascend", "custom_ascendc_910b", "version.info"
)


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
        report.problems.append(
            f"MindSpore is missing: pip install mindspore=={mindspore_compat.TESTED}"
        )
        return []
    report.fact("pairs with", pairing_text(ms_v))
    if not mindspore_compat.supported(ms_v):
        report.problems.append(
            f"{mindspore_compat.support_note(ms_v)}: pip install -r requirements.txt "
            f"(the tests run on mindspore=={mindspore_compat.TESTED})"
        )
    elif ms_v != mindspore_compat.TESTED:
        report.notes.append(mindspore_compat.support_note(ms_v))
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


def pairing_text(ms_version: str) -> str:
    """The CANN (and driver) published for this MindSpore, for one line of the report."""
    pairing = mindspore_compat.cann_pairing(ms_version)
    if pairing is None:
        return "no CANN pairing recorded (see https://www.mindspore.cn/install)"
    cann, driver = pairing
    return f"CANN {cann}" + (f", driver {driver}" if driver else "")


def ascend_paths(env: dict[str, str] | None = None) -> tuple[str, str]:
    """(Ascend root holding ``driver/``, CANN toolkit folder) on this machine.

    CANN's ``set_env.sh`` exports ``ASCEND_HOME_PATH`` as the toolkit itself
    (``<root>/ascend-toolkit/latest``, or ``<root>/cann-<version>`` in CANN 9 images); set by
    hand it is sometimes the Ascend root. Without it, CANN's default root
    ``/usr/local/Ascend``. The root is the first folder above the toolkit that holds
    ``driver/``, else the default root (the driver is installed apart from the toolkit)."""
    env = os.environ if env is None else env
    home = env.get("ASCEND_HOME_PATH") or env.get("ASCEND_TOOLKIT_HOME")
    if not home:
        return DEFAULT_ASCEND_ROOT, os.path.join(DEFAULT_ASCEND_ROOT, "ascend-toolkit", "latest")
    home = os.path.normpath(home)
    if os.path.isdir(os.path.join(home, "ascend-toolkit")):  # the root itself
        return home, os.path.join(home, "ascend-toolkit", "latest")
    for start in dict.fromkeys((home, os.path.realpath(home))):
        folder = os.path.dirname(start)
        while folder and folder != os.path.dirname(folder):
            if os.path.isdir(os.path.join(folder, "driver")):
                return folder, home
            folder = os.path.dirname(folder)
    return DEFAULT_ASCEND_ROOT, home


def ascend_versions(env: dict[str, str] | None = None) -> dict[str, str | None]:
    """The Ascend driver and CANN toolkit versions installed here (None where not found):
    the CANN version from the file MindSpore reads (``<toolkit>/compiler/version.info``),
    else the toolkit's own install records."""
    root, toolkit = ascend_paths(env)
    driver = read_version_file(os.path.join(root, "driver", "version.info"))
    cann = (
        read_version_file(os.path.join(toolkit, "compiler", "version.info"))
        or read_version_file(os.path.join(toolkit, "*", "ascend_toolkit_install.info"))
        or read_version_file(os.path.join(toolkit, "version.cfg"))
    )
    return {"ascend_driver": driver, "cann": cann}


def bundled_kernels_cann(package_dir: str | None = None) -> str | None:
    """The CANN version MindSpore's bundled Ascend C kernels were built with (from its
    package folder, found without importing it), or None."""
    if package_dir is None:
        spec = importlib.util.find_spec("mindspore")
        locations = list(spec.submodule_search_locations or []) if spec else []
        package_dir = locations[0] if locations else None
    if not package_dir:
        return None
    path = os.path.join(package_dir, BUNDLED_KERNELS_VERSION)
    try:
        with open(path, encoding="utf-8") as f:
            for line in f:
                key, _, value = line.strip().partition("=")
                if key == "custom_opp_compiler_version" and value:
                    return value
    except OSError:
        return None
    return None


def major_minor(version: str) -> str:
    return ".".join(version.split(".")[:2])


def check_ascend(report: Report, ms_version: str | None, env: dict[str, str] | None = None) -> None:
    if not ascend_present():
        report.fact("Ascend", "no NPU device files (/dev/davinci*)")
        return
    root, toolkit = ascend_paths(env)
    versions = ascend_versions(env)
    driver, cann = versions["ascend_driver"], versions["cann"]
    report.fact("Ascend driver", driver or "not found")
    report.fact("CANN", cann or "not found")
    report.fact("CANN toolkit", toolkit)
    if driver is None:
        report.problems.append(f"NPU present but no driver version under {root}/driver")
    if cann is None:
        report.problems.append(
            f"no CANN toolkit version under {toolkit} (compiler/version.info): source "
            "<CANN>/set_env.sh, which sets ASCEND_HOME_PATH"
        )
    expected = mindspore_compat.cann_pairing(ms_version) if ms_version else None
    if expected is None:
        report.notes.append(
            f"no CANN/driver pairing recorded for MindSpore {ms_version}; check "
            "https://www.mindspore.cn/install for the matching CANN and driver"
        )
    elif cann and not cann.startswith(expected[0]):
        report.problems.append(f"MindSpore {ms_version} expects CANN {expected[0]} (found {cann})")
    elif expected[1] is None:
        report.notes.append(f"no driver version published for MindSpore {ms_version}: use the "
                            f"driver CANN {expected[0]}'s release notes name")  # fmt: skip
    built = bundled_kernels_cann()
    if built and cann and major_minor(built) != major_minor(cann):
        report.problems.append(
            f"MindSpore's bundled Ascend C kernels were built with CANN {built} and this is "
            f"CANN {cann}: MindSpore then turns its AllFinite kernel off (mindspore/amp.py, "
            "_enable_all_finite), and the overflow check of every training step runs four "
            f"operators per gradient instead of one; install CANN {major_minor(built)}"
        )


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
    from msdet.engine.runtime import kernel_choice
    from msdet.ops import cpu_kernels

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


def main(argv: Sequence[str] | None = None) -> int:
    """Print the report; exit 1 when something must be fixed. Takes no arguments but
    ``--help``."""
    parser = argparse.ArgumentParser(
        prog="python -m msdet.tools.doctor",
        description=__doc__.split("\n\n")[1],
    )
    parser.parse_args(argv)
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
