"""What a comparison runs on: the input picture, a training batch, and the model pair
(the PyTorch original and msdet's network holding the same, converted weights)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

DEFAULT_CLASSES = 80  # COCO, for --random-init
PAD_VALUE = 114  # YOLOX's letterbox grey
TRAIN_OBJECTS = (3, 6)  # synthetic boxes per image of the --train-step batch


class ComparisonSetupError(RuntimeError):
    """The comparison cannot run (reference missing, bad checkpoint, unreadable image)."""


def yolox_preprocess(img: np.ndarray, size_hw: Sequence[int]) -> tuple[np.ndarray, float]:
    """YOLOX's eval preprocessing (``ValTransform``): resize keeping the aspect ratio, image at
    the top-left, pad 114, BGR 0-255, CHW float32. Returns the image and the resize ratio."""
    import cv2

    out_h, out_w = int(size_hw[0]), int(size_hw[1])
    h, w = img.shape[:2]
    ratio = min(out_h / h, out_w / w)
    new_w, new_h = int(w * ratio), int(h * ratio)
    resized = cv2.resize(img, (new_w, new_h), interpolation=cv2.INTER_LINEAR).astype(np.uint8)
    padded = np.full((out_h, out_w, 3), PAD_VALUE, dtype=np.uint8)
    padded[:new_h, :new_w] = resized
    return np.ascontiguousarray(padded.transpose(2, 0, 1), dtype=np.float32), ratio


def synthetic_image(height: int = 480, width: int = 640, seed: int = 0) -> np.ndarray:
    """A deterministic BGR uint8 test picture: colour gradients, filled shapes, mild noise.

    Not square (4:3), so letterboxing leaves a padded band as with a real photo.
    """
    import cv2

    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:height, 0:width].astype(np.float32)
    img = np.stack(
        (255 * xx / width, 255 * yy / height, 127 + 127 * np.sin((xx + yy) / 40)), -1
    ).astype(np.uint8)
    for _ in range(12):
        color = tuple(int(c) for c in rng.integers(0, 256, 3))
        x, y = int(rng.integers(0, width)), int(rng.integers(0, height))
        size = int(rng.integers(20, min(height, width) // 3))
        if rng.random() < 0.5:
            cv2.rectangle(img, (x, y), (x + size, y + size // 2 + 10), color, -1)
        else:
            cv2.circle(img, (x, y), size // 2, color, -1)
    noise = rng.normal(0.0, 6.0, img.shape)
    return np.clip(img + noise, 0, 255).astype(np.uint8)


def load_input(image: str | None, size: int) -> np.ndarray:
    """A ``[1, 3, size, size]`` float32 batch: ``image`` (a file) or the synthetic picture,
    letterboxed as YOLOX's evaluation does."""
    import cv2

    if image is None:
        img = synthetic_image()
    else:
        img = cv2.imread(image, cv2.IMREAD_COLOR)
        if img is None:
            raise ComparisonSetupError(f"cannot read image {image}")
    return yolox_preprocess(img, (size, size))[0][None]


def synthetic_targets(
    num_images: int, size: int, num_classes: int, seed: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """Padded targets ``[B, M, 5]`` (class, cx, cy, w, h in input pixels) and mask ``[B, M]``.

    Image ``b`` gets ``TRAIN_OBJECTS[b % 2]`` boxes from 1/16 to 1/2 of the image side.
    """
    rng = np.random.default_rng(seed)
    counts = [TRAIN_OBJECTS[b % len(TRAIN_OBJECTS)] for b in range(num_images)]
    m = max(counts)
    targets = np.zeros((num_images, m, 5), np.float32)
    mask = np.zeros((num_images, m), np.float32)
    for b, n in enumerate(counts):
        wh = rng.uniform(size / 16, size / 2, (n, 2))
        cxy = rng.uniform(wh / 2, size - wh / 2)
        cls = rng.integers(0, num_classes, n)
        targets[b, :n] = np.concatenate((cls[:, None], cxy, wh), 1)
        mask[b, :n] = 1.0
    return targets, mask


def train_batch(x: np.ndarray, num_classes: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The --train-step batch: the input and its mirror image, with synthetic boxes."""
    images = np.ascontiguousarray(np.concatenate((x, x[..., ::-1])))
    targets, mask = synthetic_targets(len(images), x.shape[-1], num_classes)
    return images, targets, mask


def anchor_points(size: int, strides: Sequence[int] = (8, 16, 32)) -> tuple[np.ndarray, np.ndarray]:
    """YOLOX's anchor grid for a square input: xy [A, 2] (x fastest) and strides [A]."""
    grids, out = [], []
    for s in strides:
        n = size // s
        ys, xs = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")
        grids.append(np.stack((xs.ravel(), ys.ravel()), 1))
        out.append(np.full(n * n, s))
    return np.concatenate(grids).astype(np.float32), np.concatenate(out).astype(np.float32)


def build_pair(
    model: str,
    src: str | None,
    num_classes: int | None,
    calibration_images: np.ndarray,
    seed: int = 0,
) -> tuple[Any, Any]:
    """(PyTorch original, msdet network with the converted weights), inference mode.

    ``src`` None: a random-init original whose BatchNorm statistics are calibrated on
    ``calibration_images`` (:func:`porting.reference.calibrate`), so that outputs are
    neither degenerate nor overflowing on that input.
    """
    from msdet.models.convert_pytorch import (
        ConversionError,
        infer_num_classes,
        load_torch_checkpoint,
    )
    from msdet.models.yolox import load_model_config
    from msdet.porting.reference import ReferenceMissingError, build_torch_yolox, calibrate

    try:
        cfg = load_model_config(model)
        if src is None:
            classes = num_classes or DEFAULT_CLASSES
            torch_model = calibrate(
                build_torch_yolox(cfg, classes, seed), seed=seed, images=calibration_images
            )
        else:
            state = load_torch_checkpoint(src)
            classes = num_classes or infer_num_classes(state)
            torch_model = build_torch_yolox(cfg, classes, seed)
            import torch  # present: build_torch_yolox needs it

            # The converter reads .pth files without torch: its tensors are numpy arrays.
            state = {k: torch.from_numpy(np.asarray(v)) for k, v in state.items()}
            try:
                torch_model.load_state_dict(state, strict=True)
            except RuntimeError as err:
                raise ComparisonSetupError(
                    f"{src} does not fit the original {model}: {err}"
                ) from err
        net = convert_to_network(torch_model.state_dict(), model, classes)
    except (ReferenceMissingError, ConversionError, ValueError) as err:
        raise ComparisonSetupError(str(err)) from err
    torch_model.eval()
    net.set_train(False)
    return torch_model, net


def convert_to_network(state_dict, model: str, num_classes: int):
    """msdet's network with converted weights (a seam: tests perturb weights here)."""
    from msdet.models.convert_pytorch import convert_to_network as convert

    return convert(state_dict, model, num_classes)
