"""How full the training batches are, and which target bucket each would use.

    python -m msdet.bench.target_buckets [--buckets 16,32] [--epochs 1] [key=value ...]

Draws the configured training pipeline's batches (``data.*``, ``train.batch_size``: the
samples ``train.py`` would train on, same seed) for ``--epochs`` epochs with mosaic and
for one epoch without (the last ``train.no_aug_epochs + 1``), and prints, per phase, the
distribution of each batch's fullest image (boxes after augmentation) and how many
batches fall in each bucket of ``--buckets`` + ``data.max_objects``. Together with the
step time at each bucket's rows (``python -m msdet.bench.step_speed --alternate
data.max_objects=50,32,16``) this says what ``data.target_buckets`` would save on a run,
against one compile per bucket. The last line is ``RESULT {json}``.
"""

from __future__ import annotations

import argparse

import numpy as np

from msdet.bench.common import print_header, print_result
from msdet.common.config import load_config
from msdet.data.buckets import bucket_rows, target_buckets
from msdet.data.build import build_sources
from msdet.data.config import first_no_aug_epoch
from msdet.data.pipeline import AugmentParams, EpochSampler, TrainSamples


def fullest_per_batch(samples: TrainSamples, sampler: EpochSampler, epoch: int, batch: int):
    """Boxes of the fullest image of each whole batch of ``epoch``."""
    positions = sampler.epoch_indices(epoch)
    counts = [int(samples[epoch * len(samples) + int(i)][2].sum()) for i in positions]
    whole = len(counts) // batch * batch
    return np.asarray(counts[:whole]).reshape(-1, batch).max(axis=1)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--buckets", default="16,32", help="row counts below data.max_objects")
    parser.add_argument("--epochs", type=int, default=1, help="mosaic epochs drawn")
    parser.add_argument("overrides", nargs="*", help="settings, e.g. data=coco")
    args = parser.parse_args(argv)
    bucket_list = [int(b) for b in args.buckets.split(",") if b]
    cfg = load_config("tool", [*args.overrides, f"data.target_buckets={bucket_list}"])
    print_header("training batches: fullest image and target bucket")
    buckets = target_buckets(cfg.data)
    train_src, _ = build_sources(cfg.data)
    tcfg = cfg.train
    epochs, no_aug = int(tcfg.epochs), int(tcfg.no_aug_epochs)
    samples = TrainSamples(
        train_src,
        cfg.data.img_size,
        int(cfg.data.max_objects),
        AugmentParams.from_config(cfg.data.aug),
        int(cfg.runtime.seed),
        epochs,
        no_aug,
    )
    sampler = EpochSampler(len(train_src), int(cfg.runtime.seed))
    switch = first_no_aug_epoch(epochs, no_aug)
    phases = {"with mosaic": range(min(args.epochs, switch))}
    if switch < epochs:
        phases["without mosaic"] = range(switch, switch + 1)
    batch = int(tcfg.batch_size)
    result: dict = {"batch": batch, "buckets": list(buckets), "phases": {}}
    for name, epoch_range in phases.items():
        if not len(epoch_range):
            continue
        fullest = np.concatenate(
            [fullest_per_batch(samples, sampler, e, batch) for e in epoch_range]
        )
        rows = [bucket_rows(np.ones((1, int(n))), buckets) for n in fullest]
        share = {b: rows.count(b) for b in buckets}
        quartiles = np.percentile(fullest, [0, 25, 50, 75, 100]).round(1).tolist()
        print(
            f"{name} (epochs {epoch_range.start + 1}-{epoch_range.stop}, {len(fullest)} batches "
            f"of {batch}): fullest image min/q1/median/q3/max {quartiles} boxes; batches per "
            "bucket: " + ", ".join(f"{b} rows: {n}" for b, n in share.items()),
            flush=True,
        )
        result["phases"][name] = {
            "batches": len(fullest),
            "fullest_quartiles": quartiles,
            "batches_per_bucket": {str(b): n for b, n in share.items()},
        }
    print_result(result)
    return result


if __name__ == "__main__":
    main()
