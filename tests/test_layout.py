"""The architecture as the layout shows it: data flows one way,
``common -> data, models, ops -> engine -> tools, porting -> commands`` (the entry points: the
``msdet`` command, which the root scripts call), with ``bench`` beside ``commands`` on top and
``dev`` (the maintainer tools, not in the wheel) above everything: it may import any package,
none may import it; inside ``engine``, ``runtime`` is the bottom. ``engine`` holds the
training, evaluation, inference and runtime only; the tools (doctor, chip check, self-test)
sit above it.

Every import statement of every module is read (top level and inside functions), so a
lower layer that reaches upward fails here, naming the file and the import. msdet is
imported as the package ``msdet`` everywhere: a bare ``import models`` would put a package
named ``models`` on its users' import path.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from tests.support import PACKAGES
from tests.support import ROOT as REPO_ROOT

ROOT = Path(REPO_ROOT)
# package (or engine sub-package) -> the msdet packages it must never import
FORBIDDEN = {
    "common": {"data", "models", "ops", "engine", "tools", "porting", "commands", "bench", "dev"},
    "ops": {"data", "models", "engine", "tools", "porting", "commands", "bench", "dev"},
    "data": {"models", "ops", "engine", "tools", "porting", "commands", "bench", "dev"},
    "models": {"data", "engine", "tools", "porting", "commands", "bench", "dev"},
    "engine": {"tools", "porting", "commands", "bench", "dev"},
    "tools": {"porting", "commands", "bench", "dev"},
    "porting": {"tools", "commands", "bench", "dev"},
    "commands": {"bench", "dev"},
    "bench": {"commands", "dev"},
    "dev": set(),  # the maintainer tools, in a clone only: they may import anything
    "engine/runtime": {"engine.training", "engine.evaluation", "engine.inference", "engine.cli"},
    "engine/training": {"engine.inference", "engine.cli"},
    "engine/evaluation": {"engine.training", "engine.inference", "engine.cli"},
    "engine/inference": {"engine.training"},
}
# What engine/ holds: the training, evaluation and inference engine and its runtime.
ENGINE_PARTS = {"__init__.py", "cli.py", "runtime", "training", "evaluation", "inference"}


def imported_packages(path: Path) -> set[tuple[str, int]]:
    """(msdet package, line) of every import: ``engine`` for ``msdet.engine.cli``, and
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


# What only the device modules ask of the hardware: MindSpore's SoC capability queries, the
# Ascend precision setting, the float-status register and the collective-communication set-up.
DEVICE_QUESTIONS = (
    "ascend_soc_supports_feature",
    "MSContext",
    "op_precision",
    "NPUGetFloatStatus",
    "mindspore.communication",
)
# The device modules (the Ascend chip and several ranks), and the stand-in that answers their
# questions on CPU.
DEVICE_MODULES = {
    Path("engine") / "runtime" / f"{name}.py" for name in ("ascend", "distributed", "standin")
}


def test_device_questions_are_asked_in_the_device_modules_only():
    asked = [
        f"{path.relative_to(ROOT)}: {word}"
        for package in PACKAGES
        for path in sorted((ROOT / package).rglob("*.py"))
        if path.relative_to(ROOT) not in DEVICE_MODULES
        for word in DEVICE_QUESTIONS
        if word in path.read_text()
    ]
    assert asked == []


def test_readme_layout_names_every_package_and_module_of_engine_and_tools():
    readme = (ROOT / "README.md").read_text()
    layout = readme.split("## Project layout", 1)[1].split("```")[1]
    words = set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", layout))
    modules = [
        path
        for package in ("engine", "tools")
        for path in (ROOT / package).rglob("*.py")
        if path.stem not in ("__init__", "__main__")
    ]
    names = sorted({p.stem for p in modules} | {p.parent.name for p in modules})
    assert len(names) > 40 and [n for n in names if n not in words] == []


def test_the_readme_check_matches_whole_names_only():
    assert "ema" not in set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", "schema, emanate"))


def test_engine_holds_training_evaluation_inference_and_runtime_only():
    parts = {p.name for p in (ROOT / "engine").iterdir() if p.name != "__pycache__"}
    assert parts == ENGINE_PARTS


def module_name(path: Path, root: Path = ROOT) -> str:
    """``msdet.data.check`` for ``data/check.py``; ``msdet.tools`` for its ``__init__.py``."""
    parts = ["msdet", *path.relative_to(root).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(root: Path = ROOT) -> dict[str, set[str]]:
    """Module -> the msdet modules it imports (top level and inside functions), each import
    resolved to the module file it loads (``from msdet.data import check`` -> ``msdet.data.check``)."""
    files = {module_name(p, root): p for pkg in PACKAGES for p in (root / pkg).rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in files.items():
        targets = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                wanted = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                wanted = [f"{node.module}.{alias.name}" for alias in node.names] + [node.module]
            else:
                continue
            for target in wanted:
                if target in files and target != name:
                    targets.add(target)
                    break  # the submodule if it is one, else the module itself
        graph[name] = targets
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in graph.get(node, ()):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_import_graph_has_no_cycles():
    graph = import_graph()
    assert len(graph) > 150 and sum(len(t) for t in graph.values()) > 300
    assert cycles(graph) == []


def test_the_cycle_check_finds_a_cycle_through_a_function_level_import(tmp_path):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "__init__.py").write_text("")
    (tmp_path / "data" / "check.py").write_text("from msdet.data.plot import plot\n")
    (tmp_path / "data" / "plot.py").write_text("def plot():\n    from msdet.data import check\n")
    graph = import_graph(tmp_path)
    assert graph["msdet.data.check"] == {"msdet.data.plot"}
    assert cycles(graph) == [["msdet.data.check", "msdet.data.plot"]]


def helper_imports(path: Path) -> list[str]:
    """The imports of ``tests.*`` in a test file that do not come from ``tests.support``:
    shared helpers live there, never in a test module, a conftest or an entry script."""
    wrong = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level:
            names = ["." * node.level + (node.module or "")]
        elif isinstance(node, ast.ImportFrom) and node.module == "tests":
            names = [f"tests.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module]
        else:
            continue
        wrong += [
            f"{path.name}:{node.lineno} imports {name}"
            for name in names
            if (name.startswith(("tests.", ".")) or name == "tests")
            and name != "tests.support"
            and not name.startswith("tests.support.")
        ]
    return wrong


def test_tests_share_helpers_through_tests_support_only():
    files = sorted((ROOT / "tests").rglob("*.py"))
    assert len(files) > 130
    assert [line for path in files for line in helper_imports(path)] == []


def test_the_helper_rule_sees_imports_of_test_modules(tmp_path):
    module = tmp_path / "test_m.py"
    module.write_text(
        "from tests.support import ROOT\nfrom tests.support.modes import execution_mode\n"
        "from tests.ops.test_nms import run\nfrom tests import modes\n"
        "def f():\n    import tests.e2e.dp_step\n    from . import conftest\n"
    )
    assert sorted(helper_imports(module)) == [
        "test_m.py:3 imports tests.ops.test_nms",
        "test_m.py:4 imports tests.modes",
        "test_m.py:6 imports tests.e2e.dp_step",
        "test_m.py:7 imports .",
    ]


# Packages whose every module has a test file of its own at the mirrored place.
MIRRORED = ("engine/training/callbacks", "tools")


def mirrored_test(module: Path, root: Path = ROOT) -> Path:
    """``tests/tools/chip_check/test_ir.py`` for ``tools/chip_check/ir.py``; a package's
    ``__main__.py`` is tested in ``test_main.py``."""
    rel = module.relative_to(root)
    return root / "tests" / rel.parent / f"test_{rel.stem.strip('_')}.py"


def test_every_callback_and_tool_module_has_its_own_test_file():
    modules = [
        path
        for package in MIRRORED
        for path in sorted((ROOT / package).rglob("*.py"))
        if path.name != "__init__.py"
    ]
    assert len(modules) > 25
    missing = [
        str(mirrored_test(m).relative_to(ROOT)) for m in modules if not mirrored_test(m).is_file()
    ]
    assert missing == []


def test_the_mirror_of_a_module_and_of_a_packages_main():
    assert mirrored_test(ROOT / "tools" / "chip_check" / "ir.py") == (
        ROOT / "tests" / "tools" / "chip_check" / "test_ir.py"
    )
    assert mirrored_test(ROOT / "tools" / "selftest" / "__main__.py").name == "test_main.py"
