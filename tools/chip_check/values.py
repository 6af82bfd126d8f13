"""The largest magnitude each operator's inputs reach in a few real training steps on this
CPU, from MindSpore's own dump of operator inputs.

A chip that runs a float32 operator in float16 (the precision mode casts it: no float32
kernel there) overflows where the operator's inputs exceed float16's 65,504. The training
step of the model and input size being checked (the command's ``model``/``train``
settings and ``--img``) runs in a child process (MindSpore reads ``MINDSPORE_DUMP_CONFIG``
when it starts) on a small generated shapes set, in float32, with a dump of the inputs of
the named operator types only; this process reads the ``.npy`` files. The answer is keyed
per operator instance (:func:`value_key`: type, first input's shape, the cells it sits in),
per type and shape, and per type, so that a graph's operator takes the most specific
measurement there is (:func:`largest_for`). On CPU MindSpore dumps whole tensors (its
``statistic`` mode is for GPU and Ascend).

    python -m msdet.tools.chip_check.values --prims TopK,Neg [--steps 3] [key=value ...]
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile
from typing import Any

import numpy as np

DUMP_VAR = "MINDSPORE_DUMP_CONFIG"


def dump_config(out_dir: str, prims: list[str]) -> dict:
    """MindSpore's dump settings for the inputs of the operator types ``prims``, every step."""
    return {
        "common_dump_settings": {
            "op_debug_mode": 0,
            "dump_mode": 1,  # only the kernels named (operator types match)
            "path": os.path.abspath(out_dir),
            "net_name": "msdet",
            "iteration": "all",
            "saved_data": "tensor",
            "input_output": 1,  # inputs
            "kernels": list(prims),
            "support_device": list(range(8)),
        },
        "e2e_dump_settings": {"enable": True, "trans_flag": True},
    }


# Cells wrapped by AMP's cast (O2/O3) or multi-scale resizing: left out of an instance's cell
# path, so that the float32 measurement run and the graph being checked name it alike.
WRAPPERS = ("network-_OutputTo32", "_backbone-")


def _plain_path(path: str) -> str:
    """A cell path with '/' as MindSpore's dump writes it ('_') and AMP's wrappers removed."""
    parts = [p for p in path.replace("/", "_").split("_") if p]
    text = "_".join(parts)
    for wrapper in WRAPPERS:
        text = text.replace(wrapper, "")
    return text


def value_key(op_type: str, shape: Any = None, path: str | None = None) -> str:
    """The key of a measurement: the operator type, with its first input's shape, with the
    cells it sits in (:func:`msdet.tools.chip_check.ir.cell_path`)."""
    key = op_type
    if shape is not None:
        key += "|" + "x".join(str(int(d)) for d in shape)
        if path is not None:
            key += "|" + _plain_path(path)
    return key


def largest_for(largest: dict[str, float], op_type: str, shape: Any, path: str):
    """(value, how specific) of the most specific measurement for an operator: its instance,
    else its type and shape, else its type; (None, None) without one."""
    keys = []
    if isinstance(shape, list) and all(isinstance(d, int) for d in shape):
        keys = [(value_key(op_type, shape, path), "instance"), (value_key(op_type, shape), "shape")]
    for key, level in [*keys, (op_type, "type")]:
        if key in largest:
            return largest[key], level
    return None, None


def largest_inputs(dump_dir: str) -> dict[str, float]:
    """:func:`value_key` -> the largest finite |value| among the dumped inputs of those
    operators (inf where an input held a non-finite value)."""
    out: dict[str, float] = {}
    names: dict[str, str] = {}  # names too long for the file system: <hash>.npy -> real name
    for mapping in glob.glob(os.path.join(dump_dir, "rank_*", "*", "*", "*", "mapping.csv")):
        folder = os.path.dirname(mapping)
        with open(mapping, encoding="utf-8") as f:
            for line in f:
                short, _, real = line.rstrip("\n").partition(",")
                names[os.path.join(folder, short)] = real
    per_op: dict[str, list] = {}  # an operator's name -> [type, first input's shape, largest]
    for path in glob.glob(os.path.join(dump_dir, "rank_*", "*", "*", "*", "*.npy")):
        # <type>.<scope with _ for />_<type>-op<n>.<...>.input.<i>.<format>.<dtype>.npy
        parts = os.path.basename(names.get(path, path)).split(".")
        op_type, op_name = parts[0], parts[1] if len(parts) > 1 else ""
        index = parts[parts.index("input") + 1] if "input" in parts else "0"
        values = np.load(path)
        entry = per_op.setdefault(op_name, [op_type, None, 0.0])
        if index == "0":
            entry[1] = values.shape
        if values.dtype.kind not in "fiu" or values.size == 0:
            continue
        largest = float(np.abs(values.astype(np.float64)).max())
        if values.dtype.kind == "f" and not np.isfinite(values).all():
            largest = float("inf")
        entry[2] = max(entry[2], largest)
    for op_name, (op_type, shape, largest) in per_op.items():
        path = op_name.rsplit("_", 1)[0]  # the cells, without "<type>-op<n>"
        keys = [op_type]
        if shape is not None:
            keys += [value_key(op_type, shape), value_key(op_type, shape, path)]
        for key in keys:
            out[key] = max(out.get(key, 0.0), largest)
    return out


def measure(
    prims: list[str],
    steps: int = 3,
    img: int = 128,
    batch: int = 2,
    overrides: list[str] | tuple[str, ...] = (),
) -> dict[str, float]:
    """:func:`largest_inputs` of ``steps`` float32 training steps on generated shapes, of the
    model and settings ``overrides`` name (their ``model``/``train`` keys: the data is
    always the generated set) at ``img`` px."""
    if not prims:
        return {}
    with tempfile.TemporaryDirectory(prefix="msdet-values-") as work:
        config = os.path.join(work, "dump.json")
        with open(config, "w", encoding="utf-8") as f:
            json.dump(dump_config(os.path.join(work, "dump"), prims), f)
        cmd = [sys.executable, "-m", "msdet.tools.chip_check.values", "--run",
               "--steps", str(steps), "--img", str(img), "--batch", str(batch),
               "--data", os.path.join(work, "data"), *model_overrides(overrides)]  # fmt: skip
        done = subprocess.run(
            cmd, env={**os.environ, DUMP_VAR: config}, capture_output=True, text=True
        )
        if done.returncode != 0:
            raise RuntimeError(f"the dumped training steps failed:\n{done.stderr[-2000:]}")
        return largest_inputs(os.path.join(work, "dump"))


def model_overrides(overrides) -> list[str]:
    """The settings of ``overrides`` that shape the network and its training step (model and
    train keys); data and runtime ones are the measurement's own."""
    return [o for o in overrides if o.split("=", 1)[0].split(".")[0] in ("model", "train")]


def run_steps(steps: int, img: int, batch: int, data_dir: str, overrides=()) -> None:
    """The child: ``steps`` float32 training steps on a generated shapes set, of the model
    ``overrides`` name (default YOLOX-nano), on MindSpore's operators (what a card runs)."""
    from msdet.common.config import load_config
    from msdet.engine.runtime.process import setup_runtime

    cfg = load_config("tool", ["runtime=cpu", "runtime.cpu_kernels=native", f"data.img_size={img}",
                               f"data.num_train={4 * batch}", "data.num_val=2",
                               f"data.cache_dir={data_dir}", *overrides])  # fmt: skip
    rt = setup_runtime(cfg.runtime, data_dir)
    import mindspore as ms

    from msdet.data.build import build_sources
    from msdet.data.pipeline import AugmentParams, TrainSamples
    from msdet.engine.training.schedule import yolox_lr_schedule
    from msdet.engine.training.step import build_train_step
    from msdet.models.loss import YOLOXLoss
    from msdet.models.yolox import build_model

    train, _ = build_sources(cfg.data)
    samples = TrainSamples(train, (img, img), int(cfg.data.max_objects),
                           AugmentParams.from_config(cfg.data.aug), 0, 5, 1)  # fmt: skip
    from msdet.tools.chip_check.graphs import NUM_CLASSES

    # The check's class count (its graphs' shapes); the generated classes are among them.
    net = build_model(cfg.model, NUM_CLASSES)
    loss = YOLOXLoss(NUM_CLASSES, assigner_rule=str(cfg.train.assigner.rule))
    step = build_train_step(net, loss, yolox_lr_schedule(0.01, steps, 1, 0, 0), cfg.train, rt)
    for s in range(steps):
        items = [samples[s * batch + i] for i in range(batch)]
        images, targets, mask = (np.stack(parts) for parts in zip(*items))
        step(ms.Tensor(images), ms.Tensor(targets), ms.Tensor(mask))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--prims", default="TopK")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--img", type=int, default=128)
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--data", default=None)
    parser.add_argument("overrides", nargs="*", help="model and train settings")
    args = parser.parse_args()
    if args.run:
        run_steps(args.steps, args.img, args.batch, args.data, args.overrides)
    else:
        found = measure(args.prims.split(","), args.steps, args.img, args.batch, args.overrides)
        print(json.dumps(found))
