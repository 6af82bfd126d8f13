"""``python -m msdet.tools.selftest``: the command line, in a fresh process."""

from __future__ import annotations

from tests.support import run_python


def test_the_command_says_what_it_takes():
    out = run_python(["-m", "msdet.tools.selftest", "--help"])
    assert out.startswith("usage:")
    for option in ("--size", "--cards", "--only", "--report", "--keep"):
        assert option in out
    assert "--device-checks" not in out  # the internal switches stay out of the help
