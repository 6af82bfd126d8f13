"""The architecture as the layout shows it: data flows one way,
``configs -> data, models, ops -> engine -> entry points``, with ``porting`` on top.

Every import statement of every module is read (top level and inside functions), so a
lower layer that reaches upward fails here, naming the file and the import.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# package -> the msdet packages it must never import
FORBIDDEN = {
    "ops": {"data", "models", "engine", "porting", "bench"},
    "data": {"models", "ops", "engine", "porting", "bench"},
    "models": {"data", "engine", "porting", "bench"},
    "engine": {"porting", "bench"},
    "porting": {"bench"},
}


def imported_packages(path: Path) -> set[tuple[str, int]]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found |= {(alias.name.split(".")[0], node.lineno) for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add((node.module.split(".")[0], node.lineno))
    return found


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_lower_layers_never_import_upward(package):
    files = sorted((ROOT / package).rglob("*.py"))
    assert files, package
    wrong = [
        f"{path.relative_to(ROOT)}:{line} imports {name}"
        for path in files
        for name, line in imported_packages(path)
        if name in FORBIDDEN[package]
    ]
    assert wrong == []


def test_the_check_sees_imports_inside_functions(tmp_path):
    module = tmp_path / "m.py"
    module.write_text("def f():\n    from engine.runtime import setup_runtime\n")
    assert ("engine", 2) in imported_packages(module)


# What only the device module asks of the hardware: MindSpore's SoC capability queries, the
# Ascend precision setting, the float-status register and the collective-communication set-up.
DEVICE_QUESTIONS = (
    "ascend_soc_supports_feature",
    "MSContext",
    "op_precision",
    "NPUGetFloatStatus",
    "mindspore.communication",
)
DEVICE_MODULE = Path("engine") / "device.py"


def test_device_questions_are_asked_in_the_device_module_only():
    asked = [
        f"{path.relative_to(ROOT)}: {word}"
        for package in FORBIDDEN
        for path in sorted((ROOT / package).rglob("*.py"))
        if path.relative_to(ROOT) != DEVICE_MODULE
        for word in DEVICE_QUESTIONS
        if word in path.read_text()
    ]
    assert asked == []


def test_readme_layout_names_every_engine_module():
    readme = (ROOT / "README.md").read_text()
    layout = readme.split("## Project layout", 1)[1].split("```")[1]
    modules = sorted(p.stem for p in (ROOT / "engine").glob("*.py") if p.stem != "__init__")
    assert modules and [m for m in modules if m not in layout] == []
