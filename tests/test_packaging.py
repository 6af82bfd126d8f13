"""What an install of msdet holds: pyproject.toml's packages and package data against the tree,
and the wheel built from it.

Every folder with an ``__init__.py`` (tests aside) is a package of the wheel, and every file
msdet reads at run time (the configs, the launch scripts, the kernels' C++, the chip check's
tables) ships: a new package or config group that pyproject.toml does not name fails here,
not in a user's ``pip install .``.
"""

from __future__ import annotations

import ast
import glob
import importlib.metadata
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.support import ROOT as REPO_ROOT

tomllib = pytest.importorskip("tomllib")  # Python 3.11+

ROOT = Path(REPO_ROOT)
# Folders without Python that ship as data-only packages.
DATA_FOLDERS = ("configs", "scripts")
# Files in msdet's folders that msdet never reads, so they stay in the repository:
# bench's recorded results.
NOT_SHIPPED = ("bench/results",)
# What the tree holds besides msdet: not searched for packages or data.
NOT_MSDET = ("tests", "docs", "runs", "outputs", "multirun", "build")
# msdet's folders that also import the PyTorch original (the parity tools and the benchmarks
# against it), which README and requirements-dev.txt install beside msdet.
NEEDS_THE_ORIGINAL = ("porting", "bench")


def pyproject() -> dict:
    with open(ROOT / "pyproject.toml", "rb") as f:
        return tomllib.load(f)


def package_folder(package: str) -> Path:
    """The folder of a package (``msdet.tools.selftest``: ``tools/selftest``) in the tree
    (pyproject maps ``msdet`` to the root)."""
    assert package.split(".")[0] == "msdet", package
    return ROOT.joinpath(*package.split(".")[1:])


def msdet_folders() -> list[Path]:
    """Every folder of msdet in the tree (hidden ones, caches and non-msdet ones aside)."""
    found = []
    for top in sorted(ROOT.iterdir()):
        if not top.is_dir() or top.name.startswith(".") or top.name in NOT_MSDET:
            continue
        for folder, subfolders, _ in os.walk(top):
            subfolders[:] = sorted(
                s for s in subfolders if not s.startswith(".") and s != "__pycache__"
            )
            found.append(Path(folder))
    return found


def code_packages() -> set[str]:
    """msdet (the root's __init__.py) and every folder below it with an __init__.py."""
    root = {"msdet"} if (ROOT / "__init__.py").is_file() else set()
    return root | {
        ".".join(["msdet", *f.relative_to(ROOT).parts])
        for f in msdet_folders()
        if (f / "__init__.py").is_file()
    }


def data_files() -> set[str]:
    """Every non-Python file under msdet's packages and data folders, relative to the root."""
    roots = {p.split(".")[1] for p in code_packages() if "." in p} | set(DATA_FOLDERS)
    files = set()
    for folder in msdet_folders():
        rel = folder.relative_to(ROOT)
        if rel.parts[0] not in roots or any(str(rel).startswith(n) for n in NOT_SHIPPED):
            continue
        files |= {
            str(rel / f.name)
            for f in folder.iterdir()
            if f.is_file() and f.suffix not in (".py", ".pyc")
        }
    return files


def shipped_data(config: dict) -> set[str]:
    """The files package-data names, found as setuptools finds them (globs in each
    package's folder), relative to the root."""
    files = set()
    for package, patterns in config["tool"]["setuptools"]["package-data"].items():
        folder = package_folder(package)
        for pattern in patterns:
            files |= {
                os.path.relpath(p, ROOT)
                for p in glob.glob(str(folder / pattern))
                if os.path.isfile(p)
            }
    return files


def test_every_package_and_data_folder_is_listed():
    config = pyproject()
    assert config["tool"]["setuptools"]["package-dir"] == {"msdet": "."}
    listed = config["tool"]["setuptools"]["packages"]
    assert len(listed) == len(set(listed))
    code = code_packages()
    data = {".".join(["msdet", *Path(f).parent.parts]) for f in data_files()}
    assert {"msdet.commands", "msdet.engine.training.callbacks", "msdet.tools.chip_check"} <= code
    assert {"msdet.configs", "msdet.configs.model", "msdet.scripts", "msdet.ops.kernels"} <= data
    assert set(listed) == code | data


def test_package_data_ships_every_file_msdet_reads():
    expected = data_files()
    assert {"configs/config.yaml", "configs/model/yolox_nano.yaml", "scripts/common.sh",
            "ops/kernels/sgd.cc", "tools/chip_check/data/ms_to_cann.json"} <= expected  # fmt: skip
    assert shipped_data(pyproject()) == expected


def test_the_check_sees_a_new_config_group(tmp_path, monkeypatch):
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    for name in ("configs/config.yaml", "configs/zz_new/a.yaml", "models/__init__.py"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("")
    assert data_files() == {"configs/config.yaml", "configs/zz_new/a.yaml"}
    assert code_packages() == {"msdet.models"}
    config = {"tool": {"setuptools": {"package-data": {"msdet.configs": ["*.yaml"]}}}}
    assert shipped_data(config) == {"configs/config.yaml"}


def test_configs_are_found_in_the_package():
    from msdet.common.config import CONFIG_DIR

    assert os.path.samefile(CONFIG_DIR, package_folder("msdet.configs"))


def test_the_wheel_holds_the_configs_scripts_kernels_and_the_command(tmp_path):
    # Built from a copy: setuptools writes build/ and the egg-info folder into its source.
    source = tmp_path / "src"
    shutil.copytree(
        ROOT,
        source,
        ignore=shutil.ignore_patterns(".*", "__pycache__", *NOT_MSDET, "*.egg-info"),
    )
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
         "-w", str(tmp_path / "dist"), str(source)],
        check=True, capture_output=True, timeout=300,
    )  # fmt: skip
    (wheel,) = (tmp_path / "dist").glob("msdet-*.whl")
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        entry_points = next(z.read(n) for n in names if n.endswith(".dist-info/entry_points.txt"))
        modes = {i.filename: i.external_attr >> 16 for i in z.infolist()}
    wanted = {f"msdet/{f}" for f in data_files()}
    groups = [p.relative_to(ROOT) for p in (ROOT / "configs").glob("*/*.yaml")]
    assert len(groups) >= 15 and {f"msdet/{g}" for g in groups} <= wanted
    assert len([n for n in wanted if n.endswith(".cc")]) >= 10
    assert {"msdet/configs/config.yaml", "msdet/scripts/run_distributed_train.sh"} <= wanted
    assert wanted <= names
    assert {"msdet/commands/main.py", "msdet/common/config.py", "msdet/engine/cli.py"} <= names
    assert all(modes[n] & 0o111 for n in names if n.endswith(".sh"))  # the launchers run
    assert not [n for n in names if n.startswith(("tests/", "msdet/tests/", "msdet/docs/"))]
    assert "msdet = msdet.commands.main:main" in entry_points.decode()


def third_party_imports(folders: list[Path]) -> dict[str, set[str]]:
    """Top-level modules outside the standard library and msdet that the ``.py`` files of
    ``folders`` import anywhere (lazy imports in functions included), each with its files."""
    found: dict[str, set[str]] = {}
    files = [f for folder in folders for f in folder.glob("*.py")]
    files += [f for f in ROOT.glob("*.py")]  # the entry points
    for file in files:
        for node in ast.walk(ast.parse(file.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                if top not in sys.stdlib_module_names and top != "msdet":
                    found.setdefault(top, set()).add(str(file.relative_to(ROOT)))
    return found


def installed_by(requirements_file: Path) -> set[str]:
    """The distributions a ``pip install -r`` of ``requirements_file`` installs: its own
    lines and, as far as this environment has them installed, their requirements in turn."""
    wanted = []
    for line in requirements_file.read_text(encoding="utf-8").splitlines():
        line = line.split("#", 1)[0].strip()
        if line and not line.startswith("-"):
            wanted.append(Requirement(line).name)
    seen: set[str] = set()
    while wanted:
        name = canonicalize_name(wanted.pop())
        if name in seen:
            continue
        seen.add(name)
        try:
            requires = importlib.metadata.requires(name) or []
        except importlib.metadata.PackageNotFoundError:
            continue
        for text in requires:
            req = Requirement(text)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                wanted.append(req.name)
    return seen


def test_every_module_msdet_imports_is_installed_by_its_requirements():
    # A module that only requirements-dev.txt installs works in the tests and fails after a
    # user's pip install (ONNX export and onnxruntime).
    folders = [f for f in msdet_folders() if f.relative_to(ROOT).parts[0] not in NEEDS_THE_ORIGINAL]
    imports = third_party_imports(folders)
    assert {"mindspore", "numpy", "cv2", "onnxruntime"} <= set(imports)
    installed = installed_by(ROOT / "requirements.txt")
    providers = importlib.metadata.packages_distributions()
    # The extras' packages (pip install 'msdet[tracking]') are imported only where a setting
    # asks for them, which the run plan refuses with the pip command when they are missing.
    extras = {
        canonicalize_name(Requirement(r).name)
        for reqs in pyproject()["project"].get("optional-dependencies", {}).values()
        for r in reqs
    }
    missing = {
        module: sorted(files)
        for module, files in imports.items()
        if not {canonicalize_name(d) for d in providers.get(module, [])} & installed
        and canonicalize_name(module) not in extras
    }
    assert not missing, f"imported, not installed by requirements.txt: {missing}"
    at_import = {
        str(file.relative_to(ROOT))
        for folder in folders
        for file in folder.glob("*.py")
        for node in ast.parse(file.read_text(encoding="utf-8")).body
        if isinstance(node, (ast.Import, ast.ImportFrom))
        and any(canonicalize_name((a.name if isinstance(node, ast.Import) else node.module or "")
                                  .split(".")[0]) in extras for a in node.names)
    }  # fmt: skip
    assert not at_import, f"an extra's package imported at module level: {at_import}"
