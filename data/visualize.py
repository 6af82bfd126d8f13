"""Draw augmented training samples with their boxes, to check the data pipeline by eye.

    python -m data.visualize --num 8 --out outputs/vis data=shapes data.img_size=[416,416]

Trailing arguments are Hydra overrides of ``configs/config.yaml``. The samples are
exactly what training sees in ``--epoch`` (mosaic and mixup are off in the last
``train.no_aug_epochs + 1`` epochs, as YOLOX), before conversion to float CHW.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence

import cv2
import numpy as np

from msdet.common.config import load_config
from msdet.data.build import build_sources


def class_colour(label: int) -> tuple[int, int, int]:
    """A distinct, stable BGR colour per class index."""
    hue = (label * 47) % 180
    bgr = cv2.cvtColor(np.array([[[hue, 220, 255]]], dtype=np.uint8), cv2.COLOR_HSV2BGR)[0, 0]
    return int(bgr[0]), int(bgr[1]), int(bgr[2])


def draw_boxes(
    img: np.ndarray,
    boxes: np.ndarray,
    labels: np.ndarray,
    class_names: Sequence[str],
    scores: np.ndarray | None = None,
) -> np.ndarray:
    """A copy of ``img`` with xyxy ``boxes`` outlined and labelled by class name (and score)."""
    out = img.copy()
    for k, ((x1, y1, x2, y2), label) in enumerate(zip(boxes, labels)):
        colour = class_colour(int(label))
        p1, p2 = (int(round(x1)), int(round(y1))), (int(round(x2)) - 1, int(round(y2)) - 1)
        cv2.rectangle(out, p1, p2, colour, 1)
        text = class_names[int(label)] + ("" if scores is None else f" {float(scores[k]):.2f}")
        cv2.putText(
            out, text, (p1[0], max(p1[1] - 3, 9)),
            cv2.FONT_HERSHEY_SIMPLEX, 0.35, colour, 1, cv2.LINE_AA,
        )  # fmt: skip
    return out


def main(argv: Sequence[str] | None = None) -> list[str]:
    """Write ``--num`` annotated training samples to ``--out``; returns the file paths."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--num", type=int, default=8, help="samples to draw")
    parser.add_argument("--out", default="outputs/data_vis", help="output folder")
    parser.add_argument("--epoch", type=int, default=0, help="training epoch to show (0-based)")
    parser.add_argument("overrides", nargs="*", help="Hydra overrides, e.g. data=coco")
    args = parser.parse_args(argv)
    # Here, not at the top: data.pipeline loads MindSpore, and draw_boxes must stay
    # importable without it (engine.plots draws evaluation pictures before it loads).
    from msdet.data.pipeline import AugmentParams, EpochSampler, TrainSamples, check_data_config

    cfg = load_config("tool", list(args.overrides))
    img_size = check_data_config(cfg.data)
    train, _ = build_sources(cfg.data)
    samples = TrainSamples(
        train,
        img_size,
        int(cfg.data.max_objects),
        AugmentParams.from_config(cfg.data.aug),
        int(cfg.runtime.seed),
        int(cfg.train.epochs),
        int(cfg.train.no_aug_epochs),
    )
    order = EpochSampler(len(train), int(cfg.runtime.seed)).epoch_indices(args.epoch)
    os.makedirs(args.out, exist_ok=True)
    paths = []
    for k, i in enumerate(order[: args.num]):
        img, boxes, labels = samples.sample(args.epoch, int(i))
        path = os.path.join(args.out, f"epoch{args.epoch}_{k:03d}_image{int(i)}.jpg")
        cv2.imwrite(path, draw_boxes(img, boxes, labels, train.class_names))
        paths.append(path)
    print(f"wrote {len(paths)} samples to {os.path.abspath(args.out)}")
    return paths


if __name__ == "__main__":
    main()
