"""Turn export.py's file into what Ascend deploys: an offline model (ATC) or a MindSpore Lite model.

    python export.py ckpt=best.ckpt export.format=ONNX export.with_nms=false export.out=deploy
    python -m msdet.engine.inference.deploy deploy --soc 910B1   # ATC and converter_lite
    python -m msdet.engine.inference.deploy deploy/best_yolox_s_640x640_b1.onnx --dry-run

Reads export.py's report ``<file>.json`` (the file, its format and input shape; given the
file, the report or a folder holding one export) and runs, where the tool is on PATH:

- **ATC** (CANN's Ascend Tensor Compiler) -> ``<stem>.om``, from the **ONNX** export only:
  ATC takes ONNX (``--framework=5``, opsets 11-15) or AIR, and MindSpore 2.10 deprecates AIR
  (``mindspore.export`` warns that it will be removed). ``--soc`` is the chip as ``npu-smi
  info`` names it (``910B1``, ``310P3``) or ATC's SoC version (``Ascend910B1``). ATC may
  append the OS and architecture to the file name (``<stem>_linux_aarch64.om``): the file it
  wrote is found either way.
- **converter_lite** (MindSpore Lite) -> ``<stem>_lite.mindir``, from MINDIR (``--fmk=MINDIR``)
  or ONNX (``--fmk=ONNX``), ``--optimize=ascend_oriented`` for Ascend (``general`` for CPU).

Shapes are static (export.py traces one input shape), so neither tool needs an input shape.
An export with NMS inside is refused: CANN's NMSWithMask kernels take boxes as [N, 8] and
MindSpore builds [N, 5] (the chip check's finding), so the deployed network is the one
without NMS (``export.with_nms=false``) and NMS runs on the host.
A missing tool is said in one line with how to get it, and the command is printed for later;
``--dry-run`` only prints. Exit codes: 0 done (or dry run), 2 bad export, 3 a tool is missing.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass

TARGETS = ("om", "lite", "both")
TOOL_HINTS = {
    "atc": "install the CANN toolkit and `source <CANN>/set_env.sh` (ATC ships with CANN)",
    "converter_lite": (
        "download MindSpore Lite (mindspore.cn/lite) and add <lite>/tools/converter/converter to "
        "PATH and <lite>/tools/converter/lib to LD_LIBRARY_PATH"
    ),
}


class DeployError(ValueError):
    """The export folder cannot be turned into a deployable model."""


@dataclass(frozen=True)
class Command:
    """One conversion: the tool, its arguments, what it writes."""

    tool: str
    args: tuple[str, ...]
    output: str

    def line(self) -> str:
        return " ".join((self.tool, *self.args))


REPORT_SUFFIXES = (".mindir.json", ".onnx.json")


def find_report(target: str) -> str:
    """export.py's report for ``target``: an exported file (its ``<file>.json``), a report
    itself, or a folder holding one (``export.json``, or a single ``*.mindir.json`` /
    ``*.onnx.json``: several are an error naming them)."""
    if os.path.isdir(target):
        legacy = os.path.join(target, "export.json")
        if os.path.isfile(legacy):
            return legacy
        found = sorted(
            os.path.join(target, n) for n in os.listdir(target) if n.endswith(REPORT_SUFFIXES)
        )
        if len(found) > 1:
            raise DeployError(
                f"{target} holds {len(found)} exports ({', '.join(map(os.path.basename, found))}): "
                "name the file to deploy"
            )
        return found[0] if found else legacy
    if target.endswith((".mindir", ".onnx")):
        return target + ".json"
    return target


def read_export(target: str) -> dict:
    """export.py's report for ``target`` (:func:`find_report`), checked: the file exists,
    the format is known and the input is one static NCHW shape with 3 channels and sides
    that are multiples of 32."""
    path = find_report(target)
    folder = os.path.dirname(path)
    try:
        with open(path, encoding="utf-8") as f:
            export = json.load(f)
    except OSError as err:
        raise DeployError(
            f"{path}: no export record ({err.strerror}); run export.py first"
        ) from err
    except json.JSONDecodeError as err:
        raise DeployError(f"{path} is not valid JSON: {err}") from err
    for key in ("file", "format", "input_shape"):
        if key not in export:
            raise DeployError(f"{path}: field {key!r} is missing")
    if export["format"] not in ("ONNX", "MINDIR"):
        raise DeployError(f"{path}: format {export['format']!r} is neither ONNX nor MINDIR")
    shape = export["input_shape"]
    if not (
        isinstance(shape, list)
        and len(shape) == 4
        and all(isinstance(v, int) and v > 0 for v in shape)
    ):
        raise DeployError(
            f"{path}: input_shape {shape!r} is not a static [batch, 3, height, width]"
        )
    if shape[1] != 3 or shape[2] % 32 or shape[3] % 32:
        raise DeployError(
            f"{path}: input_shape {shape} needs 3 channels and sides that are multiples of 32"
        )
    model = (
        export["file"]
        if os.path.isabs(export["file"])
        else os.path.join(folder, os.path.basename(export["file"]))
    )
    if not os.path.isfile(model):
        raise DeployError(f"{path}: the exported file {model} does not exist")
    return {**export, "file": model}


def soc_version(name: str) -> str:
    """ATC's ``--soc_version`` for a chip as ``npu-smi info`` names it (``910B1`` ->
    ``Ascend910B1``); a name that already starts with Ascend is kept."""
    name = name.strip()
    if not name:
        return ""
    return name if name.lower().startswith("ascend") else f"Ascend{name}"


def check_without_nms(export: dict) -> None:
    """Refuse an export whose graph holds NMSWithMask: no Ascend kernel takes it as built."""
    if export.get("with_nms"):
        raise DeployError(
            "this export holds NMS (NMSWithMask), which CANN's kernels take only as [N, 8] "
            "boxes while MindSpore builds [N, 5]: export the network alone for Ascend "
            "(python export.py ckpt=... export.with_nms=false) and run NMS on the host "
            "(msdet.ops.nms.HostNMS)"
        )


def atc_command(export: dict, soc: str) -> Command:
    """ATC from the ONNX export to an offline model for ``soc``."""
    if export["format"] != "ONNX":
        raise DeployError(
            "ATC needs the ONNX export (AIR is deprecated in MindSpore 2.10): "
            "python export.py ckpt=... export.format=ONNX"
        )
    if not soc:
        raise DeployError("ATC needs the chip: --soc (npu-smi info names it, e.g. Ascend910B1)")
    stem = os.path.splitext(export["file"])[0]
    args = (
        f"--model={export['file']}",
        "--framework=5",
        f"--output={stem}",
        "--input_format=NCHW",
        f"--soc_version={soc_version(soc)}",
        "--log=error",
    )
    return Command("atc", args, stem + ".om")


def lite_command(export: dict, device: str = "ascend") -> Command:
    """converter_lite from the MINDIR or ONNX export to a MindSpore Lite model."""
    stem = os.path.splitext(export["file"])[0] + "_lite"
    optimize = "ascend_oriented" if device == "ascend" else "general"
    args = (
        f"--fmk={export['format']}",
        f"--modelFile={export['file']}",
        f"--outputFile={stem}",
        f"--optimize={optimize}",
    )
    return Command("converter_lite", args, stem + ".mindir")


def plan(export: dict, target: str, soc: str | None) -> list[Command]:
    """The conversions for ``target`` (om, lite or both)."""
    if target not in TARGETS:
        raise DeployError(f"--target must be one of {TARGETS}, got {target!r}")
    check_without_nms(export)
    commands = []
    if target in ("om", "both"):
        commands.append(atc_command(export, soc or ""))
    if target in ("lite", "both"):
        commands.append(lite_command(export))
    return commands


def run(commands: Sequence[Command], dry_run: bool = False) -> int:
    """Run each command whose tool is on PATH; returns the exit code (see the module doc)."""
    missing = 0
    for cmd in commands:
        print(f"$ {cmd.line()}")
        if dry_run:
            continue
        if shutil.which(cmd.tool) is None:
            print(f"{cmd.tool} is not on PATH: not converted ({TOOL_HINTS[cmd.tool]})")
            missing += 1
            continue
        done = subprocess.run([cmd.tool, *cmd.args], capture_output=True, text=True)
        written = written_file(cmd.output)
        if done.returncode != 0 or written is None:
            tail = (done.stderr or done.stdout).strip().splitlines()[-5:]
            raise DeployError(f"{cmd.tool} failed (exit {done.returncode}): " + " | ".join(tail))
        print(f"wrote {written}")
    return 3 if missing else 0


def written_file(expected: str) -> str | None:
    """The file a tool wrote for ``expected``: itself, or the newest ``<stem>*<suffix>`` beside
    it (ATC appends ``_<os>_<arch>`` to the name on some installs); None when neither."""
    if os.path.isfile(expected):
        return expected
    stem, suffix = os.path.splitext(expected)
    found = glob.glob(glob.escape(stem) + "*" + suffix)
    return max(found, key=os.path.getmtime) if found else None


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "folder", help="export.py's file (.onnx, .mindir), its report <file>.json, or their folder"
    )
    parser.add_argument("--target", default="both", choices=TARGETS)
    parser.add_argument("--soc", help="the chip as npu-smi info names it (910B1) or Ascend910B1")
    parser.add_argument("--dry-run", action="store_true", help="print the commands only")
    args = parser.parse_args(argv)
    try:
        export = read_export(args.folder)
        target = args.target
        if target == "both" and export["format"] != "ONNX":
            print("export is MINDIR: converter_lite only (ATC needs export.format=ONNX)")
            target = "lite"
        return run(plan(export, target, args.soc), args.dry_run)
    except DeployError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
