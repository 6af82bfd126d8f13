"""Starting weights for fine-tuning: a msdet ``.ckpt`` or a PyTorch ``.pth``, any class count.

:func:`load_pretrained` copies every tensor whose name and shape fit the model. The
classification convolutions (``head.cls_preds.*``, one output row per class) are the only
parameters whose shape depends on the classes: their rows are copied **by class name**,
for each class of the dataset that the checkpoint also predicts, and the other rows keep
the initialisation the model was built with (PyTorch-style weights, YOLOX's prior bias),
exactly as a fresh model has them. Never by position: a checkpoint of the same class count
with other names keeps none. Names match ignoring case, and ``_``/``-`` read as spaces
(``traffic_light`` is COCO's ``traffic light``).

The checkpoint's class names: a msdet checkpoint's description; without one (a ``.pth``,
or a ``.ckpt`` converted without names) the 80 COCO classes for 80 classes, as the
original's release files predict, and none otherwise (every row then starts fresh).

Any other mismatch means a different architecture and is an error naming the parameter,
unless ``strict=False``, which keeps the fresh values and reports them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import mindspore as ms
import numpy as np
from mindspore import nn

from msdet.models.convert_pytorch import ConversionError, load_torch_checkpoint, mindspore_name
from msdet.models.description import COCO_NAMES, DescriptionError, class_key, read_description
from msdet.models.weights import EMA_PREFIX, CheckpointError, network_weights, read_checkpoint

TORCH_SUFFIXES = (".pth", ".pt", ".pth.tar")
CLASS_HEAD = "head.cls_preds."
NETWORK_PREFIXES = ("backbone.", "head.")
MAX_LISTED = 10  # parameters listed by name in an error; the count says how many more


@dataclass
class PretrainedFile:
    """What :func:`read_pretrained` found in a file: its network weights (MindSpore names),
    whether they are a msdet checkpoint's EMA weights, and the classes its head predicts
    (empty when the file does not say) with where those names came from."""

    weights: dict[str, np.ndarray]
    used_ema: bool
    class_names: list[str]
    names_from: str


@dataclass
class PretrainedReport:
    """What :func:`load_pretrained` did with each model parameter and each class."""

    path: str
    used_ema: bool = False
    loaded: list[str] = field(default_factory=list)
    by_class_name: list[str] = field(default_factory=list)  # class rows copied by name
    reinitialised: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # "name: why"
    unused: list[str] = field(default_factory=list)  # checkpoint tensors no parameter took
    kept_classes: list[str] = field(default_factory=list)  # the dataset's, found by name
    new_classes: list[str] = field(default_factory=list)  # the dataset's, starting fresh
    names_from: str = ""

    def table(self, max_names: int = 6) -> str:
        """A short table: count and (the first) names of loaded/by name/re-initialised/skipped."""
        rows = [
            ("loaded", self.loaded),
            ("by class name", self.by_class_name),
            ("re-initialised", self.reinitialised),
            ("skipped", self.skipped),
            ("unused in file", self.unused),
        ]
        lines = [f"pretrained weights from {self.path}{' (EMA)' if self.used_ema else ''}:"]
        for label, names in rows:
            if label == "by class name" and not names:
                continue
            lines.append(f"  {label:<15}{len(names):>5}  {_first(names, max_names)}")
        return "\n".join(lines)

    def classes_line(self, max_names: int = 12) -> str:
        """One line: which of the dataset's classes start from the checkpoint's rows."""
        total = len(self.kept_classes) + len(self.new_classes)
        return (
            f"kept {len(self.kept_classes)} of {total} classes by name: "
            f"{_first(self.kept_classes, max_names) or '-'}; "
            f"new: {_first(self.new_classes, max_names) or '-'} "
            f"(the checkpoint's classes: {self.names_from})"
        )


def _first(names: Sequence[str], n: int) -> str:
    more = f", ... (+{len(names) - n})" if len(names) > n else ""
    return ", ".join(names[:n]) + more


def _names_without_description(num_classes: int | None) -> tuple[list[str], str]:
    if num_classes == len(COCO_NAMES):
        return list(COCO_NAMES), "the 80 COCO classes (an 80-class file without names)"
    return [], "none named: the file does not say which they are"


def read_pretrained(path: str, use_ema: bool = True) -> PretrainedFile:
    """Network weights (MindSpore names -> arrays) of a ``.ckpt`` or PyTorch ``.pth`` file,
    with the class names the module docstring describes."""
    if path.endswith(TORCH_SUFFIXES):
        try:
            state = load_torch_checkpoint(path)
        except ConversionError as err:
            raise CheckpointError(f"train.pretrained: {err}") from err
        weights = {}
        for key, value in state.items():
            name = mindspore_name(str(key))
            if name is not None and isinstance(value, np.ndarray) and value.dtype.kind in "biuf":
                weights[name] = value
        names, names_from = _names_without_description(_class_count(weights))
        return PretrainedFile(weights, False, names, names_from)
    params = read_checkpoint(path)
    used_ema = use_ema and any(k.startswith(EMA_PREFIX) for k in params)
    # Metadata may be stored as plain strings: only tensors are weights.
    weights = {
        k: v.asnumpy() for k, v in network_weights(params, use_ema).items() if hasattr(v, "asnumpy")
    }
    try:
        description = read_description(params, path)
    except DescriptionError as err:
        raise CheckpointError(f"train.pretrained: {err}") from err
    if description is not None:
        return PretrainedFile(weights, used_ema, list(description.class_names), "its description")
    names, names_from = _names_without_description(_class_count(weights))
    return PretrainedFile(weights, used_ema, names, names_from)


def _class_count(weights: dict[str, np.ndarray]) -> int | None:
    first = weights.get(CLASS_HEAD + "0.weight")
    return None if first is None or first.ndim == 0 else int(first.shape[0])


def load_pretrained(
    net: nn.Cell, path: str, class_names: Sequence[str], strict: bool = True
) -> PretrainedReport:
    """Load the fitting tensors of ``path`` into ``net``, whose classes are
    ``class_names`` (the dataset's); see the module docstring.

    Raises :class:`CheckpointError` naming every non-class-head parameter that is missing
    or mis-shaped when ``strict`` (nothing is loaded then).
    """
    found = read_pretrained(path)
    weights = found.weights
    names = [p.name for p in net.get_parameters()]
    if not any(n in weights for n in names):
        held = sorted(weights)
        raise CheckpointError(
            f"train.pretrained={path} holds none of the model's {len(names)} parameters: "
            + (
                f"its {len(held)} tensors are named {', '.join(held[:3])}"
                + (" ..." if len(held) > 3 else "")
                if held
                else "it holds no tensor"
            )
            + " (another kind of model, or not a model's weights); it takes a msdet checkpoint "
            "or a YOLOX .pth"
        )
    report = PretrainedReport(path=path, used_ema=found.used_ema, names_from=found.names_from)
    rows = _class_rows(class_names, found.class_names)
    report.kept_classes = [n for n, j in zip(class_names, rows) if j is not None]
    report.new_classes = [n for n, j in zip(class_names, rows) if j is None]
    updates: list[tuple[ms.Parameter, np.ndarray]] = []
    problems = []
    taken = set()
    for param in net.get_parameters():
        name, want = param.name, tuple(param.shape)
        if name not in weights:
            problems.append(f"{name}: not in the checkpoint")
            report.skipped.append(f"{name} (not in the checkpoint)")
            continue
        taken.add(name)
        have = tuple(weights[name].shape)
        if (
            name.startswith(CLASS_HEAD)
            and have[1:] == want[1:]
            and have[0] == len(found.class_names)
        ):
            if not report.kept_classes:
                report.reinitialised.append(name)
                continue
            value = param.asnumpy().copy()  # the fresh initialisation for the new classes
            for i, j in enumerate(rows):
                if j is not None:
                    value[i] = weights[name][j]
            updates.append((param, value))
            report.by_class_name.append(name)
        elif name.startswith(CLASS_HEAD) and have[1:] == want[1:] and not found.class_names:
            report.reinitialised.append(name)
        elif have == want and not name.startswith(CLASS_HEAD):
            updates.append((param, weights[name]))
            report.loaded.append(name)
        else:
            problems.append(f"{name}: shape {have} in the checkpoint, {want} in the model")
            report.skipped.append(f"{name} ({have} vs {want})")
    # Only network tensors count (a training .ckpt also holds optimizer state).
    report.unused = sorted(n for n in set(weights) - taken if n.startswith(NETWORK_PREFIXES))
    if problems and strict:
        raise CheckpointError(
            f"train.pretrained={path} does not fit the model in {len(problems)} of its "
            f"{len(names)} parameters (a different architecture? check model=...; "
            "train.pretrained_strict=false loads what fits):\n  "
            + "\n  ".join(problems[:MAX_LISTED])
            + (f"\n  and {len(problems) - MAX_LISTED} more" if len(problems) > MAX_LISTED else "")
        )
    not_finite = [p.name for p, value in updates if not np.isfinite(value).all()]
    if not_finite:
        raise CheckpointError(
            f"train.pretrained={path}: {len(not_finite)} parameters hold NaN or infinite values "
            f"({', '.join(not_finite[:3])}{' ...' if len(not_finite) > 3 else ''}): the weights "
            "of a run that diverged; start from an earlier checkpoint of it, or "
            "train.pretrained=null"
        )
    for param, value in updates:
        param.set_data(ms.Tensor(value, dtype=param.dtype))
    return report


def _class_rows(class_names: Sequence[str], source_names: Sequence[str]) -> list[int | None]:
    """For each of ``class_names``, the row of the checkpoint's class of the same name
    (:func:`class_key`), or None."""
    rows: dict[str, int] = {}
    for j, name in enumerate(source_names):
        rows.setdefault(class_key(name), j)  # a repeated name: its first row
    return [rows.get(class_key(name)) for name in class_names]
