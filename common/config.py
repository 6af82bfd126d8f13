"""The configuration: where it lives, what each command takes, and the one function that
composes it for every entry point and tool (:func:`load_config`).

The values are the YAML files of ``configs/`` (``config.yaml`` and its groups ``model``,
``data``, ``train``, ``runtime``), composed by Hydra from ``key=value`` overrides as users
type them. Around Hydra's composition this module decides, before any work starts:

- which sections a command takes (:data:`COMMANDS`): ``train.py source=x`` is an error
  naming the command that takes ``source``;
- whether each key exists: a mistyped key (``train.epoch``), with or without Hydra's ``+``,
  is an error with the closest valid keys ("did you mean train.epochs?");
- whether each value fits its key (:mod:`msdet.common.schema`): ``train.epochs=2.5`` is an
  error naming the key, the value and what it takes;
- paths and globs (``source``, ``ckpt``, ``data.root``, ...) are taken as typed, so
  ``source=photos/[ab]*.jpg`` needs no Hydra quoting;
- ``data=path/to/dataset`` (a folder, or the file that picks its layout: a YOLO
  ``data.yaml``, a COCO json, an ``obj.data``) is a dataset given by its folder:
  :func:`dataset_folder`;
- the input sizes, once (:func:`resolve_sizes`): ``eval.img_size`` (null: ``data.img_size``)
  and the training input ``train.input_size`` (``data.img_size`` x ``train.img_scale``,
  :func:`scaled_size`), which the trainer, the data pipeline, resume and the run's records
  read as they are;
- the training recipe (:func:`choose_recipe`): without ``train=...``, the built-in sets
  train with the toy recipe ``train=shapes`` and any other dataset (``data=PATH``,
  ``data=coco``) with YOLOX's fine-tuning recipe ``train=yolox``; ``train.recipe`` says
  which and why, for the run's header.
"""

from __future__ import annotations

import difflib
import math
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from msdet.common.paths import is_windows_path, windows_path_hint
from msdet.common.schema import SCHEMA, SIZE_STRIDE, ConfigError

# The repository (or installed package) root and its YAML config groups.
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIG_DIR = os.path.join(ROOT, "configs")
GROUPS = ("model", "data", "train", "runtime")
# Keys whose values are paths, globs or names: taken verbatim from the command line (Hydra's
# grammar would read the brackets of a glob as a list).
VERBATIM = ("ckpt", "source", "data.root", "data.cache_dir", "run.dir", "run.name", "run.root",
            "train.resume", "train.pretrained", "train.mlflow_uri", "train.track",
            "export.out")  # fmt: skip
# Keys load_config derives from others (:func:`resolve_sizes`): what each one is, for the
# error a typed one gets and for --help.
DERIVED = {
    "train.input_size": "the training input, data.img_size x train.img_scale with each side "
    f"rounded to a multiple of {SIZE_STRIDE}",
    "train.recipe": "the train group's option and why: train=..., or the dataset's default",
    "train.weights_optional": "true: official weights not at hand start from scratch (own data)",
}
# The built-in synthetic sets (configs/data/): the toy recipe train=shapes is theirs.
BUILT_IN_DATA = ("shapes", "shapes_stars")
DEFAULT_RECIPE = "shapes"  # config.yaml's train group
OWN_DATA_RECIPE = "yolox"  # YOLOX's fine-tuning recipe (configs/train/yolox.yaml)


@dataclass(frozen=True)
class Recipe:
    """The train group option a command line gets (:func:`choose_recipe`): ``option``, the
    reason in words for the run's header, and whether ``train.pretrained=auto`` may start
    from scratch when the official weights cannot be had (``weights_optional``)."""

    option: str
    why: str
    weights_optional: bool = False


@dataclass(frozen=True)
class Command:
    """A command line msdet offers: the config sections it takes, and how to call it."""

    name: str  # as users run it: "train.py", "python -m msdet.data.check"
    sections: tuple[str, ...]
    summary: str = ""
    examples: tuple[str, ...] = field(default_factory=tuple)
    # What --help lists (every setting: --help all); none: --help lists them all.
    settings: tuple[str, ...] = field(default_factory=tuple)
    guide: str = ""  # the page of the repository's docs/ about the command


COMMANDS: dict[str, Command] = {
    "train": Command(
        "train.py",
        ("model", "data", "train", "runtime", "eval", "run"),
        "Train a YOLOX detector; everything of the run lands in its run folder.",
        (
            "python train.py",
            "python train.py model=yolox_s data=coco data.root=/data/coco train.epochs=300",
            "python train.py data=path/to/dataset model=yolox_tiny",
            "python train.py run.name=nano train.resume=auto",
        ),
        (
            "data.root",
            "data.img_size",
            "train.epochs",
            "train.batch_size",
            "train.pretrained",
            "train.freeze",
            "train.resume",
            "train.overwrite",
            "train.eval_interval",
            "train.patience",
            "eval.img_size",
            "runtime.device",
            "runtime.amp",
            "run.name",
            "run.dir",
        ),
        "docs/training.md",
    ),
    "eval": Command(
        "eval.py",
        ("ckpt", "data", "eval", "runtime", "run", "model"),
        "Evaluate a checkpoint or an exported model with COCO mAP on a val split.",
        (
            "python eval.py ckpt=runs/train/exp/checkpoints/best.ckpt",
            "python eval.py ckpt=best.ckpt data=path/to/dataset eval.img_size=416",
        ),
        (
            "ckpt",
            "data.root",
            "eval.img_size",
            "eval.batch_size",
            "eval.conf_thresh",
            "eval.class_map",
            "runtime.device",
            "run.name",
            "run.dir",
        ),
        "docs/inference.md",
    ),
    "predict": Command(
        "predict.py",
        ("source", "ckpt", "predict", "eval", "runtime", "run", "model", "data"),
        "Detect objects in images, folders, globs, videos or a camera.",
        (
            "python predict.py ckpt=best.ckpt source=photo.jpg",
            "python predict.py ckpt=best.ckpt source=photos/ predict.conf=0.4",
            "python predict.py ckpt=model.mindir source=photos/**/*.jpg predict.save_txt=true",
        ),
        (
            "source",
            "ckpt",
            "predict.conf",
            "predict.save_txt",
            "predict.save_conf",
            "predict.max_frames",
            "eval.img_size",
            "eval.nms_iou",
            "runtime.device",
            "run.name",
            "run.dir",
        ),
        "docs/inference.md",
    ),
    "export": Command(
        "export.py",
        ("ckpt", "export", "eval", "data", "runtime", "run", "model"),
        "Export a checkpoint to MINDIR or ONNX, check the file, and score it on the val split.",
        (
            "python export.py ckpt=best.ckpt",
            "python export.py ckpt=best.ckpt export.format=ONNX eval.img_size=416",
        ),
        (
            "ckpt",
            "export.format",
            "export.with_nms",
            "export.batch_size",
            "export.out",
            "export.val",
            "eval.img_size",
            "data.root",
            "runtime.device",
            "run.name",
        ),
        "docs/inference.md",
    ),
    # Tools: each takes what it reads.
    "data.check": Command("python -m msdet.data.check", ("data",)),
    "data.visualize": Command("python -m msdet.data.visualize", ("data",)),
    "bench.device": Command(
        "bench/device_step.py", ("model", "data", "train", "runtime", "eval", "run")
    ),
    "selftest": Command(
        "python -m msdet.tools.selftest",
        ("model", "data", "train", "runtime", "eval", "export", "run"),
    ),
    "tool": Command(
        "a tool", ("model", "data", "train", "runtime", "eval", "predict", "export", "run")
    ),
}


@dataclass(frozen=True)
class Override:
    """One ``key=value`` of a command line, as typed and as Hydra reads it."""

    key: str
    value: Any
    text: str  # as typed
    verbatim: bool = False  # the value is the raw text after '='


def load_config(command: str, overrides: Sequence[str] = ()) -> Any:
    """The composed, checked config for ``command`` (a key of :data:`COMMANDS`) with
    ``overrides`` (``key=value`` as typed on its command line).

    Raises :class:`ConfigError` naming the key (and the closest valid ones, or the command
    that takes it) for any override or value msdet cannot use. The result is an OmegaConf
    ``DictConfig`` in struct mode (reading a missing key is an error), with input sizes as
    ``[h, w]`` and resolved (:func:`resolve_sizes`).
    """
    from omegaconf import OmegaConf, open_dict

    spec = COMMANDS[command]
    parsed = dataset_folder(parse_overrides(overrides))
    trains = "train" in spec.sections
    recipe = choose_recipe(parsed) if trains else Recipe(DEFAULT_RECIPE, "not a training command")
    if trains and not any(o.key == "train" for o in parsed) and recipe.option != DEFAULT_RECIPE:
        parsed.append(Override("train", recipe.option, f"train={recipe.option}"))
    groups = [o for o in parsed if o.key in GROUPS]
    for o in groups:
        _check_group_option(o)
    base = _compose([o.text for o in groups])
    known = set(flatten(OmegaConf.to_container(base, resolve=False)))
    sections = set(known_sections(known))
    hydra_overrides = [o.text for o in groups]
    verbatim = []
    for o in parsed:
        if o.key in GROUPS:
            continue
        if o.key in DERIVED:
            raise ConfigError(
                f"{o.text}: {o.key} is not a setting but {DERIVED[o.key]}: set those instead"
            )
        _check_key(o.key, known, sections, spec)
        if o.verbatim:
            verbatim.append(o)
        else:
            hydra_overrides.append(f"{o.key}={o.text.partition('=')[2]}")
    cfg = _compose(hydra_overrides)
    with open_dict(cfg):
        for o in verbatim:
            OmegaConf.update(cfg, o.key, o.value, merge=False)
    validate(cfg, spec.sections)
    resolve_sizes(cfg)
    with open_dict(cfg):
        cfg.train.recipe = f"{cfg.train.name} ({recipe.why})"
        cfg.train.weights_optional = recipe.weights_optional
    OmegaConf.set_struct(cfg, True)
    return cfg


def choose_recipe(parsed: Sequence[Override]) -> Recipe:
    """The train group option for the command line ``parsed`` (after :func:`dataset_folder`).

    ``train=...`` typed is the user's choice. Otherwise the built-in sets
    (:data:`BUILT_IN_DATA`, the default) train with the toy recipe ``shapes``; any other
    dataset (``data=PATH``, ``data=coco``) with ``yolox``, the recipe YOLOX fine-tunes with
    (configs/train/yolox.yaml names each value's source in YOLOX 0.3.0), from the original's
    COCO weights when they can be had: unless ``train.pretrained`` is typed, weights that
    cannot be had (no cache, no network) start the run from scratch, said so. ``train.*``
    settings typed apply on top of either recipe."""
    typed = {o.key: o for o in parsed}
    if "train" in typed:
        return Recipe(str(typed["train"].value), f"train={typed['train'].value}")
    data = typed.get("data")
    if data is None or str(data.value) in BUILT_IN_DATA:
        shown = "shapes" if data is None else data.value
        return Recipe(DEFAULT_RECIPE, f"the built-in set's default: data={shown}")
    root = typed.get("data.root")
    if root is not None and "data.name" in typed:  # data=PATH (dataset_folder)
        given = f"data={root.value}"
    else:
        given = f"data={data.value}" + (f" data.root={root.value}" if root is not None else "")
    return Recipe(OWN_DATA_RECIPE, f"own data: {given}", "train.pretrained" not in typed)


def scaled_size(size: Sequence[int], scale: float) -> list[int]:
    """``[h, w]`` of ``size`` times ``scale``, each side rounded to the nearest multiple of
    the stride (half up, at least one stride): 0.8 of 320 is 256, of 416 is 320, 0.7 of 320
    is 224. The one rule for a scaled input size."""
    return [max(1, math.floor(int(v) * scale / SIZE_STRIDE + 0.5)) * SIZE_STRIDE for v in size]


def resolve_sizes(cfg: Any) -> None:
    """Settle the input sizes of a composed config in place, so that everything after it
    reads them as they are: ``eval.img_size`` null becomes ``data.img_size``, and
    ``train.input_size`` (:data:`DERIVED`) is ``data.img_size`` x ``train.img_scale``
    (:func:`scaled_size`). A recipe may train smaller than it evaluates, as YOLOX's
    ``input_size`` and ``test_size``. Each value is held to its schema entry first (a
    section the command does not take was not validated)."""
    from omegaconf import OmegaConf, open_dict

    def checked(key: str) -> Any:
        value = OmegaConf.select(cfg, key)
        return SCHEMA[key].validate(key, list(value) if OmegaConf.is_list(value) else value)

    data_size = checked("data.img_size")
    scale = checked("train.img_scale")
    eval_size = checked("eval.img_size")
    with open_dict(cfg):
        cfg.data.img_size = data_size
        cfg.eval.img_size = data_size if eval_size is None else eval_size
        cfg.train.input_size = scaled_size(data_size, scale)


def parse_overrides(overrides: Iterable[str]) -> list[Override]:
    """Each ``key=value`` as an :class:`Override`; ``+``/``++`` are dropped from a key (its
    existence is checked like any other), ``~key`` (delete) is an error."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import OverrideParseException

    parser = OverridesParser.create()
    out = []
    for text in overrides:
        key, sep, raw = str(text).partition("=")
        if key.startswith("~"):
            raise ConfigError(f"{text}: msdet's settings cannot be deleted; set a value instead")
        key = key.lstrip("+")
        if not sep or not key:
            raise ConfigError(
                f"{text!r} is not a setting: settings are key=value (e.g. train.epochs=10)"
            )
        if key.startswith("hydra."):
            hint = " (the run folder is run.dir=PATH)" if key == "hydra.run.dir" else ""
            raise ConfigError(f"{key}: msdet does not take Hydra's own settings{hint}")
        if key in VERBATIM:
            value = None if raw in ("null", "None", "~") else raw
            out.append(Override(key, value, f"{key}={raw}", verbatim=True))
            continue
        try:
            (parsed,) = parser.parse_overrides([f"{key}={raw}"])
        except OverrideParseException as err:
            first = str(err).splitlines()[0]
            raise ConfigError(f"{text}: not a value msdet can read ({first})") from err
        out.append(Override(key, parsed.value(), f"{key}={raw}"))
    return out


def dataset_folder(parsed: list[Override]) -> list[Override]:
    """``data=PATH`` (a folder or a file of it, not one of ``configs/data/``): the
    ``coco`` group with ``data.root=PATH``, ``data.name`` the folder's name and the split
    paths null, to be found in the folder (``msdet.data.folders``). Overrides typed after
    it (``data.img_size=...``, a split path) still apply."""
    out = []
    typed = {o.key for o in parsed}
    for o in parsed:
        raw = o.text.partition("=")[2]
        if o.key != "data" or raw in group_options("data") or not os.path.exists(raw):
            out.append(o)
            continue
        root = os.path.abspath(raw)
        name = os.path.basename(root.rstrip(os.sep))
        if os.path.isfile(root):  # a file that picks the folder's layout: named for the folder
            folder = os.path.dirname(root)
            if os.path.basename(folder) in ("annotations", "train", "valid", "val"):
                folder = os.path.dirname(folder)
            name = os.path.basename(folder)
        out.append(Override("data", "coco", "data=coco"))
        out += [Override(k, v, f"{k}={v}", verbatim=True)
                for k, v in (("data.root", root), ("data.name", name))]  # fmt: skip
        out += [
            Override(f"data.{split}.{part}", None, f"data.{split}.{part}=null", verbatim=True)
            for split in ("train", "val")
            for part in ("ann_file", "img_dir")
            if f"data.{split}.{part}" not in typed
        ]
    return out


def validate(cfg: Any, sections: Iterable[str]) -> None:
    """Check every value of ``sections`` against :data:`~msdet.common.schema.SCHEMA`, in
    place (sizes become ``[h, w]``); a key without a schema entry is a :class:`ConfigError`
    too (a YAML key added without saying what it takes)."""
    from omegaconf import OmegaConf, open_dict

    values = flatten(OmegaConf.to_container(cfg, resolve=True))
    with open_dict(cfg):
        for key, value in values.items():
            if key.split(".")[0] not in sections:
                continue
            spec = SCHEMA.get(key)
            if spec is None:
                raise ConfigError(f"{key} has no schema entry (msdet.common.schema.SCHEMA)")
            checked = spec.validate(key, value)
            if checked != value or type(checked) is not type(value):
                OmegaConf.update(cfg, key, checked, merge=False)


def flatten(tree: Any, prefix: str = "") -> dict[str, Any]:
    """``{"train": {"epochs": 5}}`` -> ``{"train.epochs": 5}`` (lists are values)."""
    if not isinstance(tree, dict):
        return {prefix: tree}
    out: dict[str, Any] = {}
    for key, value in tree.items():
        path = f"{prefix}.{key}" if prefix else str(key)
        if isinstance(value, dict) and value:
            out.update(flatten(value, path))
        else:
            out[path] = value
    return out


def known_sections(keys: Iterable[str]) -> list[str]:
    """The top-level sections of flattened ``keys``."""
    return sorted({k.split(".")[0] for k in keys})


def group_options(group: str) -> list[str]:
    """The options of a config group: the YAML files in ``configs/<group>/``."""
    folder = os.path.join(CONFIG_DIR, group)
    return sorted(f[:-5] for f in os.listdir(folder) if f.endswith(".yaml"))


def commands_taking(section: str) -> list[str]:
    """The entry points (``train.py`` ...) that take ``section``."""
    return [c.name for k, c in COMMANDS.items() if section in c.sections and k in _ENTRY_POINTS]


_ENTRY_POINTS = ("train", "eval", "predict", "export")


def _compose(overrides: list[str]) -> Any:
    from hydra import compose, initialize_config_dir
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    try:
        with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
            return compose("config", overrides=overrides)
    except (HydraException, OmegaConfBaseException) as err:
        first = (str(err).strip().splitlines() or [type(err).__name__])[0]
        raise ConfigError(first) from err


def _check_group_option(o: Override) -> None:
    options = group_options(o.key)
    if isinstance(o.value, str) and o.value in options:
        return
    raw = o.text.partition("=")[2]
    if o.key == "data" and is_windows_path(raw):
        raise ConfigError(windows_path_hint(raw, "data"))
    if o.key == "data" and ("/" in raw or os.sep in raw or "." in raw or "\\" in raw):
        raise ConfigError(_no_such_path(raw, options))
    close = difflib.get_close_matches(str(o.value), options, n=3, cutoff=0.5)
    hint = f"did you mean {' or '.join(close)}? " if close else ""
    raise ConfigError(
        f"{o.key}={o.value}: no such {o.key} config; {hint}options: {', '.join(options)}"
    )


def _no_such_path(raw: str, options: list[str]) -> str:
    """``data=PATH`` that does not exist: the message says so (a path was meant, not a
    config name), with the closest names beside it where its folder exists."""
    path = os.path.abspath(raw)
    parent = os.path.dirname(path.rstrip(os.sep))
    hint = ""
    if os.path.isdir(parent):
        close = difflib.get_close_matches(os.path.basename(path), os.listdir(parent), 3, 0.6)
        hint = f"did you mean {' or '.join(close)}? " if close else ""
    return (
        f"data={raw}: no such folder or file ({path}); {hint}data= takes a dataset folder, a "
        f"YOLO data.yaml or a config name: {', '.join(options)}"
    )


def _check_key(key: str, known: set[str], sections: set[str], spec: Command) -> None:
    section = key.split(".")[0]
    if section in sections and section not in spec.sections:
        takers = commands_taking(section)
        raise ConfigError(
            f"{spec.name} does not take {key}"
            + (f" ({' and '.join(takers)} {'do' if len(takers) > 1 else 'does'})" if takers else "")
            + f"; it takes {', '.join(spec.sections)}"
        )
    if key in known or any(k.startswith(key + ".") for k in known):
        return
    taken = [g for g in GROUPS if g in spec.sections]
    taken += [k for k in known if k.split(".")[0] in spec.sections]
    raise ConfigError(f"unknown setting {key}" + suggestion(key, taken))


def suggestion(key: str, keys: Sequence[str]) -> str:
    """ "": nothing close; else "; did you mean a or b?" from ``keys`` close to ``key`` as a
    whole or by its last part (``conf`` -> ``predict.conf``)."""
    close = difflib.get_close_matches(key, keys, n=3, cutoff=0.75)
    leaf = key.split(".")[-1]
    by_leaf = [k for k in keys if k.split(".")[-1] == leaf]
    by_leaf += [
        k for k in keys if difflib.SequenceMatcher(None, leaf, k.split(".")[-1]).ratio() >= 0.8
    ]
    names = list(dict.fromkeys([*close, *by_leaf]))[:3]
    return f"; did you mean {' or '.join(names)}?" if names else ""
