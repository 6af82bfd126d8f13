"""The columns of MindYOLO's published YOLOX table, for msdet on this machine.

    python -m bench.device [--cards N] [--steps 20] [model=yolox_s data.img_size=640 ...]
    python -m bench.device --epochs 3 [--cards N] [model=... data=coco data.root=...]

Step mode (default): every rank runs msdet's training step (``engine.trainer.
build_train_step``: the run's AMP level, loss scaling, EMA; 80 classes, a synthetic batch of
``train.batch_size`` images at ``data.img_size``), and rank 0 reports ms/step (median after
warm-up), images/s over all ranks, the graph compile time, peak device memory (MindSpore's
memory pool on Ascend/GPU; resident memory on CPU) and the machine. Several cards run through
``scripts/run_distributed_train.sh`` (msrun). ``--epochs N`` instead runs ``train.py`` for N
epochs with the same overrides and reports its figures from the run folder, mAP included.

MindYOLO's YOLOX-s on 8x Ascend 910 (its README): 244 ms/step, 262 img/s, 202 s compile,
mAP 40.7 (batch 8 per card, 640 px, 300 epochs). The last line is ``RESULT {json}``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

from msdet.bench.common import print_header, print_result
from msdet.common.config import ROOT

STEP_ENTRY = os.path.join(ROOT, "bench", "device_step.py")
LAUNCHER = os.path.join(ROOT, "scripts", "run_distributed_train.sh")
RESULT_FILE = "device_bench.json"
COLUMNS = (
    "model",
    "cards",
    "batch/card",
    "img",
    "ms/step",
    "img/s",
    "compile s",
    "peak mem GiB",
    "mAP",
)


def launch(entry: str, cards: int, overrides: list[str], run_dir: str) -> None:
    """``entry`` on ``cards`` ranks (msrun through the launcher) or in this process's place."""
    args = [*overrides, f"run.dir={run_dir}"]
    if cards > 1:
        env = {**os.environ, "TRAIN_ENTRY": entry}
        env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
        cmd = ["bash", LAUNCHER, str(cards), *args]
    else:
        env, cmd = dict(os.environ), [sys.executable, entry, *args]
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")


def from_training(run_dir: str) -> dict:
    """The table's figures from a train.py run folder."""
    from msdet.engine.training.run_record import read_results

    rows = read_results(run_dir)
    with open(os.path.join(run_dir, "metrics.json"), encoding="utf-8") as f:
        metrics = json.load(f)
    with open(os.path.join(run_dir, "train.log"), encoding="utf-8") as f:
        text = f.read()
    compiled = [float(s) for s in re.findall(r"graph compiled in ([\d.]+) s", text)]
    later = rows[1:] or rows  # the first epoch pays for compilation
    images_s = sum(r["images_per_s"] for r in later) / len(later)
    return {
        "img/s": round(images_s, 1),
        "compile s": round(sum(compiled), 1) if compiled else None,
        "mAP": round(metrics["mAP"], 4),
        "mAP50": round(metrics["mAP50"], 4),
        "epochs": len(rows),
    }


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cards", type=int, default=1)
    parser.add_argument("--steps", type=int, default=20, help="timed steps (step mode)")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=0, help="run train.py for N epochs instead")
    parser.add_argument("overrides", nargs="*", help="Hydra overrides, e.g. model=yolox_s")
    args = parser.parse_args(argv)
    print_header(f"msdet on this machine, MindYOLO's columns ({args.cards} card(s))")
    run_dir = tempfile.mkdtemp(prefix="msdet-device-bench-")
    if args.epochs:
        overrides = [*args.overrides, f"train.epochs={args.epochs}"]
        launch(os.path.join(ROOT, "train.py"), args.cards, overrides, run_dir)
        result = {"mode": "train.py", **from_training(run_dir)}
    else:
        timing = [f"--steps={args.steps}", f"--warmup={args.warmup}"]
        launch(STEP_ENTRY, args.cards, [*timing, *args.overrides], run_dir)
        with open(os.path.join(run_dir, RESULT_FILE), encoding="utf-8") as f:
            result = {"mode": "step", **json.load(f)}
    result.update(cards=args.cards, overrides=args.overrides, run_dir=run_dir)
    row = [str(result.get(c, "")) for c in COLUMNS]
    widths = [max(len(c), len(v)) for c, v in zip(COLUMNS, row)]
    print("  ".join(c.ljust(w) for c, w in zip(COLUMNS, widths)))
    print("  ".join(v.ljust(w) for v, w in zip(row, widths)))
    print_result(result)
    return result


if __name__ == "__main__":
    main()
