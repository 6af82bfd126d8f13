"""What each configuration key may hold: its type and range, checked once, as the config is
loaded, with a message that names the key and the value.

The defaults live in the YAML files of ``configs/`` alone; this module holds no value of its
own. Every key of every config group option has a :class:`Spec` here
(``tests/common/test_schema.py`` holds the two together), so a value of the wrong type or
out of range stops a command before it does any work, never in the middle of a run.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any


class ConfigError(ValueError):
    """A configuration value or key that msdet cannot use; the message names the key."""


# The detector's largest stride: every input side is a multiple of it.
SIZE_STRIDE = 32


@dataclass(frozen=True)
class Spec:
    """The values a key takes. ``kind``: int, float, bool, str, size, floats, ints, strs or
    any; ``choices`` for a fixed set of words; ``low``/``high`` inclusive bounds (``above``:
    exclusive lower bound); ``null``: None allowed; ``also``: extra words taken besides the
    kind (``auto``); ``check``: a last rule of its own, returning an error text or None."""

    kind: str
    choices: tuple[str, ...] = ()
    low: float | None = None
    high: float | None = None
    above: float | None = None
    null: bool = False
    also: tuple[str, ...] = ()
    length: int | None = None
    check: Callable[[Any], str | None] | None = None

    def validate(self, key: str, value: Any) -> Any:
        """``value`` as the key holds it (a size as ``[h, w]``), or :class:`ConfigError`."""
        if value is None:
            if self.null:
                return None
            raise ConfigError(f"{key} must be set ({self.describe()}), got null")
        if isinstance(value, str) and value in self.also:
            return value
        try:
            checked = _KINDS[self.kind](self, value)
        except (TypeError, ValueError) as err:
            raise ConfigError(f"{key} must be {self.describe()}, got {value!r}") from err
        problem = self._range(checked)
        if problem is None and self.check is not None:
            problem = self.check(checked)
        if problem:
            raise ConfigError(f"{key} must be {problem}, got {value!r}")
        return checked

    def _range(self, value: Any) -> str | None:
        numbers = value if isinstance(value, list) else [value]
        if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in numbers):
            return None
        for v in numbers:
            if self.low is not None and v < self.low:
                return f"{self.describe()}"
            if self.high is not None and v > self.high:
                return f"{self.describe()}"
            if self.above is not None and v <= self.above:
                return f"{self.describe()}"
        return None

    def describe(self) -> str:
        """What the key takes, in words: "an integer >= 1", "one of O0, O1, O2"."""
        if self.kind == "choice":
            text = "one of " + ", ".join(self.choices)
        elif self.kind == "names":
            text = "a list of names, each once, of " + ", ".join(self.choices) + " ([] for none)"
        else:
            text = _WORDS[self.kind]
            bounds = []
            if self.above is not None:
                bounds.append(f"> {self.above:g}")
            if self.low is not None:
                bounds.append(f">= {self.low:g}")
            if self.high is not None:
                bounds.append(f"<= {self.high:g}")
            if bounds:
                text += " " + " and ".join(bounds)
            if self.length is not None:
                text += f" ({self.length} of them)"
        extra = [*self.also, *(["null"] if self.null else [])]
        if extra:
            text += ", or " + " or ".join(extra)
        return text


def _int(spec: Spec, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, float) and value.is_integer():
            raise ValueError("a float")  # 2.0 is not an epoch count: say so
        raise ValueError("not an integer")
    return int(value)


def _float(spec: Spec, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError("not a number")
    if not math.isfinite(float(value)):
        raise ValueError("not finite")
    return float(value)


def _bool(spec: Spec, value: Any) -> bool:
    if not isinstance(value, bool):
        raise ValueError("not a bool")
    return value


def _str(spec: Spec, value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError("not text")
    return value


def _choice(spec: Spec, value: Any) -> str:
    if not isinstance(value, str) or value not in spec.choices:
        raise ValueError("not a choice")
    return value


def _size(spec: Spec, value: Any) -> list[int]:
    """An input size: one number (a square) or [h, w], positive multiples of
    :data:`SIZE_STRIDE`. The one check of a size: everything after the config reads it."""
    values = list(value) if isinstance(value, (list, tuple)) else [value, value]
    if len(values) != 2:
        raise ValueError("two numbers")
    out = [_int(spec, v) for v in values]
    if any(v < SIZE_STRIDE or v % SIZE_STRIDE for v in out):
        raise ValueError("multiples of the stride")
    return out


def _list(item: Callable[[Spec, Any], Any]) -> Callable[[Spec, Any], list]:
    def check(spec: Spec, value: Any) -> list:
        if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
            raise ValueError("not a list")
        if spec.length is not None and len(value) != spec.length:
            raise ValueError("wrong length")
        return [item(spec, v) for v in value]

    return check


def _names(spec: Spec, value: Any) -> list[str]:
    """Names as a list, one name, or names separated by commas (``mlflow,swanlab``, as typed
    on a command line; ``[mlflow, swanlab]`` typed verbatim too), each one of ``choices``
    once."""
    if isinstance(value, str):
        value = [v for v in value.strip().strip("[]").split(",") if v.strip()]
    if isinstance(value, bytes) or not isinstance(value, Sequence):
        raise ValueError("not names")
    names = [str(v).strip().strip("'\"") for v in value]
    if any(n not in spec.choices for n in names) or len(set(names)) != len(names):
        raise ValueError("not the names it takes")
    return names


def _level(spec: Spec, value: Any) -> int:
    """true/false or a number (IR dump levels: true is 1)."""
    return int(value) if isinstance(value, bool) else _int(spec, value)


def _any(spec: Spec, value: Any) -> Any:
    return value


_KINDS: dict[str, Callable[[Spec, Any], Any]] = {
    "int": _int,
    "float": _float,
    "bool": _bool,
    "str": _str,
    "choice": _choice,
    "size": _size,
    "floats": _list(_float),
    "ints": _list(_int),
    "strs": _list(_str),
    "names": _names,
    "level": _level,
    "any": _any,
}
_WORDS = {
    "int": "an integer",
    "float": "a number",
    "bool": "true or false",
    "str": "text",
    "size": f"a size in pixels, one number or [h, w], multiples of {SIZE_STRIDE}",
    "floats": "a list of numbers",
    "ints": "a list of integers",
    "strs": "a list of names",
    "level": "true, false or a level",
    "any": "a value",
}


def _plain_folder_name(value: str) -> str | None:
    """run.name is one folder under runs/<command>/: '..' would be runs/ itself."""
    if value and value not in (".", "..") and "/" not in value and "\\" not in value:
        return None
    return "a plain folder name (not '.' or '..', no '/'); run.dir=PATH names any folder"


def _ascending(values: list) -> str | None:
    return None if values == sorted(set(values)) else "ascending without repeats"


def _range_pair(values: list) -> str | None:
    return None if values[0] <= values[1] else "[low, high] with low <= high"


def _plus_names(value: str) -> str | None:
    return None if value.strip() and "+" not in (value[0], value[-1]) else "kernel names"


INT_POSITIVE = Spec("int", low=1)
INT_COUNT = Spec("int", low=0)
PROB = Spec("float", low=0, high=1)
PATH_OR_NULL = Spec("str", null=True)

# Every key of every config group option, by its dotted path. ``model``, ``data``, ``train``
# and ``runtime`` are groups (configs/<group>/*.yaml); the rest are configs/config.yaml's.
SCHEMA: dict[str, Spec] = {
    # model
    "model.name": Spec("str"),
    "model.depth": Spec("float", above=0),
    "model.width": Spec("float", above=0),
    "model.depthwise": Spec("bool"),
    "model.act": Spec("choice", choices=("silu", "relu", "lrelu")),
    "model.num_classes": Spec("int", low=1, null=True),
    "model.prior_prob": Spec("float", above=0, high=0.5),
    "model.backbone": Spec("choice", choices=("cspdarknet", "darknet53")),
    "model.neck": Spec("choice", choices=("pafpn", "yolofpn")),
    "model.in_channels": Spec("ints", low=1, length=3),
    # data
    "data.name": Spec("str"),
    "data.num_train": INT_POSITIVE,
    "data.num_val": INT_POSITIVE,
    "data.seed": INT_COUNT,
    "data.classes": Spec("strs"),
    "data.min_object_size": Spec("int", low=1),
    "data.cache_dir": Spec("str", null=True),  # null: msdet's cache root (common/cache.py)
    "data.root": PATH_OR_NULL,
    "data.train.ann_file": Spec("str", null=True),  # null: found in data.root
    "data.train.img_dir": Spec("str", null=True),  # null: found in data.root
    "data.val.ann_file": Spec("str", null=True),  # null: found in data.root
    "data.val.img_dir": Spec("str", null=True),  # null: found in data.root
    "data.img_size": Spec("size"),
    "data.max_objects": INT_POSITIVE,
    "data.target_buckets": Spec("ints", low=1, check=_ascending),
    "data.num_workers": Spec("int", low=1, also=("auto",)),
    "data.python_multiprocessing": Spec("bool"),
    "data.layout": Spec("choice", choices=("bgr255",)),
    "data.aug.mosaic_prob": PROB,
    "data.aug.mixup_prob": PROB,
    "data.aug.hsv_prob": PROB,
    "data.aug.flip_prob": PROB,
    "data.aug.degrees": Spec("float", low=0, high=180),
    "data.aug.translate": Spec("float", low=0, high=0.5),
    "data.aug.shear": Spec("float", low=0, high=45),
    "data.aug.mosaic_scale": Spec("floats", above=0, length=2, check=_range_pair),
    "data.aug.mixup_scale": Spec("floats", above=0, length=2, check=_range_pair),
    # train
    "train.name": Spec("str"),
    "train.epochs": INT_POSITIVE,
    "train.batch_size": INT_POSITIVE,
    "train.img_scale": Spec("float", above=0, high=4),
    "train.input_size": Spec("size"),  # derived by load_config, never typed (config.DERIVED)
    "train.recipe": Spec("str"),  # derived, as train.input_size
    "train.weights_optional": Spec("bool"),  # derived, as train.input_size
    "train.lr_per_img": Spec("float", above=0),
    "train.warmup_epochs": Spec("float", low=0),
    "train.warmup_lr": Spec("float", low=0),
    "train.min_lr_ratio": Spec("float", low=0, high=1),
    "train.no_aug_epochs": INT_COUNT,
    "train.momentum": Spec("float", low=0, high=1),
    "train.nesterov": Spec("bool"),
    "train.weight_decay": Spec("float", low=0),
    "train.ema": Spec("bool"),
    "train.ema_decay": Spec("float", above=0, high=1),
    "train.clip_grad_norm": Spec("float", above=0, null=True),
    "train.accumulate": INT_POSITIVE,
    "train.recompute": Spec("choice", choices=("none", "backbone", "all")),
    "train.eval_interval": INT_POSITIVE,
    "train.keep_last": INT_COUNT,
    "train.patience": INT_COUNT,
    "train.resume": Spec("str", null=True),
    "train.overwrite": Spec("bool"),
    "train.stop_at_epoch": Spec("int", low=1, null=True),
    "train.time_limit_min": Spec("float", above=0, null=True),
    "train.pretrained": PATH_OR_NULL,
    "train.pretrained_strict": Spec("bool"),
    "train.freeze": Spec("choice", choices=("none", "backbone", "backbone+neck")),
    "train.log_interval": INT_POSITIVE,
    "train.max_steps_per_epoch": Spec("int", low=1, null=True),
    "train.tensorboard": Spec("bool"),
    "train.track": Spec("names", choices=("mlflow", "swanlab")),
    "train.mlflow_uri": PATH_OR_NULL,
    "train.swanlab_mode": Spec("choice", choices=("offline", "local", "cloud")),
    "train.track_project": Spec("str"),
    "train.vis_images": INT_COUNT,
    "train.assigner.rule": Spec("choice", choices=("yolox-0.3.0", "yolox-latest")),
    "train.assigner.center_radius": Spec("float", above=0, null=True),
    "train.loss.iou_weight": Spec("float", low=0),
    "train.multiscale_range": INT_COUNT,
    "train.multiscale_interval": INT_POSITIVE,
    # runtime
    "runtime.device": Spec("choice", choices=("auto", "CPU", "GPU", "Ascend")),
    "runtime.mode": Spec("choice", choices=("graph", "pynative")),
    "runtime.loop": Spec("choice", choices=("model", "jit")),
    "runtime.seed": INT_COUNT,
    "runtime.amp": Spec("choice", choices=("auto", "O0", "O1", "O2", "O3")),
    "runtime.loss_scale": Spec("float", above=0),
    "runtime.sink": Spec("bool", also=("auto",)),
    "runtime.sink_size": Spec("int", low=-1),
    "runtime.jit_level": Spec("choice", choices=("O0", "O1", "O2"), null=True),
    "runtime.fusion": Spec("choice", choices=("off", "safe", "all")),
    "runtime.threads": Spec("int", low=1, null=True),
    "runtime.compile_cache": Spec("bool"),
    "runtime.cpu_kernels": Spec("str", check=_plus_names),
    "runtime.deterministic": Spec("bool"),
    "runtime.distributed": Spec("bool"),
    "runtime.sync_bn": Spec("bool"),
    "runtime.precision_mode": Spec("str"),
    "runtime.save_graphs": Spec("level", low=0, high=3),
    "runtime.profile_steps": INT_COUNT,
    "runtime.check_finite": Spec("bool"),
    # eval, predict, export, the run folder, and the commands' inputs
    "eval.img_size": Spec("size", null=True),  # null: data.img_size (config.resolve_sizes)
    "eval.batch_size": INT_POSITIVE,
    "eval.conf_thresh": Spec("float", low=0, high=1),
    "eval.nms_iou": Spec("float", above=0, high=1),
    "eval.pre_nms_topk": Spec("int", low=1, high=2864),
    "eval.max_det": INT_POSITIVE,
    "eval.class_agnostic": Spec("bool"),
    "eval.class_map": Spec("choice", choices=("strict", "by_name")),
    "predict.conf": Spec("float", low=0, high=1),
    "predict.save_txt": Spec("bool"),
    "predict.save_conf": Spec("bool"),
    "predict.max_frames": Spec("int", low=1, null=True),
    "export.format": Spec(
        "str", check=lambda v: None if v.upper() in ("MINDIR", "ONNX") else "MINDIR or ONNX"
    ),
    "export.with_nms": Spec("bool"),
    "export.batch_size": INT_POSITIVE,
    "export.out": PATH_OR_NULL,
    "export.val": Spec("bool"),
    "run.dir": PATH_OR_NULL,
    "run.name": Spec("str", null=True, check=_plain_folder_name),
    "run.root": Spec("str"),
    "ckpt": PATH_OR_NULL,
    "source": Spec("any", null=True),
}
