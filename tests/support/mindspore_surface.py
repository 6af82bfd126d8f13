"""Every MindSpore name msdet's code reaches, read from the code, and whether the installed
MindSpore has it.

A name is reached when a module imports it (``from mindspore.x import Y``), names it through
an imported module (``ms.set_context``, ``ops.AllReduce``, ``nn.Cell``), calls a method of a
MindSpore singleton (``MSContext.get_instance().get_ascend_soc_version()``, also through a
local name the instance was assigned to), or passes a keyword to a MindSpore callable
(``ms.jit(..., backend=...)``). Device-only code is read like the rest: reading does not run
it. Classes that MindSpore's ``_c_expression`` binds only with its Ascend plugin loaded
(absent on a CPU) are looked up in the plugin's libraries instead
(:func:`msdet.engine.runtime.standin.ascend_plugin_binds`).

A use that only some releases reach is marked on its line, ``# mindspore>=2.10``, and is
checked only under those releases (the code must choose by release; the stand-in tests run
both sides).

Not seen: names built at run time (``getattr(ms, name)``) and methods of objects other than
singletons (a Tensor's ``asnumpy``): the code that reaches those runs in the tests.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib
import inspect
import re
from dataclasses import dataclass
from pathlib import Path

ROOT_MODULE = "mindspore"
SINGLETON = "get_instance"
SINCE = re.compile(r"#\s*mindspore>=(\d+)\.(\d+)")


@dataclass(frozen=True)
class Reference:
    """One MindSpore name reached at ``where`` (``file:line``): ``path`` is dotted from
    ``mindspore``; ``member`` a method of the singleton ``path`` names; ``keyword`` a keyword
    passed to the callable ``path`` names."""

    path: str
    where: str
    member: str | None = None
    keyword: str | None = None
    since: tuple[int, int] | None = None  # reached only from this release on (its line says)

    def __str__(self) -> str:
        name = self.path + (f".get_instance().{self.member}" if self.member else "")
        return name + (f"({self.keyword}=...)" if self.keyword else "")


def _chain(node: ast.AST) -> list[str] | None:
    """``a.b.c`` as ["a", "b", "c"]; None for anything else."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        return [node.id, *reversed(parts)]
    return None


def _from_mindspore(node: ast.AST) -> bool:
    """``node`` is ``from mindspore... import ...``."""
    return (
        isinstance(node, ast.ImportFrom)
        and node.level == 0
        and (node.module or "").split(".")[0] == ROOT_MODULE
    )


def _bindings(tree: ast.AST) -> dict[str, str]:
    """Local name -> MindSpore path, from every import of the module (functions' included)."""
    bound: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == ROOT_MODULE:
                    if alias.asname:
                        bound[alias.asname] = alias.name
                    else:
                        bound[ROOT_MODULE] = ROOT_MODULE
        elif _from_mindspore(node):
            for alias in node.names:
                bound[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return bound


def references(path: Path, root: Path) -> list[Reference]:
    """The MindSpore references of one source file."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    bound = _bindings(tree)
    where = str(path.relative_to(root))
    found: list[Reference] = []

    def resolve(node: ast.AST) -> str | None:
        parts = _chain(node)
        if parts and parts[0] in bound:
            return ".".join([bound[parts[0]], *parts[1:]])
        return None

    def singleton_of(node: ast.AST) -> str | None:
        """The class path when ``node`` is ``<MindSpore class>.get_instance()``."""
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            return resolve(node.func.value) if node.func.attr == SINGLETON else None
        return None

    for node in ast.walk(tree):
        if _from_mindspore(node):
            found += [Reference(f"{node.module}.{a.name}", f"{where}:{node.lineno}")
                      for a in node.names]  # fmt: skip
        elif isinstance(node, ast.Import):
            found += [Reference(a.name, f"{where}:{node.lineno}") for a in node.names
                      if a.name.split(".")[0] == ROOT_MODULE]  # fmt: skip
    for scope in [tree, *(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef))]:
        instances = {
            target.id: cls
            for node in ast.walk(scope)
            if isinstance(node, ast.Assign) and (cls := singleton_of(node.value))
            for target in node.targets
            if isinstance(target, ast.Name)
        }
        for node in ast.walk(scope):
            if not isinstance(node, ast.Attribute):
                continue
            line = f"{where}:{node.lineno}"
            cls = singleton_of(node.value)
            if cls is None and isinstance(node.value, ast.Name):
                cls = instances.get(node.value.id)
            if cls is not None:
                found.append(Reference(cls, line, member=node.attr))
            elif (dotted := resolve(node)) is not None:
                found.append(Reference(dotted, line))
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and (dotted := resolve(node.func)) is not None:
            found += [Reference(dotted, f"{where}:{node.lineno}", keyword=k.arg)
                      for k in node.keywords if k.arg]  # fmt: skip
    lines = path.read_text(encoding="utf-8").splitlines()
    found = [_with_since(r, lines) for r in found]
    return sorted(set(found), key=lambda r: (r.where, str(r)))


def _with_since(ref: Reference, lines: list[str]) -> Reference:
    """``ref`` with the release its line says it is reached from (``# mindspore>=X.Y``)."""
    line = lines[int(ref.where.rsplit(":", 1)[1]) - 1]
    marked = SINCE.search(line)
    if not marked:
        return ref
    return dataclasses.replace(ref, since=(int(marked.group(1)), int(marked.group(2))))


def _lookup(path: str):
    """The object MindSpore's ``path`` names; raises AttributeError or ImportError."""
    parts = path.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for name in parts[cut:]:
            try:
                obj = getattr(obj, name)
            except AttributeError:
                obj = importlib.import_module(f"{obj.__name__}.{name}")
        return obj
    raise ImportError(path)


def problem(ref: Reference) -> str | None:
    """Why the installed MindSpore lacks ``ref``; None when it has it."""
    from msdet.engine.runtime.mindspore_compat import installed_version, parse_version
    from msdet.engine.runtime.standin import ascend_plugin_binds

    if ref.since and parse_version(installed_version() or "0.0")[:2] < ref.since:
        return None  # the code reaches it only from that release on
    try:
        obj = _lookup(ref.path)
    except (AttributeError, ImportError):
        name = ref.path.rsplit(".", 1)[-1]
        plugin_only = ref.path.startswith(f"{ROOT_MODULE}._c_expression.")
        member_bound = ref.member is None or ascend_plugin_binds(ref.member)
        if plugin_only and ascend_plugin_binds(name) and member_bound:
            return None
        return f"{ref.where}: {ref} is not in this MindSpore"
    if ref.member is not None and not hasattr(obj, ref.member):
        return f"{ref.where}: {ref} is not in this MindSpore"
    if ref.keyword is not None and callable(obj):
        try:
            params = inspect.signature(obj).parameters
        except (TypeError, ValueError):  # a builtin without a signature
            return None
        kinds = {p.kind for p in params.values()}
        if ref.keyword not in params and inspect.Parameter.VAR_KEYWORD not in kinds:
            return f"{ref.where}: {ref}: this MindSpore's {ref.path} takes no {ref.keyword}"
    return None
