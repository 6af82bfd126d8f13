"""``msdet COMMAND [args ...]``: the console script an install puts on the PATH.

Each command is the ``main(argv)`` of one module, given the arguments after the command's
name: ``msdet train model=yolox_s`` runs :func:`msdet.commands.train.main` with
``["model=yolox_s"]``, exactly as ``python train.py model=yolox_s`` from a clone. The
command's own exit status is msdet's. Only the chosen command's module is imported, so
``msdet --help`` answers at once and no command loads another's dependencies.

:data:`SUBCOMMANDS` is the one way in: the four entry points are modules of this package, the
tools (``check``, ``doctor``, ``chip-check``, ``selftest``, ``convert``, ``compare``) the
``main`` of the module ``python -m`` runs them as, each reached from here, none through a
module of its own in ``commands/``. ``msdet --version`` prints ``msdet.__version__``.
"""

from __future__ import annotations

import difflib
import importlib
import sys
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Subcommand:
    """One ``msdet`` command: the module whose ``main(argv) -> int`` runs it, and one line
    on what it does."""

    module: str
    summary: str


SUBCOMMANDS: dict[str, Subcommand] = {
    "train": Subcommand("msdet.commands.train", "train a detector; settings as key=value"),
    "eval": Subcommand(
        "msdet.commands.eval", "COCO mAP of a checkpoint or an exported model on a val split"
    ),
    "predict": Subcommand(
        "msdet.commands.predict", "detect objects in images, folders, globs, videos, a camera"
    ),
    "export": Subcommand(
        "msdet.commands.export", "a checkpoint to MINDIR or ONNX, checked against it"
    ),
    "check": Subcommand("msdet.data.check", "what training will see in a dataset"),
    "doctor": Subcommand(
        "msdet.tools.doctor", "this environment: MindSpore, CANN, driver, devices, CPU kernels"
    ),
    "chip-check": Subcommand(
        "msdet.tools.chip_check.__main__",
        "every operator of msdet's graphs against Ascend chips' CANN tables, on CPU",
    ),
    "selftest": Subcommand(
        "msdet.tools.selftest.report", "on a card: every device path against the host"
    ),
    "convert": Subcommand(
        "msdet.models.convert_pytorch", "a PyTorch YOLOX .pth to a msdet checkpoint"
    ),
    "compare": Subcommand(
        "msdet.porting.compare", "msdet against the PyTorch original, module by module"
    ),
}


def usage() -> str:
    """``msdet --help``: one line per command, then where the rest is."""
    width = max(len(name) for name in SUBCOMMANDS)
    lines = ["usage: msdet COMMAND [args ...]", "", "commands:"]
    lines += [f"  {name:<{width}}  {sub.summary}" for name, sub in SUBCOMMANDS.items()]
    lines += [
        "",
        "msdet COMMAND --help: what the command takes, with examples.",
        "Guides: README.md and docs/ of the msdet repository.",
    ]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``msdet`` with ``argv`` (default: the process's arguments); the command's exit
    status. ``--help`` prints the commands (0); no command, or an unknown one, prints them
    with the error (2)."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] in (["-h"], ["--help"]):
        print(usage())
        return 0
    if args[:1] == ["--version"]:
        from msdet import __version__

        print(f"msdet {__version__}")
        return 0
    if not args:
        print(f"msdet: error: a command is needed\n\n{usage()}", file=sys.stderr)
        return 2
    name, rest = args[0], args[1:]
    sub = SUBCOMMANDS.get(name)
    if sub is None:
        close = difflib.get_close_matches(name, SUBCOMMANDS, n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        print(f"msdet: error: unknown command {name!r}{hint}\n\n{usage()}", file=sys.stderr)
        return 2
    command = importlib.import_module(sub.module)
    # As `python -m` would: the program name the command's own --help and errors show.
    saved, sys.argv = sys.argv, [f"msdet {name}", *rest]
    try:
        return command.main(rest)
    finally:
        sys.argv = saved


if __name__ == "__main__":
    sys.exit(main())
