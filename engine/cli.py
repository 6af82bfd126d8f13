"""What every entry point (``msdet train|eval|predict|export``, ``python train.py`` ...) does
around its work.

:func:`run_command` reads the command line (``--help``, ``key=value`` settings), composes
and checks the config (:func:`msdet.common.config.load_config`: a bad key or value stops
here, before any folder exists), claims the run folder (created, locked, checked by the
command's own ``accept`` rule, and only then written: the log file and ``config.yaml``,
the latter once the command's own checks passed when it decides late),
runs the command, and reports a user's mistake in one line. A command that fails before
producing anything leaves no folder behind.

Free of MindSpore imports: it runs before :func:`msdet.engine.runtime.process.setup_runtime`.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from msdet.common import logs
from msdet.common.config import (
    COMMANDS,
    CONFIG_DIR,
    DERIVED,
    GROUPS,
    flatten,
    group_options,
    load_config,
)
from msdet.common.runs import RunFolder, claim_run_folder
from msdet.common.schema import ConfigError

log = logging.getLogger("msdet")

# Errors that describe bad input (a config value, a path, a checkpoint, a stopped run):
# msdet's messages name the file or key, so one line says it all and the traceback only
# goes to the run's log file. Anything else is a bug and keeps its traceback.
USER_ERRORS: tuple[type[BaseException], ...] = (ValueError, OSError)
# The commands an install runs as ``msdet <command>`` (msdet.commands), a clone also as
# ``python <command>.py``.
ENTRY_POINTS = ("train", "eval", "predict", "export")


@dataclass
class Run:
    """What a command's body gets: the checked config, its run folder, and the settings
    as the user typed them (``key -> value``: the composed config cannot say whether
    ``model=yolox_nano`` was the default or the user's choice; this can)."""

    command: str
    cfg: Any
    folder: RunFolder | None
    typed: dict[str, str] = field(default_factory=dict)
    argv: list[str] = field(default_factory=list)
    main: bool = True  # this process writes the run folder's record
    recorded: bool = False

    @property
    def dir(self) -> str:
        return self.folder.path if self.folder else "."

    def write_record(self) -> None:
        """``config.yaml`` (the composed config, resolved) and ``overrides.txt`` of the
        accepted run, once, on the process that writes the folder. A command that decides
        late whether it takes the folder (train.py: a resume that is another model, or one
        of more epochs than asked, is refused once the checkpoint and data are read) calls
        this when it does; the record of the run there before stays until then."""
        from omegaconf import OmegaConf

        if self.recorded or not self.main or self.folder is None:
            return
        self.recorded = True
        with open(os.path.join(self.dir, "config.yaml"), "w", encoding="utf-8") as f:
            f.write(OmegaConf.to_yaml(self.cfg, resolve=True))
        with open(os.path.join(self.dir, "overrides.txt"), "w", encoding="utf-8") as f:
            f.write("\n".join(self.argv) + ("\n" if self.argv else ""))


def run_command(
    command: str,
    body: Callable[[Run], Any],
    argv: Sequence[str] | None = None,
    accept: Callable[[Run], None] | None = None,
    locate: Callable[[Any], None] | None = None,
    main_rank: bool | None = None,
    defer_record: bool = False,
) -> Any:
    """Run ``body`` as the command ``command`` (a key of ``COMMANDS``) with ``argv``
    (default: ``sys.argv[1:]``). ``accept(run)`` may refuse the claimed folder before
    anything is written into it (train.py: a used folder, a resume that does not fit);
    ``locate(cfg)`` may name the folder first (train.py: ``train.resume=auto`` without a
    named run continues the latest one).
    ``main_rank``: whether this process writes the run folder (default: the launcher's
    rank is 0); the others neither lock nor write it. The folder's record (``config.yaml``,
    ``overrides.txt``) is written once ``accept`` passes; with ``defer_record`` only when
    the body calls :meth:`Run.write_record` (its own checks passed). Exits 2 on a bad
    command line, 1 on a user's error, with one ``error:`` line."""
    argv = list(sys.argv[1:] if argv is None else argv)
    logs.setup_logging()
    wanted = help_wanted(argv)
    if wanted:
        _print_help(help_text(command, full=wanted == "all"))
        sys.exit(0)
    options = [a for a in argv if a.startswith("-")]
    if options:
        _fail(
            f"{options[0]}: {COMMANDS[command].name} takes settings as key=value (see --help)",
            2,
        )
    try:
        cfg = load_config(command, argv)
        if locate is not None:
            locate(cfg)
    except ConfigError as err:
        _fail(str(err), 2)
    main = launcher_rank_is_main() if main_rank is None else main_rank
    run = Run(command, cfg, None, typed_overrides(argv), argv, main)
    failed = True
    try:
        with user_errors():
            run.folder = claim_run_folder(cfg.run, command, lock=main)
            if accept is not None:
                accept(run)
            if main:
                logs.add_log_file(os.path.join(run.dir, f"{run.command}.log"))
                log.debug("%s %s", COMMANDS[run.command].name, " ".join(argv))
            if not defer_record:
                run.write_record()
            result = body(run)
            failed = False
            return result
    finally:
        logs.close_log_files()
        if run.folder is not None:
            run.folder.release(failed)


def launcher_rank_is_main() -> bool:
    """Whether this process is rank 0 as its launcher numbered it (``RANK_ID``); outside a
    launcher, yes. Under a launcher that numbers ranks only at ``init()`` (msrun over
    several nodes without ``--node_rank``), no process writes the folder's record."""
    if os.environ.get("MS_ROLE") == "MS_SCHED":  # msrun's scheduler runs the script too
        return False
    rank = os.environ.get("RANK_ID")
    if rank is not None:
        return rank.strip() == "0"
    return not os.environ.get("MS_ROLE")


def typed_overrides(argv: Sequence[str]) -> dict[str, str]:
    """The command line's settings as typed (``key -> value``, Hydra's ``+`` dropped)."""
    typed = {}
    for item in argv:
        key, sep, value = str(item).partition("=")
        if sep:
            typed[key.lstrip("+")] = value
    return typed


@contextlib.contextmanager
def user_errors(extra: tuple[type[BaseException], ...] = ()) -> Iterator[None]:
    """Run a command's body; a bad-input error becomes one ``error:`` line and exit 1.

    The traceback of such an error still reaches the run folder's log file. Other
    exceptions get the same first line, then propagate with their traceback."""
    try:
        yield
    except (*USER_ERRORS, *extra) as err:
        log.error("error: %s", _one_line(err))
        _traceback_to_log_files(err)
        sys.exit(1)
    except Exception as err:
        first = next((ln.strip() for ln in str(err).splitlines() if ln.strip()), "")
        log.error("error: %s: %s (traceback below)", type(err).__name__, first)
        raise


def help_wanted(argv: Sequence[str]) -> str | None:
    """``"all"`` for ``--help all`` or ``--help-all``, ``"short"`` for ``-h`` / ``--help``,
    None when the command line asks for no help."""
    args = list(argv)
    if "--help-all" in args:
        return "all"
    for i, arg in enumerate(args):
        if arg in ("-h", "--help"):
            return "all" if args[i + 1 : i + 2] == ["all"] else "short"
    return None


def help_text(command: str, full: bool = False) -> str:
    """``--help``: what the command does, its examples, its config groups, and the settings
    that matter most (the command's ``settings``) with their defaults and the YAML's comment
    on them, then where the rest is. ``full`` (``--help all``): every setting it takes."""
    from omegaconf import OmegaConf

    spec = COMMANDS[command]
    full = full or not spec.settings
    cfg = load_config(command, [])
    if command in ENTRY_POINTS:
        lines = [
            f"usage: msdet {command} [key=value ...]",
            f"       python {spec.name} [key=value ...]   (from a clone of the repository)",
        ]
    else:
        lines = [f"usage: python {spec.name} [key=value ...]"]
    lines += ["", spec.summary, "", "examples:"]
    lines += [f"  {e}" for e in spec.examples]
    lines += ["", "config groups (key=option):"]
    for group in GROUPS:
        if group in spec.sections:
            default = _default_option(group)
            options = ", ".join(group_options(group))
            if group == "data":  # data=path/to/dataset: a COCO or YOLO folder
                options += "; or a dataset folder: data=path/to/dataset"
            lines.append(f"  {group}={default}   (options: {options})")
    comments = _yaml_comments()
    values = flatten(OmegaConf.to_container(cfg, resolve=False))
    every = [
        key
        for section in spec.sections  # in the command's order: what it is about comes first
        for key in values
        if key.split(".")[0] == section and key not in DERIVED
    ]
    if full:
        lines += [
            "",
            "settings (key=value; the value shown is the default), the command's own first:",
        ]
        shown = every
    else:
        lines += ["", "main settings (key=value; the value shown is the default):"]
        shown = list(spec.settings)
    for key in shown:
        value = "null" if values[key] is None else values[key]
        comment = comments.get(key, "")
        lines.append(f"  {key}={value}" + (f"   # {comment}" if comment else ""))
    derived = [k for k in DERIVED if k.split(".")[0] in spec.sections]
    if derived:
        lines += ["", "derived from the settings (not typed):"]
        lines += [f"  {key}={values[key]}   # {DERIVED[key]}" for key in derived]
    if not full:
        call = f"msdet {command}" if command in ENTRY_POINTS else spec.name
        lines += [
            "",
            f"All {len(every)} settings: {call} --help all"
            + (f" (python {spec.name} --help all)" if command in ENTRY_POINTS else "")
            + (f"; the guide: {spec.guide} in the msdet repository" if spec.guide else ""),
        ]
    return "\n".join(lines)


def _print_help(text: str) -> None:
    """Print ``text``; a reader that stops early (``--help | head``) ends it quietly."""
    try:
        print(text, flush=True)
    except BrokenPipeError:
        # Python would report the closed pipe again when it flushes stdout at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def _default_option(group: str) -> str:
    import yaml

    with open(os.path.join(CONFIG_DIR, "config.yaml"), encoding="utf-8") as f:
        defaults = yaml.safe_load(f)["defaults"]
    return next(d[group] for d in defaults if isinstance(d, dict) and group in d)


def _yaml_comments() -> dict[str, str]:
    """The trailing comment of each key's line in the YAML files (its documentation)."""
    comments: dict[str, str] = {}
    for folder, prefix in [(CONFIG_DIR, "")] + [(os.path.join(CONFIG_DIR, g), g) for g in GROUPS]:
        for name in sorted(os.listdir(folder)):
            if name.endswith(".yaml"):
                _comments_of(os.path.join(folder, name), prefix, comments)
    return comments


def _comments_of(path: str, prefix: str, into: dict[str, str]) -> None:
    stack: list[tuple[int, str]] = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            text, _, comment = line.partition(" #")
            stripped = text.strip()
            if not stripped or stripped.startswith(("#", "-")) or ":" not in stripped:
                continue
            indent = len(text) - len(text.lstrip())
            key = stripped.split(":", 1)[0]
            while stack and stack[-1][0] >= indent:
                stack.pop()
            stack.append((indent, key))
            path_key = ".".join(filter(None, [prefix, *[k for _, k in stack]]))
            if comment.strip():
                into.setdefault(path_key, comment.strip())


def _fail(message: str, status: int) -> None:
    log.error("error: %s", message)
    sys.exit(status)


def _one_line(err: BaseException) -> str:
    text = str(err).strip() or type(err).__name__
    return " ".join(line.strip() for line in text.splitlines())


def _traceback_to_log_files(err: BaseException) -> None:
    record = log.makeRecord(
        log.name, logging.DEBUG, __file__, 0, "traceback of the error above", (), None
    )
    record.exc_info = (type(err), err, err.__traceback__)
    for handler in logging.getLogger().handlers:
        if isinstance(handler, logging.FileHandler):
            handler.handle(record)
