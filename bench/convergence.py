"""Convergence over seeds: msdet and the PyTorch original trained on the same shapes data.

    python -m msdet.bench.convergence --seeds 0 1 2 --epochs 5      # both sides, three seeds each
    python -m msdet.bench.convergence --seeds 3 --only msdet         # one more run of one side
    python -m msdet.bench.convergence --report                       # the table of what finished

Same data (the built-in shapes set), model, image size, batch and recipe (the ``train``
config's YOLOX SGD, warm-cos LR over ``--epochs``, EMA, mosaic with the data config's
augmentation, L1 and no mosaic in the last epochs) for both; each run's final EMA weights
are scored with pycocotools on the same val split. The seed sets the initial weights, the
data order and the augmentation draws of a side (msdet: ``runtime.seed``; the original:
torch, numpy and ``random``), so seed k of one side is not the same draw as seed k of the
other: compare the sides' means against their spreads.

Each finished run is appended, with the machine, the code's commit and its per-epoch
losses, to ``--record`` (one JSON line per run; a run that did not finish leaves no line),
so runs can be spread over sessions and the report groups whatever the record holds by CPU,
schedule and side. ``--minutes`` stops a run after the last epoch that fits (a
time-to-accuracy comparison), and ``--multiscale R`` trains both sides with multi-scale.

To tell the data, the initial weights and the training apart: ``--data-stream msdet`` trains
the original on msdet's batches for the seed, ``--init original`` starts msdet from the
original's initial weights for the seed; the two together train both sides from the same
weights on the same batches.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
from typing import Any

from msdet.bench.common import machine, print_header, print_result
from msdet.common.config import ROOT, load_config
from msdet.engine.training.run_record import read_results
from msdet.ops.cpu_kernels import FLAGS_VAR

RECORD = os.path.join(ROOT, "bench", "results", "convergence.jsonl")
SIDES = ("pytorch", "msdet")


def run_msdet(args, out: str, seed: int, class_names: list[str]) -> dict:
    """msdet's ``train.py`` with the comparison's settings; its results.csv and metrics.json.
    ``--init original``: from the original's initial weights for ``seed``."""
    run_dir = os.path.join(out, f"{msdet_side(args)}-e{args.epochs}-s{seed}")
    start = ["train.pretrained=null"]  # from scratch, as the original's side
    if args.init == "original":
        start = [f"train.pretrained={original_init(out, args.model, seed, class_names, args.img)}"]
    cmd = [
        sys.executable,
        "train.py",
        f"model={args.model}",
        f"train={args.recipe}",
        f"data.num_train={args.num_train}",
        f"data.num_val={args.num_val}",
        f"data.min_object_size={args.min_object_size}",
        f"data.img_size=[{args.img},{args.img}]",
        "train.img_scale=1",  # both sides train and evaluate at --img
        f"train.batch_size={args.batch}",
        f"train.epochs={args.epochs}",
        f"train.eval_interval={args.epochs}",
        f"train.time_limit_min={args.minutes or 'null'}",
        f"runtime.seed={seed}",
        "train.tensorboard=false",
        "train.overwrite=true",  # a repeated run replaces its own folder
        f"train.multiscale_range={args.multiscale}",
        *args.set,
        *start,
        f"run.dir={run_dir}",
    ]
    subprocess.run(cmd, cwd=ROOT, check=True)
    rows = read_results(run_dir)
    with open(os.path.join(run_dir, "metrics.json"), encoding="utf-8") as f:
        metrics = json.load(f)
    return {"history": rows, "metrics": metrics, "train_min": sum(r["epoch_s"] for r in rows) / 60}


def run_pytorch(args, out: str, seed: int, root: str, cfg) -> dict:
    """The original's training loop (``bench.torch_train``) with the same settings."""
    run_dir = os.path.join(out, f"{side_name(args)}-e{args.epochs}-s{seed}")
    os.makedirs(run_dir, exist_ok=True)
    t = cfg.train
    call = (
        "from msdet.bench.torch_train import train_original;"
        f"train_original({root!r}, {run_dir!r}, model={args.model!r}, img={args.img}, "
        f"batch={args.batch}, epochs={args.epochs}, warmup_epochs={int(t.warmup_epochs)}, "
        f"no_aug_epochs={int(t.no_aug_epochs)}, lr_per_img={float(t.lr_per_img)}, "
        f"aug={dict(cfg.data.aug)!r}, time_limit_min={args.minutes or 1e9}, "
        f"multiscale_range={args.multiscale}, seed={seed}, data_stream={args.data_stream!r})"
    )
    subprocess.run([sys.executable, "-c", call], cwd=ROOT, check=True)
    with open(os.path.join(run_dir, "pytorch_result.json"), encoding="utf-8") as f:
        return json.load(f)


def original_init(out: str, model: str, seed: int, class_names: list[str], img: int) -> str:
    """The original's initial weights for ``seed`` (as ``bench.torch_train`` draws them) as
    a msdet checkpoint in ``out``: msdet's side then starts where the original's starts, and
    with ``--data-stream msdet`` on the original's side both train from the same weights on
    the same batches."""
    path = os.path.join(out, f"original-init-{model}-s{seed}.ckpt")
    if os.path.isfile(path):
        return path
    import torch

    from msdet.models.convert_pytorch import convert_file
    from msdet.models.yolox import load_model_config
    from msdet.porting.reference import build_torch_yolox

    net = build_torch_yolox(load_model_config(model), len(class_names), seed=seed)
    pth = path[: -len(".ckpt")] + ".pth"
    torch.save(net.state_dict(), pth)
    convert_file(pth, path, model, len(class_names), ",".join(class_names), img)
    os.remove(pth)
    return path


def side_name(args) -> str:
    """ "pytorch", or "pytorch+msdet-data" when the original trains on msdet's data stream."""
    return "pytorch" if args.data_stream == "yolox" else "pytorch+msdet-data"


def msdet_side(args) -> str:
    """ "msdet", or "msdet+original-init" when msdet starts from the original's weights."""
    return "msdet" if args.init == "own" else "msdet+original-init"


def record_entry(side: str, seed: int, args, result: dict) -> dict[str, Any]:
    """One line of the record: what ran, where, and what it gave (msdet's kernel compiler
    flags too when ``$MSDET_KERNEL_FLAGS`` set them: another kernel path on the same CPU)."""
    history = result["history"]
    flags = os.environ.get(FLAGS_VAR) if side.startswith("msdet") else None
    return {
        "side": side,
        "seed": seed,
        "epochs": args.epochs,
        "epochs_run": len(history),
        "recipe": args.recipe,
        "model": args.model,
        "img": args.img,
        "batch": args.batch,
        "num_train": args.num_train,
        "multiscale_range": args.multiscale,
        "overrides": args.set,
        **({"kernel_flags": flags} if flags else {}),
        "mAP": float(result["metrics"]["mAP"]),
        "mAP50": float(result["metrics"]["mAP50"]),
        "loss": [round(float(r["loss_total"]), 4) for r in history],
        "train_min": round(float(result["train_min"]), 2),
        "cpu": machine()["cpu"],
        "commit": _commit(),
        "date": datetime.date.today().isoformat(),
    }


def _commit() -> str:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
        )
        return out.stdout.strip() or "unknown"
    except OSError:
        return "unknown"


def append_record(path: str, entry: dict[str, Any]) -> None:
    """Append one finished run to the record (created with its folder when missing)."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(entry) + "\n")


def read_record(path: str) -> list[dict[str, Any]]:
    """Every run of the record; [] when there is none."""
    if not os.path.isfile(path):
        return []
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def summarise(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Mean and spread per (cpu, recipe, epochs, side): mAP, mAP50 and each epoch's loss.

    The spread is the sample standard deviation (0 for a single run) and the range. A run on
    another kernel path of the same CPU (a ``runtime.*`` override, ``kernel_flags``) is a side
    of its own: its seeds are not more seeds of the default path."""
    groups: dict[tuple, list[dict]] = {}
    for e in entries:
        if e["epochs_run"] != e["epochs"]:
            continue  # stopped early (--minutes): not the schedule's result
        key = (e["cpu"], e.get("recipe", "shapes"), e["epochs"], e["img"], _side_variant(e))
        groups.setdefault(key, []).append(e)
    rows = []
    for (cpu, recipe, epochs, img, side), runs in sorted(groups.items()):
        row = {"cpu": cpu, "recipe": recipe, "epochs": epochs, "img": img, "side": side}
        row["seeds"] = sorted(r["seed"] for r in runs)
        for key in ("mAP", "mAP50"):
            values = [r[key] for r in runs]
            row[key] = _stats(values)
        losses = [r["loss"] for r in runs]
        row["loss"] = [round(statistics.fmean(v), 3) for v in zip(*losses)]  # per epoch, over seeds
        row["train_min"] = round(statistics.fmean(r["train_min"] for r in runs), 1)
        rows.append(row)
    return rows


def _side_variant(entry: dict[str, Any]) -> str:
    """The side, with the runtime overrides and kernel flags it ran with, if any."""
    parts = [o for o in entry.get("overrides", []) if o.startswith("runtime.")]
    if entry.get("kernel_flags"):
        parts.append(f"{FLAGS_VAR}={entry['kernel_flags']}")
    return entry["side"] + (f" ({', '.join(parts)})" if parts else "")


def _stats(values: list[float]) -> dict[str, float]:
    return {
        "mean": round(statistics.fmean(values), 4),
        "sd": round(statistics.stdev(values), 4) if len(values) > 1 else 0.0,
        "min": round(min(values), 4),
        "max": round(max(values), 4),
    }


def format_report(rows: list[dict[str, Any]]) -> str:
    """A text table of :func:`summarise`'s rows, one per CPU, schedule and side."""
    lines = []
    for r in rows:
        m, m50 = r["mAP"], r["mAP50"]
        lines.append(
            f"{r['cpu']} | {r['recipe']} {r['epochs']} epochs @{r['img']} | {r['side']:7s} | "
            f"n={len(r['seeds'])} | mAP {m['mean']:.3f} ± {m['sd']:.3f} "
            f"[{m['min']:.3f}, {m['max']:.3f}] | mAP50 {m50['mean']:.3f} ± {m50['sd']:.3f} | "
            f"loss {' '.join(f'{v:.3f}' for v in r['loss'])} | {r['train_min']} min"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--epochs", type=int, default=5, help="schedule length for both")
    parser.add_argument(
        "--recipe", default="parity", help="msdet's train config (and its values for the original)"
    )
    parser.add_argument("--model", default="yolox_nano")
    parser.add_argument("--img", type=int, default=320)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--num-train", type=int, default=2000)
    parser.add_argument("--num-val", type=int, default=200)
    parser.add_argument("--min-object-size", type=int, default=24)
    parser.add_argument(
        "--minutes", type=float, default=None, help="stop after the last epoch that fits"
    )
    parser.add_argument("--out", default="runs/convergence")
    parser.add_argument("--record", default=RECORD, help="JSON lines file of finished runs")
    parser.add_argument("--multiscale", type=int, default=0, help="multi-scale range R (0: off)")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a train.* or data.aug.* override for both sides, e.g. train.lr_per_img=0.00125",
    )
    parser.add_argument("--only", choices=SIDES, default=None, help="run one side")
    parser.add_argument(
        "--data-stream",
        choices=("yolox", "msdet"),
        default="yolox",
        help="the original's data: YOLOX's own dataset, or msdet's stream for the same seed",
    )
    parser.add_argument(
        "--init",
        choices=("own", "original"),
        default="own",
        help="msdet's initial weights: its own draw, or the original's for the same seed",
    )
    parser.add_argument("--report", action="store_true", help="only print the record's table")
    parser.add_argument(
        "--commits",
        nargs="+",
        default=None,
        help="report only runs of these commits (prefixes): one version of the code",
    )
    args = parser.parse_args(argv)
    if args.report:
        entries = read_record(args.record)
        if args.commits:
            entries = [
                e for e in entries if str(e.get("commit", "")).startswith(tuple(args.commits))
            ]
        rows = summarise(entries)
        print(format_report(rows))
        return {"rows": rows}

    print_header("convergence over seeds: msdet vs PyTorch YOLOX")

    cfg = load_config(
        "tool",
        [
            f"train={args.recipe}",
            f"data.num_train={args.num_train}",
            f"data.num_val={args.num_val}",
            f"data.min_object_size={args.min_object_size}",
            *args.set,
        ],
    )
    from msdet.data.build import build_sources  # generates the shapes set once, for both sides

    train_source = build_sources(cfg.data)[0]
    root = os.path.dirname(os.path.dirname(train_source.ann_file))
    out = os.path.abspath(args.out)
    os.makedirs(out, exist_ok=True)
    sides = [args.only] if args.only else list(SIDES)
    for seed in args.seeds:
        for side in sides:
            if side == "pytorch":
                result = run_pytorch(args, out, seed, root, cfg)
            else:
                result = run_msdet(args, out, seed, list(train_source.class_names))
            name = side_name(args) if side == "pytorch" else msdet_side(args)
            entry = record_entry(name, seed, args, result)
            append_record(args.record, entry)
            print(
                f"{side} seed {seed}: mAP {entry['mAP']:.4f} mAP50 {entry['mAP50']:.4f} "
                f"loss {entry['loss']} ({entry['train_min']} min)",
                flush=True,
            )
    rows = summarise(read_record(args.record))
    print(format_report(rows))
    result = {"rows": rows, "record": args.record}
    print_result(result)
    return result


if __name__ == "__main__":
    main()
