"""Boxes and labels as every msdet picture draws them (:func:`draw_boxes`: predict.py's
pictures, the val grid, the data check), and a command that draws augmented training
samples with their boxes, to check the data pipeline by eye:

    python -m msdet.data.visualize --num 8 --out runs/vis data=shapes data.img_size=[416,416]

Trailing arguments are overrides of ``configs/config.yaml``. The samples are exactly what
training sees in ``--epoch`` (mosaic and mixup are off in the last
``train.no_aug_epochs + 1`` epochs, as YOLOX), at its input size (``train.input_size``:
``data.img_size`` x ``train.img_scale``), before conversion to float CHW.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from dataclasses import dataclass

import cv2
import numpy as np

from msdet.common.config import load_config
from msdet.data.build import build_sources

FONT = cv2.FONT_HERSHEY_SIMPLEX
# A label's background is this much larger than its text on every side, in units of the
# text's stroke thickness (so it grows with the picture like the rest).
LABEL_PAD = 2
# How far (in label heights) a label may move from its box to avoid another label; beyond,
# the box is drawn without its label rather than with one printed over another.
LABEL_SEARCH = 2


def class_colour(label: int) -> tuple[int, int, int]:
    """A distinct, stable BGR colour per class index."""
    hue = (label * 47) % 180
    bgr = cv2.cvtColor(np.array([[[hue, 220, 255]]], dtype=np.uint8), cv2.COLOR_HSV2BGR)[0, 0]
    return int(bgr[0]), int(bgr[1]), int(bgr[2])


def text_colour(background: Sequence[int]) -> tuple[int, int, int]:
    """Black or white, whichever reads better on a BGR ``background`` (by its luma)."""
    b, g, r = (float(v) for v in background[:3])
    return (0, 0, 0) if 0.114 * b + 0.587 * g + 0.299 * r >= 140 else (255, 255, 255)


def line_width(image_hw: Sequence[int]) -> int:
    """Box outline width in pixels for an image of ``(height, width)``: 2 px up to about
    600 px per side, then one more per 300 px of the mean side (6 px at 1920 x 1080)."""
    h, w = int(image_hw[0]), int(image_hw[1])
    return max(2, round((h + w) / 600))


@dataclass(frozen=True)
class LabelStyle:
    """How labels are drawn on one image: font scale, stroke thickness, padding (px)."""

    scale: float
    thickness: int
    pad: int

    @classmethod
    def for_image(cls, image_hw: Sequence[int]) -> LabelStyle:
        """The style for an image of ``(height, width)``: capital letters 8 px tall on a
        240 px square, 12 px at 640 x 480, 30 px at 1920 x 1080."""
        mean_side = (int(image_hw[0]) + int(image_hw[1])) / 2
        thickness = max(1, round(mean_side / 800))
        return cls(
            scale=max(0.35, mean_side / 1100), thickness=thickness, pad=LABEL_PAD * thickness
        )

    def size(self, text: str) -> tuple[int, int]:
        """(width, height) in pixels of ``text``'s label, background included."""
        (tw, th), base = cv2.getTextSize(text, FONT, self.scale, self.thickness)
        return tw + 2 * self.pad, th + base + 2 * self.pad

    def fit(self, text: str, width: int) -> str:
        """``text``, shortened (ending in "..") until its label is at most ``width`` wide."""
        if self.size(text)[0] <= width:
            return text
        for end in range(len(text) - 1, 0, -1):
            if self.size(text[:end] + "..")[0] <= width:
                return text[:end] + ".."
        return text[:1]


Rect = tuple[int, int, int, int]  # x1, y1, x2, y2, the end exclusive


def _overlaps(a: Rect, b: Rect) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


def place_labels(
    boxes: np.ndarray, sizes: Sequence[tuple[int, int]], image_hw: Sequence[int], line: int = 2
) -> list[Rect | None]:
    """Where each box's label goes: a rectangle inside the image that overlaps no label
    placed before it, or None when none is near its box.

    Labels are placed in the order given (put the best detection first): above the box's
    top-left corner, else inside it, below it, or at its right end, each shifted into the
    image; failing those, further above or below, up to :data:`LABEL_SEARCH` label heights.
    ``sizes``: (width, height) per label; ``line``: the outline width the label sits on.
    """
    h, w = int(image_hw[0]), int(image_hw[1])
    placed: list[Rect] = []
    out: list[Rect | None] = []
    for box, (lw, lh) in zip(np.asarray(boxes, dtype=np.float64).reshape(-1, 4), sizes):
        if lw > w or lh > h:
            out.append(None)
            continue
        x1, y1, x2, y2 = (int(round(v)) for v in box)
        left, right = x1 - line // 2, x2 + line // 2 - lw
        above, inside, below = y1 - line // 2 - lh, y1 + (line + 1) // 2, y2 + line // 2
        corners = [(left, above), (left, inside), (left, below), (right, above), (right, below)]
        for k in range(1, LABEL_SEARCH + 1):
            corners += [(left, above - k * lh), (left, below + k * lh)]
        spot = None
        for x, y in corners:
            x, y = min(max(x, 0), w - lw), min(max(y, 0), h - lh)
            rect = (x, y, x + lw, y + lh)
            if not any(_overlaps(rect, other) for other in placed):
                spot = rect
                break
        if spot is not None:
            placed.append(spot)
        out.append(spot)
    return out


def draw_boxes(
    img: np.ndarray,
    boxes: np.ndarray,
    labels: np.ndarray,
    class_names: Sequence[str],
    scores: np.ndarray | None = None,
    line: int | None = None,
) -> np.ndarray:
    """A copy of ``img`` with xyxy ``boxes`` outlined in their class colour and labelled
    with the class name (and score) on a filled background of that colour.

    Outline width and text size grow with the image (:func:`line_width`, or ``line``).
    Labels stay inside the image and never cover one another (:func:`place_labels`,
    best score first); a label with no free place near its box is left out, its box drawn.
    """
    out = np.ascontiguousarray(img.copy())
    h, w = out.shape[:2]
    line = line_width((h, w)) if line is None else int(line)
    style = LabelStyle.for_image((h, w))
    boxes = np.asarray(boxes, dtype=np.float64).reshape(-1, 4)
    labels = np.asarray(labels).reshape(-1).astype(np.int64)
    order = (
        np.arange(len(boxes)) if scores is None else np.argsort(-np.asarray(scores), kind="stable")
    )
    # Lowest score drawn first, so the best box's outline is on top.
    for k in order[::-1]:
        x1, y1, x2, y2 = (int(round(v)) for v in boxes[k])
        p1 = (min(max(x1, 0), w - 1), min(max(y1, 0), h - 1))
        p2 = (min(max(x2 - 1, 0), w - 1), min(max(y2 - 1, 0), h - 1))
        cv2.rectangle(out, p1, p2, class_colour(int(labels[k])), line)
    texts = []
    for k in order:
        text = str(class_names[int(labels[k])])
        texts.append(style.fit(text + ("" if scores is None else f" {float(scores[k]):.2f}"), w))
    spots = place_labels(boxes[order], [style.size(t) for t in texts], (h, w), line)
    for k, text, spot in zip(order, texts, spots):
        if spot is None:
            continue
        colour = class_colour(int(labels[k]))
        x1, y1, x2, y2 = spot
        cv2.rectangle(out, (x1, y1), (x2 - 1, y2 - 1), colour, -1)
        (_, th), _ = cv2.getTextSize(text, FONT, style.scale, style.thickness)
        cv2.putText(
            out, text, (x1 + style.pad, y1 + style.pad + th), FONT, style.scale,
            text_colour(colour), style.thickness, cv2.LINE_AA,
        )  # fmt: skip
    return out


def main(argv: Sequence[str] | None = None) -> list[str]:
    """Write ``--num`` annotated training samples to ``--out``; returns the file paths."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--num", type=int, default=8, help="samples to draw")
    parser.add_argument("--out", default="runs/data_vis", help="output folder")
    parser.add_argument("--epoch", type=int, default=0, help="training epoch to show (0-based)")
    parser.add_argument("overrides", nargs="*", help="settings, e.g. data=coco")
    args = parser.parse_args(argv)
    # Here, not at the top: data.pipeline loads MindSpore, and draw_boxes must stay
    # importable without it (engine.evaluation.plots draws evaluation pictures before it loads).
    from msdet.data.pipeline import AugmentParams, EpochSampler, TrainSamples

    cfg = load_config("tool", list(args.overrides))
    train, _ = build_sources(cfg.data)
    samples = TrainSamples(
        train,
        cfg.train.input_size,
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
