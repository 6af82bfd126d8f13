"""Time to accuracy: msdet and the PyTorch original trained on the same shapes data.

    python -m bench.convergence [--minutes 12] [--model yolox_nano] [--img 320] [--batch 8]
                                [--epochs 12] [--num-train 2000] [--num-val 200] [--out DIR]
                                [--multiscale R]
                                [--min-object-size 24] [--set train.lr_per_img=X ...]

Same data (the built-in shapes set), model, image size, batch, recipe (YOLOX's SGD,
warm-cos LR with ``--epochs`` as the schedule length, EMA, mosaic with the shapes config's
augmentation, L1 and no mosaic in the last epochs) and wall-clock budget for both; each
stops after the last epoch that fits in ``--minutes`` and its final EMA weights are scored
with pycocotools on the same val split. Writes ``convergence.png`` (loss curves over wall
time, final mAP) and ends with ``RESULT {json}``. ``--multiscale R`` trains both sides with
multi-scale (sizes 32 * (img/32 - R .. img/32 + R), a new one every 10 steps): msdet with
``train.multiscale_range=R``, the original through its own ``random_resize``/``preprocess``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

from hydra import compose, initialize_config_dir

from bench.common import CONFIG_DIR, print_header, print_result
from engine.run_record import read_results

ROOT = os.path.dirname(CONFIG_DIR)


def run_msdet(args, out: str) -> dict:
    run_dir = os.path.join(out, "msdet")
    cmd = [
        sys.executable,
        "train.py",
        f"model={args.model}",
        f"data.num_train={args.num_train}",
        f"data.num_val={args.num_val}",
        f"data.min_object_size={args.min_object_size}",
        f"data.img_size=[{args.img},{args.img}]",
        f"train.batch_size={args.batch}",
        f"train.epochs={args.epochs}",
        f"train.eval_interval={args.epochs}",
        f"train.time_limit_min={args.minutes}",
        "train.tensorboard=false",
        "train.overwrite=true",  # a repeated benchmark replaces its last run
        f"train.multiscale_range={args.multiscale}",
        *args.set,
        f"hydra.run.dir={run_dir}",
    ]
    subprocess.run(cmd, cwd=ROOT, check=True)
    return load_msdet(out)


def load_msdet(out: str) -> dict:
    run_dir = os.path.join(out, "msdet")
    rows = read_results(run_dir)
    wall = 0.0
    for r in rows:
        wall += r["epoch_s"] / 60
        r["wall_min"] = wall
    with open(os.path.join(run_dir, "metrics.json"), encoding="utf-8") as f:
        metrics = json.load(f)
    return {"history": rows, "metrics": metrics, "train_min": wall}


def run_pytorch(args, out: str, root: str, cfg) -> dict:
    run_dir = os.path.join(out, "pytorch")
    os.makedirs(run_dir, exist_ok=True)
    t = cfg.train
    call = (
        "from bench.torch_train import train_original;"
        f"train_original({root!r}, {run_dir!r}, model={args.model!r}, img={args.img}, "
        f"batch={args.batch}, epochs={args.epochs}, warmup_epochs={int(t.warmup_epochs)}, "
        f"no_aug_epochs={int(t.no_aug_epochs)}, lr_per_img={float(t.lr_per_img)}, "
        f"aug={dict(cfg.data.aug)!r}, time_limit_min={args.minutes}, "
        f"multiscale_range={args.multiscale})"
    )
    subprocess.run([sys.executable, "-c", call], cwd=ROOT, check=True)
    return load_pytorch(out)


def load_pytorch(out: str) -> dict:
    with open(os.path.join(out, "pytorch", "pytorch_result.json"), encoding="utf-8") as f:
        return json.load(f)


def plot(results: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_loss, ax_map) = plt.subplots(1, 2, figsize=(12, 4.5))
    for name, res in results.items():
        h = res["history"]
        ax_loss.plot(
            [r["wall_min"] for r in h], [r["loss_total"] for r in h], marker="o", label=name
        )
    ax_loss.set_xlabel("wall-clock minutes")
    ax_loss.set_ylabel("training loss (epoch mean)")
    ax_loss.legend()
    ax_loss.grid(alpha=0.3)
    names = list(results)
    for k, key in enumerate(("mAP", "mAP50")):
        values = [results[n]["metrics"][key] for n in names]
        ax_map.bar([i + 0.4 * k for i in range(len(names))], values, width=0.4, label=key)
    ax_map.set_xticks([i + 0.2 for i in range(len(names))], names)
    ax_map.set_ylabel("val AP (pycocotools)")
    ax_map.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=90)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=12.0)
    parser.add_argument("--model", default="yolox_nano")
    parser.add_argument("--img", type=int, default=320)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--epochs", type=int, default=12, help="schedule length for both")
    parser.add_argument("--num-train", type=int, default=2000)
    parser.add_argument("--num-val", type=int, default=200)
    parser.add_argument(
        "--min-object-size", type=int, default=24, help="data.min_object_size (8: the v1 set)"
    )
    parser.add_argument("--out", default="outputs/convergence")
    parser.add_argument(
        "--multiscale", type=int, default=0, help="multi-scale range R for both sides (0: off)"
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a train.* or data.aug.* override for both sides, e.g. train.lr_per_img=0.00125",
    )
    parser.add_argument(
        "--only",
        choices=("msdet", "pytorch"),
        default=None,
        help="run one side; the other side's earlier result in --out joins the report",
    )
    args = parser.parse_args(argv)
    print_header("time to accuracy: msdet vs PyTorch YOLOX")
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        cfg = compose(
            "config",
            overrides=[
                f"data.num_train={args.num_train}",
                f"data.num_val={args.num_val}",
                f"data.min_object_size={args.min_object_size}",
                *args.set,
            ],
        )
    from data.build import build_sources  # generates the shapes set once, for both sides

    root = os.path.dirname(os.path.dirname(build_sources(cfg.data)[0].ann_file))
    out = os.path.abspath(args.out)
    os.makedirs(out, exist_ok=True)
    results = {}
    if args.only in (None, "pytorch"):
        results["pytorch"] = run_pytorch(args, out, root, cfg)
    elif os.path.isfile(os.path.join(out, "pytorch", "pytorch_result.json")):
        results["pytorch"] = load_pytorch(out)
    if args.only in (None, "msdet"):
        results["msdet"] = run_msdet(args, out)
    elif os.path.isfile(os.path.join(out, "msdet", "metrics.json")):
        results["msdet"] = load_msdet(out)
    plot(results, os.path.join(out, "convergence.png"))
    summary = {
        name: {
            "mAP": r["metrics"]["mAP"],
            "mAP50": r["metrics"]["mAP50"],
            "epochs": len(r["history"]),
            "train_min": round(r["train_min"], 2),
            "s_per_epoch": round(60 * r["train_min"] / max(len(r["history"]), 1), 1),
            "final_loss": r["history"][-1]["loss_total"],
        }
        for name, r in results.items()
    }
    for name, s in summary.items():
        print(
            f"{name:8s} mAP {s['mAP']:.4f}  mAP50 {s['mAP50']:.4f}  {s['epochs']} epochs in "
            f"{s['train_min']:.1f} min"
        )
    result = {
        "minutes": args.minutes,
        "model": args.model,
        "img": args.img,
        "batch": args.batch,
        "schedule_epochs": args.epochs,
        "num_train": args.num_train,
        "multiscale_range": args.multiscale,
        "min_object_size": args.min_object_size,
        "overrides": args.set,
        **summary,
        "plot": os.path.join(out, "convergence.png"),
    }
    print_result(result)
    return result


if __name__ == "__main__":
    main()
