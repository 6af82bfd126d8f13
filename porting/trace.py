"""Training traces: msdet and the PyTorch original trained step by step from the same weights
on the same batches, each step's loss terms recorded, and how far two traces drift apart.

One training step is compared term by term elsewhere (``porting.training``); a trace asks
what a few hundred steps make of the differences: the original's own arithmetic, reordered,
already drifts (its :func:`original_trace` with ``reorder=True`` takes each batch's images in
reverse, which changes every sum over the batch and nothing else), so msdet's drift from the
original is held against that one (:func:`drift`). The batches are msdet's training stream
for a seed (its sampler and augmentation, ``data.pipeline``), the weights the original's
initialisation for the seed (``porting.reference.build_torch_yolox``), converted; both sides
take the recipe's SGD (YOLOX's parameter groups, momentum, Nesterov, weight decay) at the
rate of :func:`msdet.engine.training.schedule.yolox_lr_schedule` for each step.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

TERMS = ("total", "iou", "obj", "cls", "l1")
# msdet's kernel paths: its compiled CPU kernels as this CPU builds them (-march=native), the
# same built without AVX-512 (what an AVX2-only CPU runs), and MindSpore's own operators.
PATHS = ("msdet", "msdet-avx2", "native")
AVX2_FLAGS = "-mno-avx512f"


@dataclass
class Trace:
    """Per-step loss terms ``[steps, 5]`` (:data:`TERMS`) and foreground counts ``[steps]``."""

    losses: np.ndarray
    num_fg: np.ndarray

    @property
    def total(self) -> np.ndarray:
        return self.losses[:, 0]


@dataclass(frozen=True)
class Batch:
    """One training batch as msdet's pipeline gives it: uint8 images ``[B, H, W, 3]`` (BGR),
    targets ``[B, rows, 5]`` (class, cx, cy, w, h in pixels) and their mask ``[B, rows]``."""

    images: np.ndarray
    targets: np.ndarray
    mask: np.ndarray

    def reordered(self) -> Batch:
        """The same images and targets, the batch taken in reverse."""
        return Batch(self.images[::-1].copy(), self.targets[::-1].copy(), self.mask[::-1].copy())


def stream(source: Any, img: int, batch: int, seed: int, steps: int, aug: dict,
           max_objects: int = 120) -> list[Batch]:  # fmt: skip
    """The first ``steps`` batches msdet's training pipeline draws for ``seed`` from
    ``source`` (a ``data.coco.CocoSource``): its epoch sampler and samples (mosaic and the
    rest of ``aug``, the data config's ``aug``), epoch after epoch."""
    from msdet.data.pipeline import AugmentParams, EpochSampler, TrainSamples

    samples = TrainSamples(source, (img, img), max_objects, AugmentParams.from_config(aug),
                           seed, epochs=10**6, no_aug_epochs=0)  # fmt: skip
    sampler = EpochSampler(len(source), seed, 0, 0, 1, shuffle=True)
    out: list[Batch] = []
    epoch = 0
    while len(out) < steps:
        order = sampler.epoch_indices(epoch)
        for first in range(0, len(order) - batch + 1, batch):
            items = [samples[epoch * len(source) + int(i)] for i in order[first : first + batch]]
            out.append(Batch(*(np.stack([x[k] for x in items]) for k in range(3))))
            if len(out) == steps:
                break
        epoch += 1
    return out


def original_trace(model_cfg: Any, num_classes: int, seed: int, batches: Sequence[Batch],
                   lrs: np.ndarray, reorder: bool = False) -> Trace:  # fmt: skip
    """The original's training (``YOLOX.forward(images, targets)``, ``backward``, its SGD)
    from its initialisation for ``seed``, one batch per step at the rate ``lrs[step]``;
    ``reorder``: each batch in reverse (:meth:`Batch.reordered`)."""
    import torch

    from msdet.porting.reference import build_torch_yolox, yolox_optimizer

    torch.set_num_threads(max(1, torch.get_num_threads()))
    net = build_torch_yolox(model_cfg, num_classes, seed=seed)
    net.train()
    net.head.use_l1 = False
    opt = yolox_optimizer(net, float(lrs[0]))
    losses, fg = [], []
    for step, batch in enumerate(batches):
        b = batch.reordered() if reorder else batch
        images = torch.from_numpy(b.images.transpose(0, 3, 1, 2).astype(np.float32))
        targets = torch.from_numpy(b.targets)  # YOLOX's rows: padding rows are all zero
        for group in opt.param_groups:
            group["lr"] = float(lrs[step])
        out = net(images, targets)
        opt.zero_grad()
        out["total_loss"].backward()
        opt.step()
        keys = ("total_loss", "iou_loss", "conf_loss", "cls_loss", "l1_loss")
        losses.append([float(out[k]) for k in keys])
        fg.append(float(out["num_fg"]))
    return Trace(np.asarray(losses, np.float64), np.asarray(fg, np.float64))


def initial_weights(model_cfg: Any, num_classes: int, seed: int) -> dict[str, np.ndarray]:
    """The original's initial weights for ``seed``, by msdet parameter name."""
    from msdet.models.convert_pytorch import mindspore_name
    from msdet.porting.reference import build_torch_yolox

    net = build_torch_yolox(model_cfg, num_classes, seed=seed)
    return {
        name: value.detach().numpy().astype(np.float32)
        for key, value in net.state_dict().items()
        if (name := mindspore_name(key)) is not None
    }


def msdet_trace(model_cfg: Any, num_classes: int, weights: dict[str, np.ndarray],
                batches: Sequence[Batch], lrs: np.ndarray, train_cfg: Any,
                kernels: Any) -> Trace:  # fmt: skip
    """msdet's training step (``engine.training.step``: the step ``train.py`` runs, graph
    mode) from ``weights``, one batch per step at the rate ``lrs[step]``, on ``kernels``
    (``ops.cpu_kernels.CpuKernels``: msdet's compiled CPU kernels or MindSpore's own)."""
    import mindspore as ms

    from msdet.engine.runtime.process import Runtime
    from msdet.engine.training.step import build_train_step
    from msdet.models.loss import YOLOXLoss
    from msdet.models.yolox import build_model

    net = build_model(model_cfg, num_classes, kernels)
    params = {k: ms.Parameter(ms.Tensor(v), name=k) for k, v in weights.items()}
    missing, _ = ms.load_param_into_net(net, params, strict_load=True)
    if missing:
        raise ValueError(f"the original's weights leave {len(missing)} parameters unset")
    rt = Runtime(device="CPU", mode="graph", amp_level="O0", sink=False, sink_size=-1,
                 kernels=kernels)  # fmt: skip
    loss = YOLOXLoss(num_classes, kernels=kernels)
    step = build_train_step(net, loss, np.asarray(lrs, np.float32), train_cfg, rt)
    losses, fg = [], []
    for batch in batches:
        out = step(ms.Tensor(batch.images), ms.Tensor(batch.targets), ms.Tensor(batch.mask))
        terms = [float(t.asnumpy()) for t in out[:6]]
        losses.append(terms[:5])
        fg.append(terms[5])
    return Trace(np.asarray(losses, np.float64), np.asarray(fg, np.float64))


def drift(a: Trace, b: Trace, window: int = 25) -> dict[str, Any]:
    """How two traces of the same steps differ: per window of ``window`` steps the mean of
    |a - b| / b of the total loss (``relative``) and the mean of a - b over b's mean
    (``bias``: a difference of one sign is a systematic one), and the first step whose
    total loss differs by more than 1e-3 relative (``first``; None when none does)."""
    ta, tb = a.total, b.total
    n = min(len(ta), len(tb))
    rel = np.abs(ta[:n] - tb[:n]) / np.maximum(np.abs(tb[:n]), 1e-12)
    windows = [(s, min(s + window, n)) for s in range(0, n, window)]
    above = np.flatnonzero(rel > 1e-3)
    return {
        "steps": n,
        "relative": [float(rel[s:e].mean()) for s, e in windows],
        "bias": [float((ta[s:e] - tb[s:e]).mean() / tb[s:e].mean()) for s, e in windows],
        "first": int(above[0]) if len(above) else None,
        "fg_relative": float(
            np.mean(np.abs(a.num_fg[:n] - b.num_fg[:n]) / np.maximum(b.num_fg[:n], 1.0))
        ),  # fmt: skip
    }


def cpu_has_avx512() -> bool:
    """Whether this CPU runs AVX-512 code (its flags in /proc/cpuinfo)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            return " avx512f" in f.read()
    except OSError:
        return False


@contextlib.contextmanager
def _kernel_flags(flags: str) -> Iterator[None]:
    from msdet.ops.cpu_kernels import FLAGS_VAR

    old = os.environ.get(FLAGS_VAR)
    os.environ[FLAGS_VAR] = flags
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(FLAGS_VAR, None)
        else:
            os.environ[FLAGS_VAR] = old


def kernels_for(path: str) -> tuple[Any, str | None]:
    """(``CpuKernels`` of the kernel path ``path`` (:data:`PATHS`), None) on this CPU, or
    (None, why) where this CPU cannot run it."""
    from msdet.ops import cpu_kernels

    if path == "native":
        return cpu_kernels.NATIVE, None
    if path == "msdet-avx2":
        with _kernel_flags(AVX2_FLAGS):
            library = cpu_kernels.build_kernel_library()
    else:
        if not cpu_has_avx512():
            return None, "msdet's kernels as built here are its AVX2 path (msdet-avx2)"
        library = cpu_kernels.build_kernel_library()
    if library is None:
        return None, "no C++ compiler: msdet's kernels cannot be built here"
    cpu_kernels.set_kernel_threads(library, max(1, os.cpu_count() or 1))
    return cpu_kernels.CpuKernels.all(library), None


def compare(seed: int = 0, steps: int = 200, img: int = 320, batch: int = 8,
            model: str = "yolox_nano", paths: Sequence[str] = PATHS, num_train: int = 2000,
            overrides: Sequence[str] = ()) -> dict[str, Any]:  # fmt: skip
    """msdet on each kernel path and the original reordered, each against the original, over
    the first ``steps`` steps of the ``parity`` recipe's training of ``model`` on the shapes
    set for ``seed``: the figures of :func:`drift` for each, and the traces."""
    from msdet.common.config import load_config
    from msdet.data.build import build_sources
    from msdet.engine.training.schedule import scaled_lr, yolox_lr_schedule
    from msdet.models.yolox import load_model_config

    cfg = load_config("tool", ["train=parity", f"data.num_train={num_train}", "data.num_val=8",
                               f"data.img_size=[{img},{img}]", *overrides])  # fmt: skip
    source = build_sources(cfg.data)[0]
    tcfg = cfg.train
    steps_per_epoch = len(source) // batch
    lrs = yolox_lr_schedule(scaled_lr(float(tcfg.lr_per_img), batch), steps_per_epoch,
                            int(tcfg.epochs), float(tcfg.warmup_epochs),
                            int(tcfg.no_aug_epochs), float(tcfg.min_lr_ratio))[:steps]  # fmt: skip
    batches = stream(source, img, batch, seed, steps, dict(cfg.data.aug), int(cfg.data.max_objects))
    model_cfg = load_model_config(model)
    classes = source.num_classes
    original = original_trace(model_cfg, classes, seed, batches, lrs)
    result: dict[str, Any] = {
        "seed": seed, "steps": steps, "img": img, "batch": batch, "model": model,
        "cpu": platform.processor() or platform.machine(),
        "traces": {"original": original.losses.tolist()},
        "drift": {}, "skipped": {},
    }  # fmt: skip
    reordered = original_trace(model_cfg, classes, seed, batches, lrs, reorder=True)
    result["drift"]["original reordered"] = drift(reordered, original)
    result["traces"]["original reordered"] = reordered.losses.tolist()
    weights = initial_weights(model_cfg, classes, seed)
    for path in paths:
        kernels, why = kernels_for(path)
        if kernels is None:
            result["skipped"][path] = why
            continue
        trace = msdet_trace(model_cfg, classes, weights, batches, lrs, tcfg, kernels)
        result["drift"][f"msdet {path}"] = drift(trace, original)
        result["traces"][f"msdet {path}"] = trace.losses.tolist()
    return result


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """``python -m msdet.porting.trace``: the drift table, and the traces as JSON."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--img", type=int, default=320)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--model", default="yolox_nano")
    parser.add_argument("--paths", default=",".join(PATHS), help="kernel paths, comma-separated")
    parser.add_argument("--num-train", type=int, default=2000)
    parser.add_argument("--json", default=None, help="write the result (traces included) here")
    parser.add_argument("overrides", nargs="*", help="config settings, e.g. data.aug.mosaic_prob=0")
    args = parser.parse_args(argv)
    from msdet.engine.runtime.cpu import configure_process_env

    configure_process_env("CPU")  # before MindSpore loads
    import mindspore as ms

    ms.set_context(mode=ms.GRAPH_MODE)
    ms.set_device("CPU")
    result = compare(args.seed, args.steps, args.img, args.batch, args.model,
                     args.paths.split(","), args.num_train, args.overrides)  # fmt: skip
    for name, d in result["drift"].items():
        print(f"{name:20s} first step > 1e-3: {d['first']}  relative per 25 steps: "
              + " ".join(f"{v:.4f}" for v in d["relative"])
              + "  bias: " + " ".join(f"{v:+.4f}" for v in d["bias"]), flush=True)  # fmt: skip
    for path, why in result["skipped"].items():
        print(f"msdet {path}: skipped: {why}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(result, f)
    return result


if __name__ == "__main__":
    main()
