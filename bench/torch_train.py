"""Train the PyTorch original (YOLOX 0.3.0) on a COCO-format folder on CPU, for bench.convergence.

YOLOX's own Trainer needs CUDA, so this is its per-iteration recipe written as a plain
loop with YOLOX's components: COCODataset + MosaicDetection + TrainTransform, SGD with its
parameter groups, the ``yoloxwarmcos`` LRScheduler, ModelEMA, L1 loss and mosaic off for
the last ``no_aug_epochs``; with ``multiscale_range`` > 0, YOLOX's multi-scale training
through its own ``Exp.random_resize`` (every 10 iterations) and ``Exp.preprocess``. It stops, like
msdet's ``train.time_limit_min``, after the last epoch that fits in the time budget, then
scores the EMA weights with msdet's COCO evaluator (pycocotools) on the val split.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

import numpy as np

from msdet.models.yolox import load_model_config
from msdet.porting.reference import build_torch_yolox, import_yolox, yolox_optimizer


def train_original(
    root: str,
    out_dir: str,
    model: str = "yolox_nano",
    img: int = 320,
    batch: int = 8,
    epochs: int = 12,
    warmup_epochs: int = 1,
    no_aug_epochs: int = 2,
    lr_per_img: float = 0.01 / 64,
    aug: dict[str, Any] | None = None,
    time_limit_min: float = 12.0,
    seed: int = 0,
    multiscale_range: int = 0,
    data_stream: str = "yolox",
) -> dict[str, Any]:
    """Train and evaluate; returns {"history": [...per epoch...], "metrics": {...}}.

    ``data_stream="msdet"``: the batches msdet's own pipeline draws for ``seed`` (its
    sampler and ``TrainSamples``) instead of YOLOX's dataset: the original's model, loss and
    optimizer on msdet's data, to tell a difference in the data from one in the training."""
    import_yolox()
    import random

    import torch
    from yolox.data import COCODataset, MosaicDetection, TrainTransform
    from yolox.utils import LRScheduler, ModelEMA

    aug = aug or {}
    torch.manual_seed(seed)
    np.random.seed(seed)
    random.seed(seed)  # the original's random_resize draws with `random`
    exp = _multiscale_exp(img, multiscale_range)
    input_size = (img, img)
    base = COCODataset(
        data_dir=root,
        json_file="instances_train.json",
        name="train",
        img_size=(img, img),
        preproc=TrainTransform(max_labels=50, flip_prob=0.5, hsv_prob=1.0),
    )
    dataset = MosaicDetection(
        base,
        mosaic=True,
        img_size=(img, img),
        preproc=TrainTransform(
            max_labels=120, flip_prob=aug.get("flip_prob", 0.5), hsv_prob=aug.get("hsv_prob", 1.0)
        ),
        degrees=aug.get("degrees", 10.0),
        translate=aug.get("translate", 0.1),
        mosaic_scale=tuple(aug.get("mosaic_scale", (0.5, 1.5))),
        mixup_scale=tuple(aug.get("mixup_scale", (0.5, 1.5))),
        shear=aug.get("shear", 2.0),
        enable_mixup=aug.get("mixup_prob", 0.0) > 0,
        mosaic_prob=aug.get("mosaic_prob", 0.5),
        mixup_prob=aug.get("mixup_prob", 0.0),
    )
    net = build_torch_yolox(load_model_config(model), len(base.class_ids), seed=seed)
    net.train()
    steps = len(dataset) // batch
    lr = lr_per_img * batch
    # Exp.get_optimizer: the optimizer starts at warmup_lr (0) with a warm-up, else at lr.
    opt = yolox_optimizer(net, 0.0 if warmup_epochs > 0 else lr)
    sched = LRScheduler(
        "yoloxwarmcos",
        lr,
        steps,
        epochs,
        warmup_epochs=warmup_epochs,
        warmup_lr_start=0,
        no_aug_epochs=no_aug_epochs,
        min_lr_ratio=0.05,
    )
    ema = ModelEMA(net, 0.9998)
    history, start, it = [], time.time(), 0
    msdet_stream = (
        _msdet_batches(root, img, batch, aug, seed, epochs, no_aug_epochs)
        if data_stream == "msdet"
        else None
    )
    for epoch in range(epochs):
        if epoch + 1 == epochs - no_aug_epochs:  # as YOLOX's Trainer.before_epoch
            dataset.enable_mosaic = False  # YOLOX's close_mosaic + L1 on
            net.head.use_l1 = True
        if msdet_stream is not None:
            loader = msdet_stream(epoch)
        else:
            loader = torch.utils.data.DataLoader(
                dataset, batch_size=batch, shuffle=True, num_workers=1, drop_last=True
            )
        sums, t0 = {"total": 0.0, "iou": 0.0, "obj": 0.0, "cls": 0.0, "l1": 0.0}, time.time()
        for images, targets, _, _ in loader:
            images, targets = images.float(), targets.float()
            if exp is not None:  # the original's Trainer.train_one_iter
                images, targets = exp.preprocess(images, targets, input_size)
            out = net(images, targets)
            opt.zero_grad()
            out["total_loss"].backward()
            opt.step()
            ema.update(net)
            it += 1  # Trainer.train_one_iter: the rate for the next step, after this one
            for group in opt.param_groups:
                group["lr"] = sched.update_lr(it)
            for k, key in (
                ("total", "total_loss"),
                ("iou", "iou_loss"),
                ("obj", "conf_loss"),
                ("cls", "cls_loss"),
                ("l1", "l1_loss"),
            ):
                sums[k] += float(out[key])
            if exp is not None and it % 10 == 0:  # the original's after_iter
                input_size = _random_resize(exp)
        history.append(
            {
                "epoch": epoch + 1,
                "wall_min": (time.time() - start) / 60,
                **{f"loss_{k}": v / steps for k, v in sums.items()},
            }
        )
        spent, per_epoch = time.time() - start, (time.time() - start) / (epoch + 1)
        print(
            f"pytorch epoch {epoch + 1}: loss {history[-1]['loss_total']:.3f} "
            f"({time.time() - t0:.0f} s)",
            flush=True,
        )
        if spent + per_epoch > time_limit_min * 60:
            break
    metrics = evaluate_original(ema.ema, root, out_dir, img, batch)
    result = {"history": history, "metrics": metrics, "train_min": (time.time() - start) / 60}
    with open(os.path.join(out_dir, "pytorch_result.json"), "w", encoding="utf-8") as f:
        json.dump(result, f, indent=2)
    return result


def _msdet_batches(root, img, batch, aug, seed, epochs, no_aug_epochs):
    """``epoch -> batches`` of msdet's training stream as YOLOX's loop takes them: images
    float32 [B, 3, H, W] (BGR 0-255) and targets [B, rows, 5] (class, cx, cy, w, h; zero
    rows are padding), from msdet's sampler and ``TrainSamples`` for ``seed``."""
    import torch

    from msdet.data.coco import CocoSource
    from msdet.data.pipeline import AugmentParams, EpochSampler, TrainSamples

    source = CocoSource(root, "annotations/instances_train.json", "train")
    samples = TrainSamples(source, (img, img), 120, AugmentParams.from_config(aug), seed,
                           epochs, no_aug_epochs)  # fmt: skip
    sampler = EpochSampler(len(source), seed, 0, 0, 1, shuffle=True)

    def batches(epoch):
        order = sampler.epoch_indices(epoch)
        for first in range(0, len(order) - batch + 1, batch):
            items = [samples[epoch * len(source) + int(i)] for i in order[first : first + batch]]
            images = np.stack([x[0] for x in items]).transpose(0, 3, 1, 2).astype(np.float32)
            targets = np.stack([x[1] for x in items])
            yield torch.from_numpy(images), torch.from_numpy(targets), None, None

    return batches


def _multiscale_exp(img: int, multiscale_range: int):
    """YOLOX's base Exp holding the multi-scale settings, or None when off."""
    if multiscale_range <= 0:
        return None
    from yolox.exp.yolox_base import Exp

    exp = Exp()
    exp.input_size = (img, img)
    exp.multiscale_range = int(multiscale_range)
    return exp


def _random_resize(exp) -> tuple[int, int]:
    """The original's ``Exp.random_resize`` on CPU: it puts its size tensor on CUDA with
    ``.cuda()``, which is made a no-op for the call; the draw itself is the original's."""
    import torch

    cuda = torch.Tensor.cuda
    torch.Tensor.cuda = lambda self, *args, **kwargs: self
    try:
        return exp.random_resize(None, 0, 0, False)
    finally:
        torch.Tensor.cuda = cuda


def evaluate_original(model, root: str, out_dir: str, img: int, batch: int) -> dict[str, Any]:
    """YOLOX eval (letterbox, postprocess conf 0.01, NMS 0.65) scored by msdet's evaluator."""
    import torch
    from yolox.utils import postprocess

    from msdet.data.coco import CocoSource
    from msdet.data.transforms import letterbox
    from msdet.engine.evaluation.coco import CocoEvaluator

    val = CocoSource(root, "annotations/instances_val.json", "val")
    evaluator = CocoEvaluator(val.coco, val.category_ids, val.class_names, out_dir)
    model.eval()
    for first in range(0, len(val), batch):
        idx = list(range(first, min(first + batch, len(val))))
        pairs = [letterbox(val.load(i)[0], (img, img)) for i in idx]
        x = torch.from_numpy(np.stack([p[0].transpose(2, 0, 1) for p in pairs]).astype(np.float32))
        with torch.no_grad():
            outs = postprocess(model(x), val.num_classes, 0.01, 0.65)
        dets = np.zeros((len(idx), 100, 6), np.float32)
        counts = np.zeros(len(idx), np.int32)
        for k, o in enumerate(outs):
            if o is None:
                continue
            o = o.numpy()
            order = np.argsort(-(o[:, 4] * o[:, 5]))[:100]
            o = o[order]
            dets[k, : len(o)] = np.concatenate(
                [o[:, :4], (o[:, 4] * o[:, 5])[:, None], o[:, 6:7]], 1
            )
            counts[k] = len(o)
        infos = [val.image_info(i) for i in idx]
        evaluator.update(
            dets,
            counts,
            [i["id"] for i in infos],
            np.array([p[1] for p in pairs]),
            np.array([[i["height"], i["width"]] for i in infos]),
        )
    return evaluator.evaluate()
