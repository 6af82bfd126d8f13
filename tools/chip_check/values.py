"""The largest magnitude each operator's inputs reach in a few real training steps on this
CPU, from MindSpore's own dump of operator inputs.

A chip that runs a float32 operator in float16 (the precision mode casts it: no float32
kernel there) overflows where the operator's inputs exceed float16's 65,504. The training
step runs in a child process (MindSpore reads ``MINDSPORE_DUMP_CONFIG`` when it starts) on a
small generated shapes set, with a dump of the inputs of the named operator types only;
this process reads the ``.npy`` files. On CPU MindSpore dumps whole tensors (its
``statistic`` mode is for GPU and Ascend).

    python -m msdet.tools.chip_check.values --out DIR --prims TopK,Neg [--steps 3]
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile

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


def largest_inputs(dump_dir: str) -> dict[str, float]:
    """Operator type -> the largest finite |value| among its dumped inputs (inf where an input
    held a non-finite value)."""
    out: dict[str, float] = {}
    names: dict[str, str] = {}  # names too long for the file system: <hash>.npy -> real name
    for mapping in glob.glob(os.path.join(dump_dir, "rank_*", "*", "*", "*", "mapping.csv")):
        folder = os.path.dirname(mapping)
        with open(mapping, encoding="utf-8") as f:
            for line in f:
                short, _, real = line.rstrip("\n").partition(",")
                names[os.path.join(folder, short)] = real
    for path in glob.glob(os.path.join(dump_dir, "rank_*", "*", "*", "*", "*.npy")):
        op_type = os.path.basename(names.get(path, path)).split(".")[0]
        values = np.load(path)
        if values.dtype.kind not in "fiu" or values.size == 0:
            continue
        largest = float(np.abs(values.astype(np.float64)).max())
        if values.dtype.kind == "f" and not np.isfinite(values).all():
            largest = float("inf")
        out[op_type] = max(out.get(op_type, 0.0), largest)
    return out


def measure(prims: list[str], steps: int = 3, img: int = 128, batch: int = 2) -> dict[str, float]:
    """:func:`largest_inputs` of ``steps`` training steps of YOLOX-nano on generated shapes."""
    if not prims:
        return {}
    with tempfile.TemporaryDirectory(prefix="msdet-values-") as work:
        config = os.path.join(work, "dump.json")
        with open(config, "w", encoding="utf-8") as f:
            json.dump(dump_config(os.path.join(work, "dump"), prims), f)
        cmd = [sys.executable, "-m", "msdet.tools.chip_check.values", "--run",
               "--steps", str(steps), "--img", str(img), "--batch", str(batch),
               "--data", os.path.join(work, "data")]  # fmt: skip
        done = subprocess.run(
            cmd, env={**os.environ, DUMP_VAR: config}, capture_output=True, text=True
        )
        if done.returncode != 0:
            raise RuntimeError(f"the dumped training steps failed:\n{done.stderr[-2000:]}")
        return largest_inputs(os.path.join(work, "dump"))


def run_steps(steps: int, img: int, batch: int, data_dir: str) -> None:
    """The child: ``steps`` float32 training steps of YOLOX-nano on a generated shapes set, on
    MindSpore's operators (what a card runs)."""
    from msdet.common.config import load_config
    from msdet.engine.runtime.process import setup_runtime

    cfg = load_config("tool", ["runtime=cpu", "runtime.cpu_kernels=native", f"data.img_size={img}",
                               f"data.num_train={4 * batch}", "data.num_val=2",
                               f"data.cache_dir={data_dir}"])  # fmt: skip
    rt = setup_runtime(cfg.runtime, data_dir)
    import mindspore as ms

    from msdet.data.build import build_sources
    from msdet.data.pipeline import AugmentParams, TrainSamples
    from msdet.engine.training.optim import yolox_lr_schedule
    from msdet.engine.training.step import build_train_step
    from msdet.models.loss import YOLOXLoss
    from msdet.models.yolox import build_model

    train, _ = build_sources(cfg.data)
    samples = TrainSamples(train, (img, img), int(cfg.data.max_objects),
                           AugmentParams.from_config(cfg.data.aug), 0, 5, 1)  # fmt: skip
    net = build_model(cfg.model, train.num_classes)
    step = build_train_step(net, YOLOXLoss(train.num_classes),
                            yolox_lr_schedule(0.01, steps, 1, 0, 0), cfg.train, rt)  # fmt: skip
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
    args = parser.parse_args()
    if args.run:
        run_steps(args.steps, args.img, args.batch, args.data)
    else:
        print(json.dumps(measure(args.prims.split(","), args.steps, args.img, args.batch)))
