"""The columns of MindYOLO's published YOLOX table, for msdet on this machine, under
MindYOLO's settings or msdet's own.

    python -m msdet.bench.device [--settings msdet|mindyolo] [--data loader|synthetic]
        [--loops model,jit] [--cards N] [--steps 20] [--warmup 3] [model=yolox_s ...]
    python -m msdet.bench.device --epochs 3 [--settings ...] [--cards N] [data=coco data.root=...]

Settings (printed in the table):

- ``mindyolo``: as MindYOLO's ``train.py`` runs its YOLOX configs: graph mode at jit level O2
  (``mindyolo/utils/utils.py``, ``set_default``), AMP O0 (``--ms_amp_level`` default; its YOLOX
  configs set none), no data sinking (``--ms_datasink`` default), EMA on, every step fed from
  the data loader and timed in that loop (its "step time" log is wall time over
  ``log_interval`` steps). Not reproduced: its static loss scale of 1024 at O0 (msdet's fp32
  step scales by 1; the same gradients up to rounding).
- ``msdet``: msdet's own settings on this device (``runtime.amp``, ``sink`` and ``jit_level``
  left to ``auto``: on Ascend O2 AMP with a dynamic loss scale, data sinking and the chip's
  default jit level; on CPU O0 and no sinking).

Data: ``loader`` (default) msdet's training pipeline (``data=...``: the generated shapes set
unless COCO is given) feeds every step, as in a run and as MindYOLO's figures were measured;
``synthetic`` reuses one batch (the device's step alone). Every rank runs the step (batch
``train.batch_size`` at ``data.img_size``, 80 classes); rank 0 reports ms/step (wall time of
the timed steps after ``--warmup``, one sink of ``--steps`` where data sink), images/s over
all ranks, the graph compile time, peak device memory (MindSpore's pool on Ascend/GPU;
resident memory on CPU) and the machine. Several cards run through
``scripts/run_distributed_train.sh`` (msrun). ``--epochs N`` instead runs ``train.py`` for N
epochs with the same settings and reports its figures from the run folder, mAP included,
ms/step from its images/s. ``--loops model,jit`` times each training loop in turn, one row
each, with the jit level and backend that loop's graphs ran at (a card's first run of both
answers whether the jit loop's data sink runs and how fast). MindYOLO's published rows are
printed below for comparison. The last line is ``RESULT {json}``.
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
SETTINGS = {
    "mindyolo": ("runtime.jit_level=O2", "runtime.amp=O0", "runtime.sink=false"),
    "msdet": ("runtime.jit_level=null", "runtime.amp=auto", "runtime.sink=auto"),
}
DATA = ("loader", "synthetic")
COLUMNS = ("settings", "loop", "model", "cards", "batch/card", "img", "jit level", "backend",
           "amp", "sink", "data", "ms/step", "img/s", "compile s", "peak mem GiB", "mAP")  # fmt: skip
# MindYOLO's published YOLOX rows (mindspore-lab/mindyolo/configs/yolox/README.md, as of
# 2025-08-21, MindSpore 2.5.0, graph mode, 8 cards x batch 8, 300 epochs; its AMP level and
# data feeding are its train.py defaults), in the columns above.
MINDYOLO_ROWS = (
    ("MindYOLO 910B", "model", "yolox_s", 8, 8, "640x640", "O2", "GE", "O0", "no", "loader",
     101.26, 632.04, 305.18, "", 41.0),
    ("MindYOLO 910A", "model", "yolox_nano", 8, 8, "416x416", "O2", "GE", "O0", "no", "loader",
     138.84, 460.96, 202.49, "", 24.1),
    ("MindYOLO 910A", "model", "yolox_s", 8, 8, "640x640", "O2", "GE", "O0", "no", "loader",
     243.99, 262.31, 202.46, "", 40.7),
)  # fmt: skip


def settings_overrides(settings: str, overrides: list[str]) -> list[str]:
    """The config settings of ``settings`` (:data:`SETTINGS`) before the user's own, which
    win; an unknown name is an error naming the valid ones."""
    if settings not in SETTINGS:
        raise ValueError(f"--settings {settings!r}: choose from {', '.join(SETTINGS)}")
    return [*SETTINGS[settings], *overrides]


def ms_per_step(images_per_s: float, batch: int, cards: int) -> float:
    """Milliseconds per training step from images per second over ``cards`` ranks."""
    return round(1000.0 * batch * cards / images_per_s, 2) if images_per_s > 0 else float("inf")


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


def format_rows(rows: list[tuple]) -> str:
    """The table: :data:`COLUMNS`, one line per row."""
    cells = [[str(v) for v in row] for row in rows]
    widths = [max(len(c), *(len(r[i]) for r in cells)) for i, c in enumerate(COLUMNS)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(COLUMNS, widths))]
    lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths)) for r in cells]
    return "\n".join(lines)


def table_row(result: dict) -> tuple:
    """A result as the table's row (the settings columns from what the ranks ran)."""
    run = result.get("run", {})
    sink = run.get("sink")
    values = {
        **result,
        "loop": run.get("loop", ""),
        "jit level": run.get("jit_level", ""),
        "backend": run.get("backend", ""),
        "amp": run.get("amp", ""),
        "sink": "" if sink is None else ("yes" if sink else "no"),
        "data": result.get("data", ""),
    }
    return tuple(values.get(c, "") for c in COLUMNS)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--settings", default="msdet", choices=tuple(SETTINGS))
    parser.add_argument("--data", default="loader", choices=DATA, help="what feeds the steps")
    parser.add_argument("--cards", type=int, default=1)
    parser.add_argument("--steps", type=int, default=20, help="timed steps (step mode)")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=0, help="run train.py for N epochs instead")
    parser.add_argument("--loops", default=None, help="time each of these loops: model,jit")
    parser.add_argument("overrides", nargs="*", help="config settings, e.g. model=yolox_s")
    args = parser.parse_args(argv)
    print_header(f"msdet on this machine, MindYOLO's columns ({args.cards} card(s), "
                 f"{args.settings}'s settings)")  # fmt: skip
    overrides = settings_overrides(args.settings, args.overrides)
    run_dir = tempfile.mkdtemp(prefix="msdet-device-bench-")
    if args.epochs:
        launch(os.path.join(ROOT, "train.py"), args.cards,
               [*overrides, f"train.epochs={args.epochs}"], run_dir)  # fmt: skip
        from msdet.common.config import load_config

        cfg = load_config("train", overrides)
        batch = int(cfg.train.batch_size)
        result = {"mode": "train.py", "data": "loader", **from_training(run_dir)}
        result.update(
            model=str(cfg.model.name),
            **{"batch/card": batch, "img": "x".join(str(int(v)) for v in cfg.data.img_size)},
            **{"ms/step": ms_per_step(result["img/s"], batch, args.cards)},
            run={
                "jit_level": cfg.runtime.jit_level or "auto",
                "amp": cfg.runtime.amp,
                "sink": cfg.runtime.sink,
            },  # fmt: skip
        )
    else:
        timing = [f"--steps={args.steps}", f"--warmup={args.warmup}", f"--data={args.data}"]
        loops = args.loops.split(",") if args.loops else [None]
        results = []
        for loop in loops:  # each in its own processes: a loop sets the process's mode
            chosen = [f"runtime.loop={loop}"] if loop else []
            folder = os.path.join(run_dir, loop or "run")
            launch(STEP_ENTRY, args.cards, [*timing, *overrides, *chosen], folder)
            with open(os.path.join(folder, RESULT_FILE), encoding="utf-8") as f:
                results.append({"mode": "step", **json.load(f)})
        result = results[0] if len(results) == 1 else {"mode": "step", "loops": results}
    rows = result.get("loops", [result])
    for row in rows:
        row.update(settings=args.settings, cards=args.cards)
    result.update(settings=args.settings, cards=args.cards, overrides=overrides, run_dir=run_dir)
    print(format_rows([table_row(row) for row in rows]))
    print(
        "\nMindYOLO's published rows (mindspore-lab/mindyolo/configs/yolox/README.md, "
        "MindSpore 2.5.0; 300 epochs):"
    )
    print(format_rows(list(MINDYOLO_ROWS)))
    print_result(result)
    return result


if __name__ == "__main__":
    main()
