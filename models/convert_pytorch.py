"""Convert a PyTorch YOLOX checkpoint into a msdet (MindSpore) checkpoint.

    python -m msdet.models.convert_pytorch --model yolox_nano --src yolox_nano.pth --dst yolox_nano.ckpt

Accepts the release format ``{"model": state_dict, ...}`` and a bare state_dict. Names map
1:1 except BatchNorm (weight/bias/running_mean/running_var -> gamma/beta/moving_mean/
moving_variance; num_batches_tracked dropped). Any unmatched or mis-shaped key stops the
conversion by name; no partial checkpoint is written, and an existing ``--dst`` is
replaced only with ``--force``. PyTorch is not needed: the .pth file is read by
:mod:`models.torch_pickle`, which refuses a file that would run code.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from collections.abc import Mapping
from typing import Any

import numpy as np

from msdet.models.description import DESCRIPTION_KEY, coco_or_numbered, describe
from msdet.models.torch_pickle import TorchCheckpointError, is_storage, load_torch_file

log = logging.getLogger(__name__)

BN_RENAMES = {
    "weight": "gamma",
    "bias": "beta",
    "running_mean": "moving_mean",
    "running_var": "moving_variance",
}
CLS_PRED_KEY = "head.cls_preds.0.weight"


class ConversionError(ValueError):
    """The PyTorch weights do not map onto the MindSpore model."""


def mindspore_name(torch_key: str) -> str | None:
    """MindSpore parameter name for a PyTorch state_dict key (None: key has no counterpart)."""
    module, _, leaf = torch_key.rpartition(".")
    if leaf == "num_batches_tracked":
        return None
    if module.endswith(".bn") or module == "bn":
        return f"{module}.{BN_RENAMES.get(leaf, leaf)}"
    return torch_key


def extract_state_dict(obj: Any, src: str = "checkpoint") -> Mapping[str, Any]:
    """The state_dict inside a YOLOX release checkpoint (``{"model": ...}``) or a bare one.
    A file without a tensor, or whose values are bare storages, is a
    :class:`ConversionError` saying what it holds instead."""
    if isinstance(obj, Mapping) and "model" in obj and isinstance(obj["model"], Mapping):
        obj = obj["model"]
    if not isinstance(obj, Mapping) or not obj:
        raise ConversionError(f"{src}: expected a state_dict or {{'model': state_dict}}")
    # DataParallel/DDP checkpoints prefix every key with "module.".
    if all(isinstance(k, str) and k.startswith("module.") for k in obj):
        obj = {k[len("module.") :]: v for k, v in obj.items()}
    storages = [str(k) for k, v in obj.items() if is_storage(v)]
    if storages:
        raise ConversionError(
            f"{src}: {len(storages)} of its {len(obj)} values are bare storages ("
            f"{_first(storages)}): a tensor's raw numbers without its shape (torch.save of "
            "tensor.storage()); save the model's state_dict() instead"
        )
    if not any(_is_tensor(v) for v in obj.values()):
        raise ConversionError(
            f"{src}: holds no tensor: {_contents(obj)}; a YOLOX checkpoint is the model's "
            "state_dict(), or {'model': state_dict, ...} as YOLOX saves it"
        )
    return obj


def _is_tensor(value: Any) -> bool:
    return isinstance(value, np.ndarray) or hasattr(value, "detach")


def _first(names: list[str], n: int = 3) -> str:
    return ", ".join(names[:n]) + (f" and {len(names) - n} more" if len(names) > n else "")


def _contents(obj: Mapping[str, Any]) -> str:
    """What a checkpoint holds, in a few words: its keys with their types."""
    items = [f"{k} ({type(v).__name__})" for k, v in list(obj.items())[:4]]
    more = f" and {len(obj) - 4} more" if len(obj) > 4 else ""
    return f"{len(obj)} entries: {', '.join(items)}{more}"


def infer_num_classes(state_dict: Mapping[str, Any]) -> int:
    """Class count from the first classification conv (its output channels)."""
    if CLS_PRED_KEY not in state_dict:
        raise ConversionError(f"no {CLS_PRED_KEY!r} in the state_dict: not a YOLOX model")
    return int(state_dict[CLS_PRED_KEY].shape[0])


def convert_state_dict(
    state_dict: Mapping[str, Any], expected: Mapping[str, tuple[int, ...]]
) -> dict[str, np.ndarray]:
    """Rename and check a PyTorch state_dict against the MindSpore model's parameter shapes.

    ``expected`` maps MindSpore parameter names to shapes. Raises
    :class:`ConversionError` listing every unmatched, missing or mis-shaped key.
    """
    out: dict[str, np.ndarray] = {}
    seen: set[str] = set()
    unmatched, misshaped = [], []
    for key, value in state_dict.items():
        name = mindspore_name(key)
        if name is None:
            continue
        seen.add(name)
        array = value.detach().cpu().numpy() if hasattr(value, "detach") else np.asarray(value)
        if name not in expected:
            unmatched.append(key)
        elif tuple(array.shape) != tuple(expected[name]):
            misshaped.append(f"{key}: {tuple(array.shape)} vs {tuple(expected[name])} ({name})")
        else:
            out[name] = array.astype(np.float32)
    missing = sorted(set(expected) - seen)
    problems = []
    if unmatched:
        problems.append("PyTorch keys with no MindSpore parameter: " + ", ".join(unmatched))
    if misshaped:
        problems.append("shape mismatches (torch vs mindspore): " + "; ".join(misshaped))
    if missing:
        problems.append(
            "MindSpore parameters missing from the PyTorch weights: " + ", ".join(missing)
        )
    if problems:
        raise ConversionError("\n".join(problems))
    return out


def load_torch_checkpoint(path: str) -> Mapping[str, Any]:
    """The state_dict of a .pth file, as numpy arrays, read without PyTorch.

    A checkpoint whose pickle would call anything but the tensor-rebuild functions is
    refused before any of it runs (see :mod:`models.torch_pickle`).
    """
    try:
        obj = load_torch_file(path)
    except TorchCheckpointError as err:
        raise ConversionError(str(err)) from err
    return extract_state_dict(obj, path)


def convert_to_network(state_dict: Mapping[str, Any], model: str, num_classes: int | None = None):
    """Build the msdet model for ``state_dict`` and load the converted weights into it."""
    import mindspore as ms

    from msdet.models.yolox import build_model, load_model_config

    classes = num_classes or infer_num_classes(state_dict)
    net = build_model(load_model_config(model), classes)
    expected = {name: tuple(p.shape) for name, p in net.parameters_and_names()}
    arrays = convert_state_dict(state_dict, expected)
    params = {k: ms.Parameter(ms.Tensor(v), name=k) for k, v in arrays.items()}
    ms.load_param_into_net(net, params, strict_load=True)
    return net


# The original's test sizes (its exps' test_size): the input size a converted checkpoint
# describes unless --img-size says otherwise.
YOLOX_TEST_SIZE = {"yolox_nano": 416, "yolox_tiny": 416}
DEFAULT_TEST_SIZE = 640


def read_class_names(text: str | None, num_classes: int) -> tuple[list[str], list[int], str]:
    """(names, category ids, where they came from) for ``--class-names``: a file with one
    name per line, or a comma-separated list; without it the COCO names for 80 classes."""
    if not text:
        return coco_or_numbered(num_classes)
    if os.path.isfile(text):
        with open(text, encoding="utf-8") as f:
            names = [line.strip() for line in f if line.strip()]
        origin = text
    else:
        names = [n.strip() for n in text.split(",") if n.strip()]
        origin = "--class-names"
    if len(names) != num_classes:
        raise ConversionError(
            f"{origin}: {len(names)} class names for a {num_classes}-class checkpoint"
        )
    return names, list(range(num_classes)), origin


def convert_file(
    src: str,
    dst: str,
    model: str,
    num_classes: int | None = None,
    class_names: str | None = None,
    img_size: int | None = None,
) -> int:
    """Convert ``src`` (.pth) into ``dst`` (.ckpt) with its description (class names: see
    :func:`read_class_names`; input size: the original's test size unless ``img_size``);
    returns the number of tensors written."""
    import mindspore as ms

    from msdet.models.yolox import load_model_config

    if not dst.endswith(".ckpt"):
        raise ConversionError(f"--dst must end with .ckpt (MindSpore appends it otherwise): {dst}")
    # Stage lines with their times: even yolox_l converts in seconds, mostly one MindSpore
    # call (building the network), which no progress bar could divide.
    started = time.perf_counter()
    state_dict = load_torch_checkpoint(src)
    log.info("read %d tensors from %s (%.1f s)", len(state_dict), src, _since(started))
    started = time.perf_counter()
    net = convert_to_network(state_dict, model, num_classes)
    log.info("built %s with the converted weights (%.1f s)", model, _since(started))
    names, ids, origin = read_class_names(class_names, net.num_classes)
    log.info("class names: %s", origin)
    size = int(img_size or YOLOX_TEST_SIZE.get(model, DEFAULT_TEST_SIZE))
    description = describe(
        load_model_config(model), net.num_classes, names, ids, [size, size], "convert"
    )
    os.makedirs(os.path.dirname(os.path.abspath(dst)), exist_ok=True)
    tmp = dst[: -len(".ckpt")] + ".partial.ckpt"
    started = time.perf_counter()
    ms.save_checkpoint(net, tmp, append_dict={DESCRIPTION_KEY: description.to_json()})
    os.replace(tmp, dst)  # never leave a partial file under the final name
    log.info("wrote %s (%.1f s)", dst, _since(started))
    return len(net.parameters_dict())


def _since(started: float) -> float:
    return time.perf_counter() - started


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point."""
    from msdet.models.yolox import model_names

    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", required=True, choices=model_names())
    parser.add_argument("--src", required=True, help="PyTorch .pth checkpoint")
    parser.add_argument("--dst", required=True, help="MindSpore .ckpt to write")
    parser.add_argument("--num-classes", type=int, default=None, help="default: from the head")
    parser.add_argument(
        "--class-names",
        help="a file with one name per line, or a,b,c (default: COCO's for 80 classes)",
    )
    parser.add_argument(
        "--img-size", type=int, help="the input size to describe (default: the original's)"
    )
    parser.add_argument("--force", action="store_true", help="replace an existing --dst")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    if os.path.exists(args.dst) and not args.force:
        print(f"--dst {args.dst} exists: pass --force to replace it", file=sys.stderr)
        return 1
    try:
        n = convert_file(
            args.src, args.dst, args.model, args.num_classes, args.class_names, args.img_size
        )
    except ConversionError as err:
        print(f"conversion failed for {args.src}:\n{err}", file=sys.stderr)
        return 1
    print(f"wrote {args.dst}: {n} tensors ({args.model})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
