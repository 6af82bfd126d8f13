"""The ``msdet`` command: one line per command, each command reached with its own arguments
and exit status, an unknown command refused with the list."""

from __future__ import annotations

import ast
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from msdet.commands.main import SUBCOMMANDS, main, usage
from msdet.engine.cli import ENTRY_POINTS
from tests.support import ROOT


def test_help_lists_every_command_on_one_line(capsys):
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    assert out == usage() + "\n"
    lines = out.splitlines()
    assert lines[0] == "usage: msdet COMMAND [args ...]"
    listed = [line.split()[0] for line in lines if line.startswith("  ")]
    assert listed == list(SUBCOMMANDS)
    assert {"train", "eval", "predict", "export", "check", "doctor", "chip-check",
            "selftest", "convert", "compare"} <= set(listed)  # fmt: skip
    assert "msdet COMMAND --help" in out and "docs/" in out
    assert len(lines) < 20


def test_no_command_is_an_error_with_the_list(capsys):
    assert main([]) == 2
    err = capsys.readouterr().err
    assert err.startswith("msdet: error: a command is needed") and "chip-check" in err


def test_an_unknown_command_is_refused_with_the_closest_one(capsys):
    assert main(["trian", "train.epochs=1"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("msdet: error: unknown command 'trian' (did you mean train?)")
    assert "  selftest" in err
    assert main(["--epochs"]) == 2


def test_version_is_the_packages(capsys):
    import msdet
    from msdet.models.description import MSDET_VERSION

    assert main(["--version"]) == 0
    assert capsys.readouterr().out == f"msdet {msdet.__version__}\n"
    assert MSDET_VERSION == msdet.__version__  # what checkpoints record


def _main_parameters(module: str) -> list[str]:
    """The parameters of ``module``'s top-level ``main`` (read, not imported)."""
    tree = ast.parse(Path(importlib.util.find_spec(module).origin).read_text())
    mains = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "main"]
    assert len(mains) == 1, module
    return [a.arg for a in mains[0].args.args]


@pytest.mark.parametrize("name", sorted(SUBCOMMANDS))
def test_every_command_is_a_main_that_takes_argv(name):
    assert _main_parameters(SUBCOMMANDS[name].module) == ["argv"]


def test_the_entry_points_are_the_commands_package():
    for command in ENTRY_POINTS:
        assert SUBCOMMANDS[command].module == f"msdet.commands.{command}"
        wrapper = (Path(ROOT) / f"{command}.py").read_text()
        assert f"from msdet.commands.{command} import main" in wrapper


def test_train_help_is_the_commands_help(capsys):
    with pytest.raises(SystemExit) as stop:
        main(["train", "--help"])
    assert stop.value.code == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0] == "usage: msdet train [key=value ...]"
    assert "  train.epochs=" in out and "model=yolox_nano" in out


def test_a_bad_setting_exits_2_before_any_folder(tmp_path, monkeypatch, caplog):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as stop:
        main(["train", "train.epoch=3"])
    assert stop.value.code == 2
    assert "unknown setting train.epoch; did you mean train.epochs?" in caplog.text
    assert list(tmp_path.iterdir()) == []


def test_a_tool_gets_the_rest_of_the_command_line_and_its_name(capsys):
    with pytest.raises(SystemExit) as stop:
        main(["check", "--help"])
    assert stop.value.code == 0
    assert capsys.readouterr().out.startswith("usage: msdet check [-h] [--out OUT]")
    assert sys.argv[0] != "msdet check"  # put back afterwards
    with pytest.raises(SystemExit) as stop:
        main(["doctor", "--help"])
    assert stop.value.code == 0
    assert capsys.readouterr().out.startswith("usage: python -m msdet.tools.doctor [-h]")
    with pytest.raises(SystemExit) as stop:
        main(["doctor", "--fix"])
    assert stop.value.code == 2
    assert "unrecognized arguments: --fix" in capsys.readouterr().err


def test_the_command_line_loads_no_mindspore_before_a_command_runs():
    code = (
        "import sys; from msdet.commands.main import main;"
        "assert main(['--help']) == 0; print('mindspore' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert out.stdout.splitlines()[-1] == "False"
