"""The architecture as the layout shows it: data flows one way,
``common -> data, models, ops -> engine -> entry points``, with ``porting`` and ``bench`` on
top; inside ``engine``, ``runtime`` is the bottom and ``tools`` the top.

Every import statement of every module is read (top level and inside functions), so a
lower layer that reaches upward fails here, naming the file and the import. msdet is
imported as the package ``msdet`` everywhere: a bare ``import models`` would put a package
named ``models`` on its users' import path.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.support import ROOT as REPO_ROOT

ROOT = Path(REPO_ROOT)
PACKAGES = ("common", "data", "models", "ops", "engine", "porting", "bench")
# package (or engine sub-package) -> the msdet packages it must never import
FORBIDDEN = {
    "common": {"data", "models", "ops", "engine", "porting", "bench"},
    "ops": {"data", "models", "engine", "porting", "bench"},
    "data": {"models", "ops", "engine", "porting", "bench"},
    "models": {"data", "engine", "porting", "bench"},
    "engine": {"porting", "bench"},
    "porting": {"bench"},
    "engine/runtime": {
        "engine.training",
        "engine.evaluation",
        "engine.inference",
        "engine.tools",
        "engine.cli",
    },
    "engine/training": {"engine.inference", "engine.tools", "engine.cli"},
    "engine/evaluation": {"engine.training", "engine.inference", "engine.tools", "engine.cli"},
    "engine/inference": {"engine.training", "engine.tools"},
}


def imported_packages(path: Path) -> set[tuple[str, int]]:
    """(msdet package, line) of every import: ``engine`` for ``msdet.engine.x``, and
    ``engine.training`` as well for imports of engine's sub-packages."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        else:
            continue
        for name in names:
            parts = name.split(".")
            if parts[0] == "msdet" and len(parts) > 1:
                found.add((parts[1], node.lineno))
                if parts[1] == "engine" and len(parts) > 2:
                    found.add((f"engine.{parts[2]}", node.lineno))
    return found


def bare_imports(path: Path, root: Path = ROOT) -> list[str]:
    """Imports of msdet's packages without the ``msdet.`` prefix."""
    bad = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        else:
            continue
        bad += [f"{path.relative_to(root)}:{node.lineno} imports {n}" for n in names
                if n.split(".")[0] in PACKAGES]  # fmt: skip
    return bad


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


def test_msdet_is_imported_as_the_package_msdet_everywhere():
    files = sorted(ROOT.glob("*.py")) + [
        path for folder in (*PACKAGES, "tests") for path in sorted((ROOT / folder).rglob("*.py"))
    ]
    assert len(files) > 100
    assert [line for path in files for line in bare_imports(path)] == []


def test_the_check_sees_imports_inside_functions(tmp_path):
    module = tmp_path / "m.py"
    module.write_text(
        "def f():\n    from msdet.engine.runtime.process import setup_runtime\n"
        "    import models.yolox\n"
    )
    assert ("engine", 2) in imported_packages(module)
    assert ("engine.runtime", 2) in imported_packages(module)
    assert bare_imports(module, tmp_path) == ["m.py:3 imports models.yolox"]


# What only the device module asks of the hardware: MindSpore's SoC capability queries, the
# Ascend precision setting, the float-status register and the collective-communication set-up.
DEVICE_QUESTIONS = (
    "ascend_soc_supports_feature",
    "MSContext",
    "op_precision",
    "NPUGetFloatStatus",
    "mindspore.communication",
)
DEVICE_MODULE = Path("engine") / "runtime" / "device.py"


def test_device_questions_are_asked_in_the_device_module_only():
    asked = [
        f"{path.relative_to(ROOT)}: {word}"
        for package in PACKAGES
        for path in sorted((ROOT / package).rglob("*.py"))
        if path.relative_to(ROOT) != DEVICE_MODULE
        for word in DEVICE_QUESTIONS
        if word in path.read_text()
    ]
    assert asked == []


def test_readme_layout_names_every_package_and_engine_module():
    readme = (ROOT / "README.md").read_text()
    layout = readme.split("## Project layout", 1)[1].split("```")[1]
    engine = [p for p in (ROOT / "engine").rglob("*.py") if p.stem not in ("__init__", "__main__")]
    names = sorted({p.stem for p in engine} | {p.parent.name for p in engine})
    assert names and [n for n in names if n not in layout] == []
