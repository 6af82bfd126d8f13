"""Every MindSpore name msdet's code reaches exists in the installed MindSpore
(``tests.support.mindspore_surface``): CI runs this file under each supported release
(dev/check_mindspore.sh), so a name one release lacks fails before a card meets it."""

from __future__ import annotations

from pathlib import Path

from tests.support import PACKAGES
from tests.support import ROOT as REPO_ROOT
from tests.support.mindspore_surface import Reference, problem, references

ROOT = Path(REPO_ROOT)


def product_files() -> list[Path]:
    """msdet's modules: the packages and the root entry points (not the tests)."""
    files = sorted(ROOT.glob("*.py"))
    return files + [p for package in PACKAGES for p in sorted((ROOT / package).rglob("*.py"))]


def test_every_mindspore_name_msdet_reaches_is_in_this_release():
    refs = [ref for path in product_files() for ref in references(path, ROOT)]
    # the device-only paths are read too: the chip query, the precision read-back, the
    # float-status primitives, the collectives
    names = {str(r) for r in refs}
    assert {"mindspore._c_expression.MSContext.get_instance().get_ascend_soc_version",
            "mindspore.ops.operations.math_ops.NPUClearFloatStatusV2",
            "mindspore.communication.init", "mindspore.jit(jit_level=...)"} <= names  # fmt: skip
    assert len(refs) > 500
    assert [p for ref in refs if (p := problem(ref))] == []


def test_the_reader_follows_imports_singletons_and_keywords(tmp_path):
    source = tmp_path / "m.py"
    source.write_text(
        "import mindspore as ms\n"
        "from mindspore import ops as o\n"
        "def f():\n"
        "    from mindspore._c_expression import MSContext\n"
        "    ctx = MSContext.get_instance()\n"
        "    ctx.no_such_query('x')\n"
        "    ms.jit(f, jit_level='O0')\n"
        "    ms.set_seed(0, no_such_keyword=1)\n"
        "    ctx.only_in_a_future_release()  # mindspore>=9.9\n"
        "    return o.AllReduce, ms.no_such_function\n"
    )
    refs = references(source, tmp_path)
    found = {str(r): r for r in refs}
    assert set(found) == {
        "mindspore.ops",
        "mindspore._c_expression.MSContext",
        "mindspore._c_expression.MSContext.get_instance().no_such_query",
        "mindspore._c_expression.MSContext.get_instance",
        "mindspore.jit",
        "mindspore.jit(jit_level=...)",
        "mindspore._c_expression.MSContext.get_instance().only_in_a_future_release",
        "mindspore.set_seed",
        "mindspore.set_seed(no_such_keyword=...)",
        "mindspore.ops.AllReduce",
        "mindspore.no_such_function",
        "mindspore",
    }
    wrong = {p for r in refs if (p := problem(r))}
    assert wrong == {
        "m.py:6: mindspore._c_expression.MSContext.get_instance().no_such_query is not in this "
        "MindSpore",
        "m.py:8: mindspore.set_seed(no_such_keyword=...): this MindSpore's mindspore.set_seed "
        "takes no no_such_keyword",
        "m.py:10: mindspore.no_such_function is not in this MindSpore",
    }
    assert found["mindspore._c_expression.MSContext.get_instance().only_in_a_future_release"
                 ].since == (9, 9)  # fmt: skip
    assert problem(Reference("mindspore.set_context", "x:1", keyword="jit_config")) is None
