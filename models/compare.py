"""Module-by-module comparison of msdet's YOLOX with the PyTorch original.

    python -m models.compare --model yolox_nano --src yolox_nano.pth [--image IMG] [--size 416]
        [--atol 1e-4 --rtol 1e-4] [--mode graph|pynative] [--train-step] [--json OUT.json]
    python -m models.compare --model yolox_nano --random-init     # no checkpoint needed

Each major module (stem, dark2..dark5, every neck block, every head branch per level,
the decoded output) is run on *the same input* in both frameworks: the input PyTorch's
module received is fed to the matching MindSpore cell. Differences then measure that
module alone, so a wrong weight mapping or a mis-ported layer shows up exactly where it
is, instead of being smeared over everything downstream by float32 rounding (which grows
through a deep network: PyTorch's own float32 output differs from its float64 output by
~1e-3 on a random-init YOLOX-nano).

After the modules come rows that run more than one module: the whole network in the
chosen mode, and the detections after NMS (msdet's ``BatchedNMS`` and YOLOX's
``postprocess`` on the same decoded predictions). ``--train-step`` adds one training
step: every loss term, the number of foreground anchors, and gradient norms per module
and per YOLOX optimizer group (BN weights / conv weights / biases).

Per-module rows always run in PyNative mode: in graph mode every one of the ~30 sub-cells
would be compiled separately (13.5 s instead of 4.2 s for nano at 416 px on a 2-core
CPU). Rows that run the whole network, NMS and the training step use ``--mode``.

Rows that run the whole network accumulate float32 rounding, so they are compared with
the original run in float64: such a row passes when it is within atol/rtol of that
reference, or no further from it than ``ROUNDING_FACTOR`` times PyTorch's own float32
result. Exit status: 0 all rows pass, 1 a row fails (the first one is named), 2 the
comparison could not run (missing PyTorch/YOLOX, unreadable checkpoint or image).
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

BACKBONE = [f"backbone.backbone.{m}" for m in ("stem", "dark2", "dark3", "dark4", "dark5")]
NECK = [
    f"backbone.{m}"
    for m in (
        "lateral_conv0",
        "C3_p4",
        "reduce_conv1",
        "C3_p3",
        "bu_conv2",
        "C3_n3",
        "bu_conv1",
        "C3_n4",
    )
]
HEAD_BRANCHES = ("stems", "cls_convs", "cls_preds", "reg_convs", "reg_preds", "obj_preds")

DEFAULT_SIZE = 416
DEFAULT_CLASSES = 80  # COCO, for --random-init
# A whole-network row may be this many times further from float64 than PyTorch float32 is:
# MindSpore's float32 lands 2.5-4x further (measured on nano: conv accumulation order and
# its less accurate sigmoid/exp), a mis-ported layer lands orders of magnitude further.
ROUNDING_FACTOR = 10.0
# Post-processing as msdet's eval defaults (configs/config.yaml) and YOLOX's evaluation.
NMS_CONF, NMS_IOU, NMS_MAX_DET = 0.01, 0.65, 100
PAD_VALUE = 114  # YOLOX's letterbox grey
TRAIN_OBJECTS = (3, 6)  # synthetic boxes per image of the --train-step batch
OPTIMIZER_GROUPS = ("BN weights", "conv weights", "biases")  # YOLOX's pg0, pg1, pg2
LOSS_TERMS = (("total", "total_loss"), ("iou", "iou_loss"), ("obj", "conf_loss"))
LOSS_TERMS += (("cls", "cls_loss"), ("l1", "l1_loss"))


def major_modules(num_levels: int = 3) -> list[str]:
    """Names of the compared modules in execution order (PyTorch and msdet share them)."""
    head = [f"head.{b}.{k}" for k in range(num_levels) for b in HEAD_BRANCHES]
    return BACKBONE + NECK + head


@dataclass
class ModuleDiff:
    """Difference of one module's output between msdet and the original."""

    module: str
    shape: tuple[int, ...]
    max_abs: float
    max_rel: float  # max |a - b| / max(|b|, 1): relative for large values, absolute near 0
    passed: bool
    note: str = ""  # what the row compares, when it is not the module output vs PyTorch fp32

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["shape"] = list(self.shape)
        return d


def diff(module: str, ours: np.ndarray, ref: np.ndarray, atol: float, rtol: float) -> ModuleDiff:
    """Compare two arrays; passes when |a - b| <= atol + rtol * |b| everywhere."""
    ours = np.asarray(ours, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    if ours.shape != ref.shape:
        return ModuleDiff(
            module,
            tuple(ref.shape),
            float("inf"),
            float("inf"),
            False,
            f"shape {tuple(ours.shape)} vs original {tuple(ref.shape)}",
        )
    err = np.abs(ours - ref)
    finite = np.isfinite(ours).all() and np.isfinite(ref).all()
    passed = bool(finite and (err <= atol + rtol * np.abs(ref)).all())
    max_abs = float(err.max()) if err.size else 0.0
    max_rel = float((err / np.maximum(np.abs(ref), 1.0)).max()) if err.size else 0.0
    return ModuleDiff(module, tuple(ref.shape), max_abs, max_rel, passed)


def rounding_aware_diff(
    module: str,
    ours: np.ndarray,
    ref32: np.ndarray,
    ref64: np.ndarray,
    atol: float,
    rtol: float,
    factor: float = ROUNDING_FACTOR,
) -> ModuleDiff:
    """Compare a result that went through the whole network with the original in float64.

    Passes when within ``atol``/``rtol`` of ``ref64``, or when its max relative error is at
    most ``factor`` times that of the original's own float32 result ``ref32``.
    """
    row = diff(module, ours, ref64, atol, rtol)
    own = diff(module, ref32, ref64, atol, rtol)
    if math.isfinite(row.max_rel):
        finite = bool(np.isfinite(np.asarray(ours, dtype=np.float64)).all())
        row.passed = row.passed or (finite and row.max_rel <= factor * own.max_rel)
        row.note = f"vs original fp64; original fp32 max rel {own.max_rel:.2e}"
    return row


def capture_torch_io(torch_model, x: np.ndarray, names: list[str]) -> dict[str, tuple[Any, Any]]:
    """Run the PyTorch model once; record (input, output) of each named module."""
    import torch

    modules = dict(torch_model.named_modules())
    missing = [n for n in names if n not in modules]
    if missing:
        raise KeyError(f"modules not in the PyTorch model: {missing}")
    seen: dict[str, tuple[Any, Any]] = {}

    def recorder(name: str):
        def hook(module, inputs, output) -> None:  # returning a value would replace output
            seen.setdefault(name, (inputs[0], output))

        return hook

    hooks = [modules[n].register_forward_hook(recorder(n)) for n in names]
    try:
        torch_model.eval()
        with torch.no_grad():
            final = torch_model(torch.from_numpy(x))
    finally:
        for h in hooks:
            h.remove()
    seen["output"] = (None, final)
    return seen


def _numpy(t) -> np.ndarray:
    return t.detach().cpu().numpy()


def compare_modules(
    torch_model, ms_model, x: np.ndarray, atol: float = 1e-4, rtol: float = 1e-4
) -> list[ModuleDiff]:
    """Per-module differences, in execution order, plus the decoded head output.

    ``ms_model`` must hold the converted weights and be in inference mode.
    """
    import mindspore as ms

    names = major_modules(len(ms_model.head.stems))
    io = capture_torch_io(torch_model, x, names + ["backbone", "head"])
    cells = dict(ms_model.cells_and_names())
    rows = []
    for name in names:
        inp, out = io[name]
        ours = cells[name](ms.Tensor(_numpy(inp))).asnumpy()
        rows.append(diff(name, ours, _numpy(out), atol, rtol))
    # The decoded output: the head fed with the original's neck features.
    feats = tuple(ms.Tensor(_numpy(f)) for f in io["backbone"][1])
    decoded = ms_model.head(feats).asnumpy()
    rows.append(diff("head (decoded output)", decoded, _numpy(io["head"][1]), atol, rtol))
    return rows


def first_failure(rows: list[ModuleDiff]) -> ModuleDiff | None:
    """The first module, in execution order, whose output diverges."""
    return next((r for r in rows if not r.passed), None)


def format_table(rows: list[ModuleDiff]) -> str:
    """A fixed-width table of the comparison."""
    lines = [f"{'module':<34} {'shape':<22} {'max abs':>10} {'max rel':>10}  result"]
    for r in rows:
        shape = "x".join(str(s) for s in r.shape) or "scalar"
        line = (
            f"{r.module:<34} {shape:<22} {r.max_abs:>10.2e} {r.max_rel:>10.2e}  "
            f"{'ok' if r.passed else 'FAIL'}"
        )
        lines.append(f"{line}  {r.note}" if r.note else line)
    return "\n".join(lines)


# --- Inputs -----------------------------------------------------------------------------


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


# --- Whole network and post-processing ------------------------------------------------------


def torch_float64(torch_model):
    """A float64 copy of the original: the rounding-free reference."""
    return copy.deepcopy(torch_model).double()


def compare_network_output(
    torch_model, ms_model, x: np.ndarray, atol: float, rtol: float, label: str
) -> tuple[ModuleDiff, np.ndarray]:
    """The whole network (inference mode, current MindSpore mode) against the original.

    Returns the row and the original's float32 decoded predictions (for the NMS row).
    """
    import mindspore as ms
    import torch

    ours = ms_model(ms.Tensor(x)).asnumpy()
    torch_model.eval()
    with torch.no_grad():
        ref32 = _numpy(torch_model(torch.from_numpy(x)))
        ref64 = _numpy(torch_float64(torch_model).eval()(torch.from_numpy(x).double()))
    return rounding_aware_diff(label, ours, ref32, ref64, atol, rtol), ref32


def _canonical(rows: np.ndarray) -> np.ndarray:
    """Detections in a fixed order (score descending, then class and box): NMS outputs of
    equal sets then compare row by row, whatever order ties come out in."""
    keys = [rows[:, i] for i in (3, 2, 1, 0, 5)] + [-rows[:, 4]]
    return rows[np.lexsort(keys)]


def yolox_detections(decoded: np.ndarray, num_classes: int, conf: float, iou: float):
    """YOLOX's ``postprocess`` per image as ``[n, 6]`` (x1, y1, x2, y2, score, class)."""
    import torch
    from yolox.utils import postprocess

    # postprocess rewrites its input in place (centre boxes -> corners): give it a copy.
    outs = postprocess(torch.from_numpy(decoded.copy()), num_classes, conf, iou)
    result = []
    for out in outs:
        if out is None:
            result.append(np.zeros((0, 6), np.float32))
            continue
        o = _numpy(out)
        result.append(np.concatenate((o[:, :4], o[:, 4:5] * o[:, 5:6], o[:, 6:7]), 1))
    return result


def compare_detections(
    decoded: np.ndarray,
    num_classes: int,
    atol: float,
    rtol: float,
    label: str,
    conf: float = NMS_CONF,
    iou: float = NMS_IOU,
    max_det: int = NMS_MAX_DET,
) -> ModuleDiff:
    """msdet's ``BatchedNMS`` against YOLOX's ``postprocess`` on the same decoded predictions.

    Both keep the ``max_det`` best detections per image (YOLOX keeps all; its list is cut to
    the same length). ``BatchedNMS`` takes the ``pre_nms_topk`` best candidates, set to the
    most one Ascend NMS call allows: greedy NMS keeps the same boxes among them.
    """
    import mindspore as ms

    from ops.nms import ASCEND_MAX_NMS_BOXES, BatchedNMS

    topk = min(decoded.shape[1], ASCEND_MAX_NMS_BOXES)
    nms = BatchedNMS(num_classes, conf, iou, pre_nms_topk=topk, max_det=max_det)
    dets, counts = (t.asnumpy() for t in nms(ms.Tensor(decoded)))
    ref = yolox_detections(decoded, num_classes, conf, iou)
    ours_all, ref_all, notes = [], [], []
    for b, r in enumerate(ref):
        r = r[np.argsort(-r[:, 4], kind="stable")][:max_det]
        ours_all.append(_canonical(dets[b, : counts[b]]))
        ref_all.append(_canonical(r))
        notes.append(f"{int(counts[b])}/{len(r)}")
    row = diff(label, np.concatenate(ours_all), np.concatenate(ref_all), atol, rtol)
    row.note = f"detections per image msdet/original: {' '.join(notes)} (conf {conf}, iou {iou})"
    return row


# --- One training step ---------------------------------------------------------------------


def optimizer_group(name: str) -> str:
    """YOLOX's optimizer group of a msdet parameter: BN weights, conv weights or biases."""
    if name.endswith(".gamma"):
        return "BN weights"
    if name.endswith((".beta", ".bias")):
        return "biases"
    return "conv weights"


def module_of(name: str, modules: Sequence[str]) -> str:
    """The compared module a parameter belongs to."""
    for m in modules:
        if name.startswith(m + "."):
            return m
    raise KeyError(f"parameter {name} is in none of the compared modules")


def loss_and_grads_cell(net_with_loss, weights):
    """A Cell: (images, targets, mask) -> (loss terms, gradients of ``weights``).

    A Cell so that graph mode compiles forward and backward as one graph; defined here,
    not at module level, because this module must not import MindSpore at import time
    (:func:`main` prepares the process environment first).
    """
    import mindspore as ms
    from mindspore import nn

    class LossAndGrads(nn.Cell):
        def __init__(self):
            super().__init__(auto_prefix=False)  # keep the network's parameter names
            self.net_with_loss = net_with_loss
            self.grad_fn = ms.value_and_grad(self.forward, None, weights, has_aux=True)

        def forward(self, images, targets, mask):
            out = self.net_with_loss(images, targets, mask)
            return out[0], out

        def construct(self, images, targets, mask):
            (_, terms), grads = self.grad_fn(images, targets, mask)
            return terms, grads

    return LossAndGrads()


def torch_train_step(torch_model, images, targets, use_l1: bool):
    """YOLOX's training forward (``YOLOX.forward(x, targets)``) and ``backward()``.

    Returns (loss terms by msdet name + ``num_fg``, gradients by msdet parameter name).
    """
    import torch

    from models.convert import mindspore_name

    torch_model.train()
    torch_model.head.use_l1 = use_l1
    torch_model.zero_grad()
    dtype = next(torch_model.parameters()).dtype
    out = torch_model(torch.from_numpy(images).to(dtype), torch.from_numpy(targets).to(dtype))
    out["total_loss"].backward()
    losses = {ours: float(out[theirs]) for ours, theirs in LOSS_TERMS}
    num_gts = int((np.abs(targets).sum(-1) > 0).sum())
    losses["num_fg"] = float(round(float(out["num_fg"]) * max(num_gts, 1)))
    grads = {
        mindspore_name(n): (_numpy(p.grad) if p.grad is not None else np.zeros(p.shape))
        for n, p in torch_model.named_parameters()
    }
    torch_model.zero_grad()
    return losses, grads


def msdet_train_step(ms_model, images, targets, mask, use_l1: bool):
    """msdet's ``DetectorWithLoss`` and ``mindspore.value_and_grad`` (current mode)."""
    import mindspore as ms

    from models.loss import DetectorWithLoss, YOLOXLoss

    loss = YOLOXLoss(ms_model.num_classes)
    loss.use_l1.set_data(ms.Tensor(1.0 if use_l1 else 0.0, ms.float32))
    weights = ms.ParameterTuple(ms_model.trainable_params())
    ms_model.set_train(True)
    try:
        cell = loss_and_grads_cell(DetectorWithLoss(ms_model, loss), weights)
        terms, grads = cell(ms.Tensor(images), ms.Tensor(targets), ms.Tensor(mask))
    finally:
        ms_model.set_train(False)
    names = ("total", "iou", "obj", "cls", "l1", "num_fg")
    losses = {k: float(v.asnumpy()) for k, v in zip(names, terms)}
    return losses, {p.name: g.asnumpy() for p, g in zip(weights, grads)}


def _group_norms(grads: dict[str, np.ndarray], group_of) -> dict[str, float]:
    sums: dict[str, float] = {}
    for name, g in grads.items():
        key = group_of(name)
        sums[key] = sums.get(key, 0.0) + float(np.square(g.astype(np.float64)).sum())
    return {k: math.sqrt(v) for k, v in sums.items()}


def compare_train_step(
    torch_model,
    ms_model,
    images: np.ndarray,
    targets: np.ndarray,
    mask: np.ndarray,
    atol: float,
    rtol: float,
    use_l1: bool = False,
) -> list[ModuleDiff]:
    """One training step: loss terms, foreground anchors, gradient norms per module and per
    optimizer group, each against the original (float32 and the float64 reference)."""
    ref_targets = targets * mask[..., None]  # YOLOX: an all-zero row is padding
    ref32, grads32 = torch_train_step(torch_model, images, ref_targets, use_l1)
    ref64, grads64 = torch_train_step(torch_float64(torch_model), images, ref_targets, use_l1)
    ours, grads = msdet_train_step(ms_model, images, targets, mask, use_l1)

    rows = []
    for term, _ in LOSS_TERMS:
        rows.append(
            rounding_aware_diff(
                f"train: loss {term}", ours[term], ref32[term], ref64[term], atol, rtol
            )
        )
    fg = diff("train: foreground anchors", ours["num_fg"], ref32["num_fg"], 0.0, 0.0)
    fg.note = (
        f"msdet {ours['num_fg']:.0f}, original fp32 {ref32['num_fg']:.0f}, "
        f"fp64 {ref64['num_fg']:.0f} (SimOTA assignment, must be equal)"
    )
    rows.append(fg)

    missing = sorted(set(grads32) ^ set(grads))
    if missing:
        raise KeyError(f"parameters without a counterpart: {missing}")
    modules = major_modules(len(ms_model.head.stems))
    for title, group_of, order in (
        ("grad", lambda n: module_of(n, modules), modules),
        ("grad group", optimizer_group, OPTIMIZER_GROUPS),
    ):
        n_ours, n32, n64 = (_group_norms(g, group_of) for g in (grads, grads32, grads64))
        delta = _group_norms({k: grads[k] - grads32[k] for k in grads}, group_of)
        for key in order:
            row = rounding_aware_diff(
                f"train: {title} {key}", n_ours[key], n32[key], n64[key], atol, rtol
            )
            row.note = (
                f"norm {n_ours[key]:.4e}; |g - g_orig|/|g_orig| "
                f"{delta[key] / max(n32[key], 1e-30):.1e}; {row.note}"
            )
            rows.append(row)
    return rows


# --- The command line -------------------------------------------------------------------------


class ComparisonSetupError(RuntimeError):
    """The comparison cannot run (reference missing, bad checkpoint, unreadable image)."""


def build_pair(
    model: str, src: str | None, num_classes: int | None, size: int, seed: int = 0
) -> tuple[Any, Any]:
    """(PyTorch original, msdet network with the converted weights, inference mode).

    ``src`` None: a random-init original with calibrated BatchNorm statistics
    (:func:`models.reference.calibrate`) so that outputs are not degenerate.
    """
    from models.convert import ConversionError, infer_num_classes, load_torch_checkpoint
    from models.reference import ReferenceMissingError, build_torch_yolox, calibrate
    from models.yolox import load_model_config

    try:
        cfg = load_model_config(model)
        if src is None:
            classes = num_classes or DEFAULT_CLASSES
            torch_model = calibrate(build_torch_yolox(cfg, classes, seed), img_size=size)
        else:
            state = load_torch_checkpoint(src)
            classes = num_classes or infer_num_classes(state)
            torch_model = build_torch_yolox(cfg, classes, seed)
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
    from models.convert import convert_to_network as convert

    return convert(state_dict, model, num_classes)


def run_comparison(
    torch_model,
    ms_model,
    x: np.ndarray,
    mode: str,
    atol: float,
    rtol: float,
    train_step: bool = False,
    use_l1: bool = False,
) -> list[ModuleDiff]:
    """All rows: modules (PyNative), whole network and NMS (``mode``), optionally the
    training step (``mode``). Restores MindSpore's mode afterwards."""
    import mindspore as ms

    previous = ms.get_context("mode")
    chosen = ms.GRAPH_MODE if mode == "graph" else ms.PYNATIVE_MODE
    try:
        ms.set_context(mode=ms.PYNATIVE_MODE)
        rows = compare_modules(torch_model, ms_model, x, atol, rtol)
        ms.set_context(mode=chosen)
        row, decoded = compare_network_output(
            torch_model, ms_model, x, atol, rtol, f"network output ({mode})"
        )
        rows.append(row)
        rows.append(
            compare_detections(
                decoded, ms_model.num_classes, atol, rtol, f"detections after NMS ({mode})"
            )
        )
        if train_step:
            images = np.concatenate((x, x[..., ::-1]))  # the image and its mirror
            targets, mask = synthetic_targets(len(images), x.shape[-1], ms_model.num_classes)
            rows += compare_train_step(
                torch_model, ms_model, images, targets, mask, atol, rtol, use_l1
            )
    finally:
        ms.set_context(mode=previous)
    return rows


def _json_safe(value: Any) -> Any:
    """inf/nan (a shape mismatch, a non-finite output) become null: strict JSON for CI."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_json_safe(v) for v in value]
    return value


def build_report(rows: list[ModuleDiff], **info: Any) -> dict[str, Any]:
    """The JSON document: settings, overall result, first failure and every row."""
    failed = first_failure(rows)
    return {
        **info,
        "passed": failed is None,
        "first_failure": failed.module if failed else None,
        "rows": [r.as_dict() for r in rows],
    }


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m models.compare",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--model", required=True, help="yolox_nano ... yolox_x")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--src", help="PyTorch YOLOX checkpoint (.pth)")
    source.add_argument(
        "--random-init",
        action="store_true",
        help="no checkpoint: random weights, BatchNorm statistics calibrated",
    )
    parser.add_argument("--image", help="an image file; default: a synthetic picture")
    parser.add_argument("--size", type=int, default=DEFAULT_SIZE, help="input side, px")
    parser.add_argument("--num-classes", type=int, help="default: from the checkpoint (80)")
    parser.add_argument("--atol", type=float, default=1e-4)
    parser.add_argument("--rtol", type=float, default=1e-4)
    parser.add_argument("--mode", choices=("graph", "pynative"), default="graph")
    parser.add_argument("--train-step", action="store_true", help="also compare a training step")
    parser.add_argument("--use-l1", action="store_true", help="train step with the L1 loss on")
    parser.add_argument("--device", default="auto", help="auto | CPU | GPU | Ascend")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", help="write the table as JSON here")
    args = parser.parse_args(argv)
    if args.size % 32:
        parser.error(f"--size must be a multiple of 32, got {args.size}")
    return args


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point; returns the exit status (0 pass, 1 fail, 2 cannot run)."""
    args = parse_args(argv)
    # The CLI is an entry point like train.py: prepare the process before MindSpore loads
    # (on CPU this picks oneDNN's fast convolution kernels).
    from engine.runtime import configure_process_env, resolve_device

    device = resolve_device(args.device)
    configure_process_env(device)
    import mindspore as ms

    ms.set_device(device)
    start = time.time()
    try:
        torch_model, net = build_pair(
            args.model, args.src, args.num_classes, args.size, args.seed
        )
        x = load_input(args.image, args.size)
    except ComparisonSetupError as err:
        print(f"comparison cannot run: {err}", file=sys.stderr)
        return 2
    rows = run_comparison(
        torch_model, net, x, args.mode, args.atol, args.rtol, args.train_step, args.use_l1
    )
    seconds = time.time() - start
    source = args.src or f"random init (seed {args.seed}, calibrated)"
    print(
        f"msdet vs YOLOX (PyTorch): {args.model}, {source}, "
        f"input {args.image or 'synthetic'} {args.size}x{args.size}, device {device}\n"
        f"modules in PyNative mode; whole network, NMS, train step in {args.mode} mode; "
        f"atol {args.atol:g} rtol {args.rtol:g}\n"
    )
    print(format_table(rows))
    failed = first_failure(rows)
    if failed:
        print(f"\nFAIL: first divergence at {failed.module} (max abs {failed.max_abs:.3g})")
    else:
        print(f"\nPASS: all {len(rows)} rows within tolerance ({seconds:.1f} s)")
    if args.json:
        report = build_report(
            rows,
            model=args.model,
            source=source,
            image=args.image,
            size=args.size,
            mode=args.mode,
            device=device,
            atol=args.atol,
            rtol=args.rtol,
            train_step=args.train_step,
            seconds=round(seconds, 2),
        )
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(_json_safe(report), f, indent=2, allow_nan=False)
        print(f"JSON: {args.json}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
