"""Every name the docs and comments give exists: each ``python -m`` module, each dotted
name such as ``msdet.engine.cli`` (and ``msdet.engine.cli.run_command``), each bare module
name such as ``engine.cli``, each repository path such as ``engine/training/step.py``, each
link or named section of a markdown file, in README.md, BENCHMARKS.md, CHANGELOG.md,
docs/*.md, the comments of the YAML configs and the docstrings, comments and messages of the
Python sources; and none names Hydra's run folders, which msdet does not use.

Pure text and ``ast``: a module exists when its file does (``msdet.engine.cli``:
``engine/cli.py``; a package: its ``__init__.py``), an attribute when that file defines it;
nothing of msdet is imported but the schema's key list (``data.img_size`` is a key, not a
module). CHANGELOG.md's released sections are history: they may name what has since moved,
and only their links are checked.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
import io
import os
import re
import tokenize
from dataclasses import dataclass
from pathlib import Path

from msdet.common.schema import SCHEMA
from tests.support import ROOT as REPO_ROOT

ROOT = Path(REPO_ROOT)
# msdet's packages: the first part of a bare module name (``engine.cli``).
PACKAGES = ("common", "data", "models", "ops", "engine", "tools", "porting", "bench", "dev")
# The folders a repository path starts with (``configs/train/shapes.yaml``).
FOLDERS = (*PACKAGES, "configs", "scripts", "docs", "tests")
MARKDOWN = ("README.md", "BENCHMARKS.md", "CHANGELOG.md", "docs/*.md")
# Python sources whose string literals are messages a user reads (the tests' strings are data).
PRODUCT = ("*.py", *(f"{p}/**/*.py" for p in PACKAGES))

PYTHON_M = re.compile(r"\bpython3?\s+-m\s+([A-Za-z_][\w.]*\w)")
PYTHON_FILE = re.compile(r"\bpython3?\s+([\w./-]+\.py)\b")
DOTTED = re.compile(r"(?<![\w.])msdet(?:\.[A-Za-z_]\w*)+")
BARE = re.compile(rf"(?<![\w./-])(?:{'|'.join(PACKAGES)})(?:\.[A-Za-z_]\w*)+")
REPO_PATH = re.compile(rf"(?<![\w./~$-])(?:{'|'.join(FOLDERS)})/[\w./*-]*")
# Hydra's own settings and its dated run folders (msdet's are runs/<command>/exp*).
HYDRA = re.compile(r"\bhydra\.[a-z_.]*[a-z_]|(?<![\w./-])outputs/(?:<|\d{4}-)")
SECTION = re.compile(
    r"\b(README|BENCHMARKS|CHANGELOG|docs/[\w-]+)(?:\.md)?(?:'s)?,? (?:section )?\"([^\"]+)\""
)
# A file and what it defines: `ops/nms.py` (`BatchedNMS`, `ASCEND_MAX_NMS_BOXES`).
DEFINES = re.compile(rf"`((?:{'|'.join(FOLDERS)})/[\w/]+\.py)` \(([^)]*)\)")
LINK = re.compile(r"\]\(([^)\s]+)\)")
ANCHORED = re.compile(r"(?<![\w./(-])((?:docs/)?[\w-]+\.md)#([\w-]+)")
# File names and foreign modules that look like bare msdet names (``models.py``, ``ops.Cast``).
NOT_MODULES = re.compile(
    r"\.(py|md|yaml|json|jsonl|sh|txt|cc|h|pkl|ckpt|onnx|mindir|jpg|png|csv)$|^ops\.[A-Z]"
)


@dataclass(frozen=True)
class Text:
    """A piece of text to check: its file (relative to the root), its first line, and
    whether names in it must exist (``history``: a released CHANGELOG section, links only)."""

    path: str
    line: int
    text: str
    history: bool = False
    message: bool = False  # a string literal of the code: no prose checks (hydra hints)


def markdown_texts(path: Path, root: Path = ROOT) -> list[Text]:
    """The file, in sections: CHANGELOG.md's released ones (``## 0.2.0 ...``) are history."""
    rel = str(path.relative_to(root))
    lines = path.read_text().splitlines(keepends=True)
    if path.name != "CHANGELOG.md":
        return [Text(rel, 1, "".join(lines))]
    texts, start = [], 0
    for i, line in enumerate([*lines, "## end"]):
        if line.startswith("## ") and i > start:
            released = re.match(r"## \d", lines[start]) is not None
            texts.append(Text(rel, start + 1, "".join(lines[start:i]), history=released))
            start = i
    return texts


def yaml_comments(path: Path, root: Path = ROOT) -> list[Text]:
    """The comments of a YAML file, one Text per line."""
    rel = str(path.relative_to(root))
    return [
        Text(rel, n, line.split("#", 1)[1])
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if "#" in line
    ]


def python_texts(path: Path, root: Path = ROOT, strings: bool = False) -> list[Text]:
    """Docstrings and comments of a Python file; with ``strings`` its other string literals too
    (the messages a user reads)."""
    rel = str(path.relative_to(root))
    source = path.read_text()
    texts = [
        Text(rel, tok.start[0], tok.string)
        for tok in tokenize.generate_tokens(io.StringIO(source).readline)
        if tok.type == tokenize.COMMENT
    ]
    docstrings, literals = set(), []
    for node in ast.walk(_tree(path)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            first = node.body[0] if node.body else None
            if (
                isinstance(first, ast.Expr)
                and isinstance(first.value, ast.Constant)
                and isinstance(first.value.value, str)
            ):
                docstrings.add(id(first.value))
                texts.append(Text(rel, first.value.lineno, first.value.value))
        elif strings and isinstance(node, ast.Constant) and isinstance(node.value, str):
            literals.append(node)
    texts += [
        Text(rel, node.lineno, node.value, message=True)
        for node in literals
        if id(node) not in docstrings
    ]
    return texts


def every_text(root: Path = ROOT) -> list[Text]:
    """What this file checks: markdown, the configs' comments, the Python sources."""
    texts = [
        t
        for pattern in MARKDOWN
        for p in sorted(root.glob(pattern))
        for t in markdown_texts(p, root)
    ]
    texts += [t for p in sorted((root / "configs").rglob("*.yaml")) for t in yaml_comments(p, root)]
    product = {p for pattern in PRODUCT for p in root.glob(pattern)}
    for folder in ("", *PACKAGES, "tests"):
        for path in sorted((root / folder).glob("*.py" if not folder else "**/*.py")):
            texts += python_texts(path, root, strings=path in product)
    return texts


# --- what exists ----------------------------------------------------------------------------


def module_file(parts: list[str], root: Path = ROOT) -> Path | None:
    """The file of the msdet module whose name is ``msdet`` and ``parts`` (none: the package
    itself, the root's ``__init__.py``), or None."""
    if not parts:
        return root / "__init__.py" if (root / "__init__.py").is_file() else None
    base = root.joinpath(*parts)
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


@functools.cache
def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(), str(path))


def _bound(statements: list[ast.stmt]) -> dict[str, ast.AST]:
    """Names bound by these statements (and the ``if``/``try`` blocks among them)."""
    names: dict[str, ast.AST] = {}
    for node in statements:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names[node.name] = node
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                for name in ast.walk(target):
                    if isinstance(name, ast.Name):
                        names[name.id] = node
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                names[(alias.asname or alias.name).split(".")[0]] = node
        elif isinstance(node, (ast.If, ast.Try, ast.With)):
            blocks = [node.body, getattr(node, "orelse", []), getattr(node, "finalbody", [])]
            blocks += [h.body for h in getattr(node, "handlers", [])]
            for block in blocks:
                names.update(_bound(block))
    return names


def _members(cls: ast.ClassDef) -> set[str]:
    """A class's attributes: its body's names and the ``self.x`` its methods assign."""
    members = set(_bound(cls.body))
    for node in ast.walk(cls):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.ctx, ast.Store)
            and isinstance(node.value, ast.Name)
            and node.value.id == "self"
        ):
            members.add(node.attr)
    return members


def missing_msdet_name(name: str, root: Path = ROOT, runnable: bool = False) -> str | None:
    """Why a dotted msdet name (a module, a module's attribute, a class's member) does not
    exist, or None when it does. The longest prefix that is a module file is the module; the
    next part must be defined in it, and a part after a class must be one of its members.
    ``runnable``: ``python -m`` must be able to run it."""
    parts = name.split(".")[1:]
    for k in range(len(parts), -1, -1):
        path = module_file(parts[:k], root)
        if path is not None and (k or parts and not runnable):
            break
    else:
        shown = f"python -m {name}" if runnable else name
        return f"{shown}: no module msdet.{parts[0]}" if parts else None
    rest = parts[k:]
    shown = path.relative_to(root)
    if runnable:
        if rest:
            return f"python -m {name}: no module {name} ({shown} is msdet.{'.'.join(parts[:k])})"
        if path.name == "__init__.py":
            if not (path.parent / "__main__.py").is_file():
                return f"python -m {name}: {shown.parent} has no __main__.py"
        elif '__name__ == "__main__"' not in path.read_text():
            return f"python -m {name}: {shown} runs nothing as a script"
        return None
    if not rest:
        return None
    names = _bound(_tree(path).body)
    if rest[0] not in names:
        return f"{name}: {shown} defines no {rest[0]}"
    node = names[rest[0]]
    if len(rest) > 1 and isinstance(node, ast.ClassDef) and rest[1] not in _members(node):
        return f"{name}: {rest[0]} in {shown} has no {rest[1]}"
    return None


def missing_module(name: str, root: Path = ROOT) -> str | None:
    """Why ``name`` cannot run as ``python -m``'s module, or None: msdet's own by its files, another
    package's by its import spec (found without importing it) and its folders."""
    if name == "msdet" or name.startswith("msdet."):
        return missing_msdet_name(name, root, runnable=True)
    top, *rest = name.split(".")
    spec = importlib.util.find_spec(top)
    if spec is None:
        return f"python -m {name}: no module {top} installed"
    places = [Path(p) for p in (spec.submodule_search_locations or [])]
    for i, part in enumerate(rest):
        found = [p for p in places if (p / f"{part}.py").is_file() or (p / part).is_dir()]
        if not found:
            return f"python -m {name}: no module {'.'.join([top, *rest[: i + 1]])}"
        places = [p / part for p in found]
    return None


def missing_definitions(path: str, listed: str, root: Path = ROOT) -> list[str]:
    """The names among ``listed`` (backticked, as in ``(`BatchedNMS`, `nms`)``) that the
    Python file ``path`` defines neither at its top level nor in one of its classes
    (``Runtime.sink_effective``: that class's member)."""
    file = root / path
    if not file.is_file():
        return []  # the path check reports it
    names = _bound(_tree(file).body)
    members = {
        m for node in names.values() if isinstance(node, ast.ClassDef) for m in _members(node)
    }
    wrong = []
    for name in re.findall(r"`([A-Za-z_][\w.]*)`", listed):
        first, _, member = name.partition(".")
        node = names.get(first)
        if node is None and (member or first not in members):
            wrong.append(f"{path} defines no {name}")
        elif (
            member and isinstance(node, ast.ClassDef) and member.split(".")[0] not in _members(node)
        ):
            wrong.append(f"{path}: {first} has no {member}")
    return wrong


def missing_bare_name(name: str, root: Path = ROOT) -> str | None:
    """Why ``engine.cli`` (a name of msdet without ``msdet.``) exists neither as a module or
    attribute nor, for ``data.img_size``, as a configuration key; None when it does."""
    name = name.removesuffix("()")
    if NOT_MODULES.search(name):
        return None
    if missing_msdet_name(f"msdet.{name}", root) is None:
        return None
    if name in SCHEMA or any(key.startswith(name + ".") for key in SCHEMA):
        return None
    return f"{name}: no such msdet module or attribute (nor a config key)"


def missing_path(path: str, root: Path = ROOT, here: Path | None = None) -> str | None:
    """Why a repository path (``engine/training/step.py``, ``configs/*/shapes.yaml``) is absent
    from the root and from ``here`` (the folder of the file that names it: a package's
    ``data/`` is named from inside the package)."""
    path = path.rstrip(".,:;")
    folders = [root] if here is None else [root, here]
    if "*" in path:
        return None if any(any(f.glob(path)) for f in folders) else f"{path}: matches no file"
    return None if any((f / path).exists() for f in folders) else f"{path}: no such file or folder"


def headings(path: Path) -> list[str]:
    """The markdown headings of a file, outside code blocks."""
    found, fenced = [], False
    for line in path.read_text().splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and re.match(r"#{1,6} ", line):
            found.append(line.lstrip("#").strip())
    return found


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every anchor of a markdown file (a repeated heading's second is ``<slug>-1``)."""
    seen: dict[str, int] = {}
    found = set()
    for heading in headings(path):
        s = slug(heading)
        found.add(s if s not in seen else f"{s}-{seen[s]}")
        seen[s] = seen.get(s, 0) + 1
    return found


def missing_anchor(target: Path, anchor: str, root: Path = ROOT) -> str | None:
    """Why ``target#anchor`` leads nowhere, or None."""
    shown = os.path.relpath(target.resolve(), root.resolve())
    if not target.is_file():
        return f"{shown}: no such file"
    if anchor and anchor not in anchors(target):
        return f"{shown}#{anchor}: no such section"
    return None


def missing_section(doc: str, title: str, root: Path = ROOT) -> str | None:
    """Why ``README "Quick start"`` (a section named in prose) is not a heading of that file;
    a heading that starts with the words given counts."""
    target = root / f"{doc}.md"
    if not target.is_file():
        return f"{doc}.md: no such file"
    if any(h.lower().startswith(title.lower()) for h in headings(target)):
        return None
    return f'{doc}.md has no section "{title}"'


# --- the check ------------------------------------------------------------------------------


def problems(text: Text, root: Path = ROOT) -> list[str]:
    """Every name in ``text`` that does not exist, as ``file:line: why``."""
    found: list[tuple[int, str | None]] = []
    body = text.text
    here = (root / text.path).parent
    for match in LINK.finditer(body) if text.path.endswith(".md") else ():
        target = match.group(1)
        if re.match(r"[a-z]+:", target):
            continue  # a web address
        file, _, anchor = target.partition("#")
        path = here / file if file else root / text.path
        found.append((match.start(), missing_anchor(path, anchor, root)))
    if not text.history:
        for match in ANCHORED.finditer(body):
            found.append(
                (match.start(), missing_anchor(root / match.group(1), match.group(2), root))
            )
        run = {}
        for match in PYTHON_M.finditer(body):
            run[match.start(1)] = missing_module(match.group(1), root)
            found.append((match.start(), run[match.start(1)]))
        for match in PYTHON_FILE.finditer(body):
            if not (root / match.group(1)).is_file():
                found.append((match.start(), f"python {match.group(1)}: no such file"))
        for match in DOTTED.finditer(body):
            if match.start() not in run:  # checked above as the module of a command
                found.append((match.start(), missing_msdet_name(match.group(0), root)))
        for match in BARE.finditer(body):
            found.append((match.start(), missing_bare_name(match.group(0), root)))
        for match in REPO_PATH.finditer(body):
            found.append((match.start(), missing_path(match.group(0), root, here)))
        for match in DEFINES.finditer(body):
            found += [(match.start(), why) for why in missing_definitions(*match.groups(), root)]
        for match in SECTION.finditer(body):
            found.append((match.start(), missing_section(match.group(1), match.group(2), root)))
        if not text.message:
            for match in HYDRA.finditer(body):
                found.append(
                    (
                        match.start(),
                        f"{match.group(0)}: Hydra's, not msdet's (runs/<command>/exp*, run.dir=)",
                    )
                )
    return [
        f"{text.path}:{text.line + body.count(chr(10), 0, start)}: {why}"
        for start, why in found
        if why is not None
    ]


def test_every_name_in_the_docs_and_comments_exists():
    texts = every_text()
    assert len({t.path for t in texts}) > 250
    assert [p for text in texts for p in problems(text)] == []


def write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_a_doc_that_names_what_does_not_exist_fails(tmp_path):
    write(
        tmp_path,
        {
            "engine/__init__.py": "",
            "engine/cli.py": "class Run:\n    def __init__(self):\n        self.dir = 1\n\n\ndef run_command():\n    pass\n",
            "engine/tool.py": 'if __name__ == "__main__":\n    pass\n',
            "__init__.py": '__version__ = "1.0"\n',
            "README.md": '# T\n\n## Quick start\n\nSee docs/guide.md and README "Quick start".\n',
            "docs/guide.md": (
                "# Guide\n\n"
                "`python -m msdet.engine.tool`, `msdet.engine.cli.run_command`, `msdet.engine.cli.Run.dir`, `msdet.__version__`,\n"
                "`engine.cli`, `engine/cli.py` (`run_command`, `Run.dir`), [up](../README.md#quick-start).\n"
                "`python -m msdet.engine.gone`\n"
                "`python -m msdet.engine.cli`\n"
                "msdet.engine.cli.nothing and msdet.engine.cli.Run.nothing and msdet.nothing\n"
                "``engine.gone`` and engine/gone.py\n"
                "`engine/cli.py` (`run`)\n"
                "[x](../README.md#nowhere), [y](other.md)\n"
                'README "Missing", hydra.run.dir=outputs/x\n'
            ),
        },
    )
    found = sorted(p for text in every_text(tmp_path) for p in problems(text, tmp_path))
    # Lines 3 and 4 and README.md name what exists: nothing from them.
    assert found == [
        "docs/guide.md:10: README.md#nowhere: no such section",
        "docs/guide.md:10: docs/other.md: no such file",
        'docs/guide.md:11: README.md has no section "Missing"',
        "docs/guide.md:11: hydra.run.dir: Hydra's, not msdet's (runs/<command>/exp*, run.dir=)",
        "docs/guide.md:5: python -m msdet.engine.gone: no module msdet.engine.gone (engine/__init__.py is msdet.engine)",
        "docs/guide.md:6: python -m msdet.engine.cli: engine/cli.py runs nothing as a script",
        "docs/guide.md:7: msdet.engine.cli.Run.nothing: Run in engine/cli.py has no nothing",
        "docs/guide.md:7: msdet.engine.cli.nothing: engine/cli.py defines no nothing",
        "docs/guide.md:7: msdet.nothing: __init__.py defines no nothing",
        "docs/guide.md:8: engine.gone: no such msdet module or attribute (nor a config key)",
        "docs/guide.md:8: engine/gone.py: no such file or folder",
        "docs/guide.md:9: engine/cli.py defines no run",
    ]


def test_released_changelog_sections_are_history_but_their_links_must_work(tmp_path):
    write(
        tmp_path,
        {
            "CHANGELOG.md": (
                "# Changelog\n\n## Unreleased\n\n- `python -m msdet.tools.gone`\n\n"
                "## 0.1.0 (2026-12-05)\n\n- `python -m msdet.tools.gone`, [x](docs/gone.md)\n"
            ),
        },
    )
    texts = every_text(tmp_path)
    assert [t.history for t in texts] == [False, False, True]
    found = [p for text in texts for p in problems(text, tmp_path)]
    assert found == [
        "CHANGELOG.md:5: python -m msdet.tools.gone: no module msdet.tools",
        "CHANGELOG.md:9: docs/gone.md: no such file",
    ]


def test_python_docstrings_comments_and_messages_are_read_test_data_is_not(tmp_path):
    write(
        tmp_path,
        {
            "data/__init__.py": "",
            "data/load.py": (
                '"""Reads what ``engine.gone`` writes."""\n\n'
                "# see engine/gone.py\n"
                'HINT = "run python -m msdet.data.gone"\n'
                'KEY = "data.img_size"\n'
            ),
            "tests/test_load.py": '"""Tests of data.gone."""\n\nBAD = "msdet.data.gone"\n',
        },
    )
    found = [p for text in every_text(tmp_path) for p in problems(text, tmp_path)]
    assert sorted(found) == [
        "data/load.py:1: engine.gone: no such msdet module or attribute (nor a config key)",
        "data/load.py:3: engine/gone.py: no such file or folder",
        "data/load.py:4: python -m msdet.data.gone: no module msdet.data.gone (data/__init__.py is msdet.data)",
        "tests/test_load.py:1: data.gone: no such msdet module or attribute (nor a config key)",
    ]


def test_anchors_are_githubs():
    assert slug("The default run (the same Zen 4 EPYC, 2026-12-06)") == (
        "the-default-run-the-same-zen-4-epyc-2026-12-06"
    )
    assert slug("From PyTorch, onto Ascend") == "from-pytorch-onto-ascend"
    assert slug("`msdet.tools.doctor`: a verdict") == "msdettoolsdoctor-a-verdict"
