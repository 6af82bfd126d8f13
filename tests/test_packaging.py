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
import re
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
# What the tree holds besides msdet: not searched for packages or data.
NOT_MSDET = ("tests", "docs", "runs", "outputs", "multirun", "build")
# msdet's folders that stay in the repository: importable from a clone (the root is the
# package msdet), not in the wheel: the maintainer tools and the benchmarks.
CLONE_ONLY = ("dev", "bench")
# msdet's folders that also import the PyTorch original (the parity tools), which README and
# requirements-dev.txt install beside msdet.
NEEDS_THE_ORIGINAL = ("porting",)


def pyproject() -> dict:
    with open(ROOT / "pyproject.toml", "rb") as f:
        return tomllib.load(f)


def package_folder(package: str) -> Path:
    """The folder of a package (``msdet.tools.selftest``: ``tools/selftest``) in the tree
    (pyproject maps ``msdet`` to the root)."""
    assert package.split(".")[0] == "msdet", package
    return ROOT.joinpath(*package.split(".")[1:])


def msdet_folders() -> list[Path]:
    """Every folder of msdet's wheel in the tree (hidden ones, caches, non-msdet and clone-only
    ones aside)."""
    found = []
    for top in sorted(ROOT.iterdir()):
        if not top.is_dir() or top.name.startswith(".") or top.name in NOT_MSDET + CLONE_ONLY:
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
        if rel.parts[0] not in roots:
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


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """A wheel of this tree, built as ``pip wheel .`` builds it (from a copy of everything of
    msdet, the clone-only folders included: pyproject.toml decides what ships)."""
    tmp_path = tmp_path_factory.mktemp("wheel")
    # Built from a copy: setuptools writes build/ and the egg-info folder into its source.
    source = tmp_path / "src"
    shutil.copytree(
        ROOT,
        source,
        ignore=shutil.ignore_patterns(".*", "__pycache__", *NOT_MSDET, "*.egg-info"),
    )
    assert (source / "dev" / "test.sh").is_file() and (source / "bench").is_dir()
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
         "-w", str(tmp_path / "dist"), str(source)],
        check=True, capture_output=True, timeout=300,
    )  # fmt: skip
    (built,) = (tmp_path / "dist").glob("msdet-*.whl")
    return built


def test_the_wheel_holds_the_configs_scripts_kernels_and_the_command(wheel):
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


def test_the_wheel_holds_no_developer_script_extractor_or_benchmark(wheel):
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        runtime_tables = z.read("msdet/tools/chip_check/cann_tables.py").decode()
    files = {n.rsplit("/", 1)[-1] for n in names}
    assert not [n for n in names if n.startswith(("msdet/dev/", "msdet/bench/"))]
    assert not [f for f in files if re.fullmatch(r"(test|lint|check_\w+)\.sh", f)]
    assert not {"select_format.py", "ms_mapping.py", "convergence.py"} & files
    # The launchers ship, and scripts/ holds nothing else but what they share.
    assert {n for n in names if n.startswith("msdet/scripts/") and n.endswith(".sh")} == {
        f"msdet/scripts/{name}"
        for name in ("run_standalone_train.sh", "run_distributed_train.sh", "run_eval.sh",
                     "docker_run.sh", "common.sh")
    }  # fmt: skip
    # The chip check's tables: what it loads and checks by, not the extractor of a CANN install.
    functions = {
        node.name for node in ast.parse(runtime_tables).body if isinstance(node, ast.FunctionDef)
    }
    assert functions == {"load_tables", "check"}
    assert "msdet/tools/chip_check/data/cann-8.1.RC1.json" in names


def test_a_wheel_install_gives_msdet_its_version_and_the_command(wheel, tmp_path):
    import msdet

    site = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "-q",
         "--target", str(site), str(wheel)],
        check=True, capture_output=True, timeout=300,
    )  # fmt: skip

    # Only the install on the path, run from outside the repository: python -S reads no .pth
    # file, so an editable install of a clone in this environment cannot answer instead
    # (importing msdet, its version and the command's --version need nothing but msdet).
    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-S", *args], cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(site)},
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip

    out = run("-c", "import msdet; print(msdet.__version__); print(msdet.__file__)")
    assert out.stdout.splitlines() == [msdet.__version__, str(site / "msdet" / "__init__.py")]
    assert re.fullmatch(r"\d+\.\d+\.\d+", msdet.__version__)
    assert wheel.name.startswith(f"msdet-{msdet.__version__}-")
    assert run(str(site / "bin" / "msdet"), "--version").stdout == f"msdet {msdet.__version__}\n"
    # The maintainer tools and the benchmarks are the clone's only.
    for clone_only in ("msdet.dev", "msdet.bench"):
        missing = run("-c", f"import {clone_only}")
        assert missing.returncode == 1
        assert f"No module named '{clone_only}'" in missing.stderr


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
