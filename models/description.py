"""What a checkpoint is: the description msdet writes into every checkpoint it makes.

Training and the PyTorch converter write one JSON string under :data:`DESCRIPTION_KEY`:
the architecture (the model's name and every field that shapes the network, see
``models.yolox.architecture``; the class count), the class names and the dataset's category
ids, the input size, and, from training, the composed config and the dataset it trained on
(``data.record``: eval.py, export.py and predict.py take it when no ``data=`` is given);
plus the msdet and MindSpore versions. eval.py, predict.py and export.py build the network from it, so they need only
``ckpt=``; a checkpoint written before descriptions existed reads as None and the entry
points fall back to the config (``model=...``), as they did then.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from omegaconf import OmegaConf

from msdet import __version__

DESCRIPTION_KEY = "msdet_description"
SCHEMA = 1
MSDET_VERSION = __version__  # what checkpoints record (the package's version)

# The 80 COCO classes in YOLOX's order (the original's COCO_CLASSES) and their category ids
# in COCO's annotation files (1..90 with gaps): what an official YOLOX checkpoint predicts.
COCO_NAMES = (
    "person", "bicycle", "car", "motorcycle", "airplane", "bus", "train", "truck", "boat",
    "traffic light", "fire hydrant", "stop sign", "parking meter", "bench", "bird", "cat",
    "dog", "horse", "sheep", "cow", "elephant", "bear", "zebra", "giraffe", "backpack",
    "umbrella", "handbag", "tie", "suitcase", "frisbee", "skis", "snowboard", "sports ball",
    "kite", "baseball bat", "baseball glove", "skateboard", "surfboard", "tennis racket",
    "bottle", "wine glass", "cup", "fork", "knife", "spoon", "bowl", "banana", "apple",
    "sandwich", "orange", "broccoli", "carrot", "hot dog", "pizza", "donut", "cake", "chair",
    "couch", "potted plant", "bed", "dining table", "toilet", "tv", "laptop", "mouse",
    "remote", "keyboard", "cell phone", "microwave", "oven", "toaster", "sink",
    "refrigerator", "book", "clock", "vase", "scissors", "teddy bear", "hair drier",
    "toothbrush",
)  # fmt: skip
COCO_CATEGORY_IDS = tuple(
    i for i in range(1, 91) if i not in (12, 26, 29, 30, 45, 66, 68, 69, 71, 83)
)


# How a model's classes are matched to a dataset's when it is scored on it (eval.class_map).
CLASS_MAPS = ("strict", "by_name")
# Differing positions named in a class-mismatch error; lists longer than this are not shown whole.
SHOWN_CLASSES = 12


class DescriptionError(ValueError):
    """A checkpoint's description is unreadable or contradicts what was asked."""


class ClassMismatchError(DescriptionError):
    """A model's class names are not the classes of the dataset it is scored on."""


@dataclass
class Description:
    """A checkpoint's description (see the module docstring)."""

    model: dict[str, Any]  # name, the architecture fields, num_classes, prior_prob
    class_names: list[str]
    category_ids: list[int]
    input_size: list[int] | None = None  # [h, w] to run it at: its eval size (converted: test size)
    source: str = "train"  # train | convert
    config: dict[str, Any] | None = None  # the composed training config
    versions: dict[str, str] = field(default_factory=dict)
    data: dict[str, Any] | None = None  # the dataset it trained on (data.record.data_record)
    schema: int = SCHEMA

    @property
    def num_classes(self) -> int:
        return int(self.model["num_classes"])

    def model_config(self) -> Any:
        """The ``model`` config group this checkpoint's network is built from."""
        return OmegaConf.create(dict(self.model))

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)


def describe(
    model_cfg: Any,
    num_classes: int,
    class_names: Sequence[str],
    category_ids: Sequence[int],
    input_size: Sequence[int] | None,
    source: str,
    config: Mapping[str, Any] | None = None,
    data: Mapping[str, Any] | None = None,
) -> Description:
    """The description of a network built from ``model_cfg`` with ``num_classes`` classes;
    ``data``: the dataset it trained on (``data.record.data_record``)."""
    from mindspore import __version__ as ms_version

    from msdet.models.yolox import architecture

    if len(class_names) != num_classes or len(category_ids) != num_classes:
        raise DescriptionError(
            f"{len(class_names)} class names and {len(category_ids)} category ids for a "
            f"{num_classes}-class model"
        )
    model = {
        "name": str(model_cfg.name),
        **architecture(model_cfg),
        "num_classes": int(num_classes),
        "prior_prob": float(model_cfg.prior_prob),
    }
    return Description(
        model=model,
        class_names=[str(n) for n in class_names],
        category_ids=[int(i) for i in category_ids],
        input_size=[int(v) for v in input_size] if input_size is not None else None,
        source=source,
        config=dict(config) if config is not None else None,
        versions={"msdet": MSDET_VERSION, "mindspore": ms_version},
        data=dict(data) if data is not None else None,
    )


def coco_or_numbered(num_classes: int) -> tuple[list[str], list[int], str]:
    """(names, category ids, how they were chosen) for a model without names given: the
    COCO classes for 80, else ``class0 ... classN-1`` with ids 0..N-1."""
    if num_classes == len(COCO_NAMES):
        return list(COCO_NAMES), list(COCO_CATEGORY_IDS), "the 80 COCO classes"
    names = [f"class{i}" for i in range(num_classes)]
    return names, list(range(num_classes)), f"numbered class0..class{num_classes - 1}"


def read_description(params: Mapping[str, Any], source: str = "checkpoint") -> Description | None:
    """The description in a loaded checkpoint (name -> value), None when it has none."""
    text = params.get(DESCRIPTION_KEY)
    if text is None:
        return None
    try:
        data = json.loads(str(text))
        return Description(**data)
    except (ValueError, TypeError) as err:
        raise DescriptionError(f"{source}: its description is unreadable ({err})") from err


def contradictions(description: Description, typed: Mapping[str, str]) -> list[str]:
    """What the command line's ``model`` overrides (``typed``: key -> value as typed) say
    against the checkpoint's description; one message per contradiction."""
    found = []
    name = description.model.get("name")
    if "model" in typed and typed["model"] != name:
        found.append(f"model={typed['model']} contradicts the checkpoint, a {name}")
    for key, text in typed.items():
        if not key.startswith("model.") or key[len("model.") :] not in description.model:
            continue
        field_name = key[len("model.") :]
        value = _as_hydra_reads(key, text)
        have = description.model[field_name]
        if value is None and field_name == "num_classes":
            continue
        if _differs(value, have):
            found.append(f"{key}={text} contradicts the checkpoint's {field_name}={have}")
    return found


def _as_hydra_reads(key: str, text: str) -> Any:
    """The value of ``key=text`` as Hydra's override grammar reads it (``false`` is a bool,
    ``[1,2]`` a list, ``null`` None); the text itself where the grammar refuses it."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    try:
        return OverridesParser.create().parse_override(f"{key}={text}").value()
    except Exception:
        return text


def _differs(value: Any, have: Any) -> bool:
    if isinstance(have, list):
        return [float(v) for v in (value or [])] != [float(v) for v in have]
    if isinstance(have, bool):
        return bool(value) != have
    if isinstance(have, (int, float)):
        try:
            return float(value) != float(have)
        except (TypeError, ValueError):
            return True
    return str(value) != str(have)


def numbered_names(names: Sequence[str]) -> bool:
    """Whether ``names`` are the placeholders ``class0 ... classN-1`` that a model converted
    without names carries (:func:`coco_or_numbered`): no names at all, for matching."""
    return list(names) == [f"class{i}" for i in range(len(names))]


def class_key(name: str) -> str:
    """How class names are compared wherever classes are matched by name (fine-tuning's
    rows, ``eval.class_map=by_name``): case, ``_`` and ``-`` and repeated spaces ignored."""
    return " ".join(str(name).lower().replace("_", " ").replace("-", " ").split())


def class_label_map(
    model_names: Sequence[str],
    data_names: Sequence[str],
    class_map: str = "strict",
    model: str = "the model",
    data: str = "the dataset",
) -> list[int]:
    """The dataset's training label that each of the model's classes is scored as.

    ``strict``: the names must be the dataset's, in its order (the model's class k is the
    dataset's class k). ``by_name``: each dataset class is found by name among the model's
    (another order, or a model of more classes: those the dataset lacks map to -1 and are
    not scored). Anything else raises :class:`ClassMismatchError` naming ``model`` and
    ``data`` with both lists (their first differing positions when they are long). Names
    match as fine-tuning matches them (:func:`class_key`: ``Car`` is ``car``)."""
    model_names, data_names = [str(n) for n in model_names], [str(n) for n in data_names]
    if class_map not in CLASS_MAPS:
        raise ValueError(
            f"eval.class_map must be one of {', '.join(CLASS_MAPS)}, got {class_map!r}"
        )
    if model_names == data_names:
        return list(range(len(model_names)))
    if class_map == "by_name":
        model_keys = {class_key(n) for n in model_names}
        missing = [n for n in data_names if class_key(n) not in model_keys]
        if missing or not data_names:
            common = model_keys & {class_key(n) for n in data_names}
            raise ClassMismatchError(
                f"{_classes_differ(model, model_names, data, data_names)}; eval.class_map="
                + (
                    f"by_name: the dataset's {_shown(missing)} are not among the model's classes"
                    if common
                    else "by_name: the two have no class in common"
                )
            )
        label_of: dict[str, int] = {}
        for k, name in enumerate(data_names):
            label_of.setdefault(class_key(name), k)
        return [label_of.get(class_key(name), -1) for name in model_names]
    hint = ""
    if sorted(model_names) == sorted(data_names):
        hint = (
            "; the same names in another order: eval.class_map=by_name scores each class as "
            "the dataset's class of its name"
        )
    elif set(data_names) <= set(model_names):
        hint = (
            "; every dataset class is among the model's: eval.class_map=by_name scores those "
            "and leaves the others out"
        )
    raise ClassMismatchError(_classes_differ(model, model_names, data, data_names) + hint)


def _classes_differ(model: str, model_names: list[str], data: str, data_names: list[str]) -> str:
    """The sentence naming both class lists, with their first differing positions when a
    list is too long to show whole."""
    text = f"the classes differ: {model} has {_shown(model_names)}, {data} has {_shown(data_names)}"
    if max(len(model_names), len(data_names)) <= SHOWN_CLASSES:
        return text
    if len(model_names) != len(data_names):
        text += f" ({len(model_names)} classes / {len(data_names)} classes)"
    differ = [
        f"position {k}: {a!r} / {b!r}"
        for k, (a, b) in enumerate(zip(model_names, data_names))
        if a != b
    ]
    if differ:
        more = len(differ) - 5
        text += (
            "; first differences "
            + ", ".join(differ[:5])
            + (f" and {more} more" if more > 0 else "")
        )
    return text


def _shown(names: list[str]) -> str:
    """A list of names, cut to its first ones (and its length) when long."""
    if len(names) <= SHOWN_CLASSES:
        return str(names)
    return str(names[: SHOWN_CLASSES - 2])[:-1] + f", ... ({len(names)} names)]"
