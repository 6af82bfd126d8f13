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
step (see :func:`compare_train_step`): every loss term, the number of foreground anchors,
the loss gradient and each module's parameter gradients, each fed the original's values
as the forward rows are, and whole-step gradient norms per module and per YOLOX optimizer
group (BN weights / conv weights / biases).

Per-module rows (forward and backward) always run in PyNative mode: in graph mode every
one of the ~30 sub-cells would be compiled separately (13.5 s instead of 4.2 s for nano
at 416 px on a 2-core CPU). Rows that run the whole network, NMS and the whole training
step use ``--mode``.

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


def _scalar(t) -> float:
    """A loss term of the original: a tensor, or a plain 0.0 (YOLOX's L1 term when off)."""
    return float(t.detach()) if hasattr(t, "detach") else float(t)


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


def anchor_points(size: int, strides: Sequence[int] = (8, 16, 32)) -> tuple[np.ndarray, np.ndarray]:
    """YOLOX's anchor grid for a square input: xy [A, 2] (x fastest) and strides [A]."""
    grids, out = [], []
    for s in strides:
        n = size // s
        ys, xs = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")
        grids.append(np.stack((xs.ravel(), ys.ravel()), 1))
        out.append(np.full(n * n, s))
    return np.concatenate(grids).astype(np.float32), np.concatenate(out).astype(np.float32)


@dataclass
class TorchStep:
    """What one training step of the original produced."""

    losses: dict[str, float]  # msdet's term names, plus num_fg
    grads: dict[str, np.ndarray]  # by msdet parameter name
    module_io: dict[str, tuple[np.ndarray, np.ndarray]]  # module -> (input, output gradient)
    head_outputs: tuple[np.ndarray, np.ndarray] | None  # raw head outputs and dloss/draw


def torch_train_step(
    torch_model, images, targets, use_l1: bool, capture: Sequence[str] = ()
) -> TorchStep:
    """YOLOX's training forward (``YOLOX.forward(x, targets)``) and ``backward()``.

    For each module in ``capture`` the input it received and the gradient of the loss
    with respect to its output are recorded, and so are the raw head outputs (what
    msdet's loss takes) with their gradient.
    """
    import torch

    from models.convert import mindspore_name

    torch_model.train()
    torch_model.head.use_l1 = use_l1
    torch_model.zero_grad()
    modules = dict(torch_model.named_modules())
    io: dict[str, list] = {}

    def recorder(name: str):
        def hook(module, inputs, output) -> None:
            io[name] = [inputs[0].detach().clone()]
            output.register_hook(lambda g: io[name].append(g.detach().clone()))

        return hook

    decoded: dict[str, Any] = {}
    get_losses = torch_model.head.get_losses

    def keep_outputs(*args, **kwargs):
        # (imgs, x_shifts, y_shifts, expanded_strides, labels, outputs, origin_preds, dtype):
        # the L1 term reaches the raw box outputs through origin_preds (copies per level).
        outputs, origin_preds = args[5], args[6]
        for t in [outputs, *origin_preds]:
            t.retain_grad()
        decoded["outputs"], decoded["origin"] = outputs, list(origin_preds)
        return get_losses(*args, **kwargs)

    hooks = [modules[n].register_forward_hook(recorder(n)) for n in capture]
    if capture:
        torch_model.head.get_losses = keep_outputs
    try:
        dtype = next(torch_model.parameters()).dtype
        x = torch.from_numpy(images).to(dtype)
        out = torch_model(x, torch.from_numpy(targets).to(dtype))
        out["total_loss"].backward()
    finally:
        for h in hooks:
            h.remove()
        torch_model.head.__dict__.pop("get_losses", None)
    losses = {ours: _scalar(out[theirs]) for ours, theirs in LOSS_TERMS}
    num_gts = int((np.abs(targets).sum(-1) > 0).sum())
    losses["num_fg"] = float(round(float(out["num_fg"]) * max(num_gts, 1)))
    grads = {
        mindspore_name(n): (_numpy(p.grad) if p.grad is not None else np.zeros(p.shape))
        for n, p in torch_model.named_parameters()
    }
    torch_model.zero_grad()
    module_io = {n: (_numpy(v[0]), _numpy(v[1])) for n, v in io.items() if len(v) == 2}
    head_outputs = None
    if "outputs" in decoded:
        raw, raw_grad = raw_head_outputs(
            _numpy(decoded["outputs"]), _numpy(decoded["outputs"].grad), images.shape[-1]
        )
        if decoded["origin"]:
            raw_grad[..., :4] += np.concatenate([_numpy(t.grad) for t in decoded["origin"]], 1)
        head_outputs = (raw, raw_grad)
    return TorchStep(losses, grads, module_io, head_outputs)


def raw_head_outputs(decoded: np.ndarray, grad: np.ndarray, size: int):
    """YOLOX's loss sees boxes decoded in pixels; msdet's loss takes the raw outputs.

    Undo the decoding (xy = (raw + grid) * stride, wh = exp(raw) * stride) and carry the
    gradient along the chain rule: (raw [B, A, 5 + C], dloss/draw).
    """
    grids, strides = anchor_points(size)
    s = strides[:, None]
    raw = decoded.copy()
    raw[..., :2] = decoded[..., :2] / s - grids
    raw[..., 2:4] = np.log(decoded[..., 2:4] / s)
    g = grad.copy()
    g[..., :2] = grad[..., :2] * s
    g[..., 2:4] = grad[..., 2:4] * decoded[..., 2:4]
    return raw, g


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


def msdet_train_step(ms_model, loss, images, targets, mask):
    """msdet's ``DetectorWithLoss`` and ``mindspore.value_and_grad`` (current mode).

    Returns (loss terms + num_fg, gradients by parameter name).
    """
    import mindspore as ms

    from models.loss import DetectorWithLoss

    weights = ms.ParameterTuple(ms_model.trainable_params())
    cell = loss_and_grads_cell(DetectorWithLoss(ms_model, loss), weights)
    terms, grads = cell(ms.Tensor(images), ms.Tensor(targets), ms.Tensor(mask))
    names = ("total", "iou", "obj", "cls", "l1", "num_fg")
    losses = {k: float(v.asnumpy()) for k, v in zip(names, terms)}
    return losses, {p.name: g.asnumpy() for p, g in zip(weights, grads)}


def module_param_grads(cell, inp: np.ndarray, out_grad: np.ndarray) -> dict[str, np.ndarray]:
    """Gradients of one module's parameters, given its input and the gradient at its output
    (the vector-Jacobian product the full backward pass computes there)."""
    import mindspore as ms

    weights = ms.ParameterTuple(cell.trainable_params())
    upstream = ms.Tensor(out_grad)

    def weighted_output(x):
        return (cell(x) * upstream).sum()

    grads = ms.grad(weighted_output, None, weights)(ms.Tensor(inp))
    return {p.name: g.asnumpy() for p, g in zip(weights, grads)}


def loss_output_grads(loss, raw: np.ndarray, targets, mask, size: int) -> np.ndarray:
    """dloss/draw of msdet's loss alone, on given raw head outputs."""
    import mindspore as ms

    grids, strides = (ms.Tensor(a) for a in anchor_points(size))
    t, m = ms.Tensor(targets), ms.Tensor(mask)

    def total(r):
        return loss(r, grids, strides, t, m)[0]

    return ms.grad(total)(ms.Tensor(raw)).asnumpy()


def _norm(a) -> float:
    return float(np.sqrt(np.square(np.asarray(a, dtype=np.float64)).sum()))


def grad_diff(module: str, ours: np.ndarray, ref: np.ndarray, grad_rtol: float) -> ModuleDiff:
    """Gradients compared as vectors: max rel is |g - g_orig| / |g_orig| (Euclidean norms);
    element-wise tolerances suit gradients badly (many entries are near 0)."""
    ours = np.asarray(ours, dtype=np.float64).ravel()
    ref = np.asarray(ref, dtype=np.float64).ravel()
    if ours.shape != ref.shape:
        return ModuleDiff(module, (ref.size,), float("inf"), float("inf"), False, "size differs")
    delta = _norm(ours - ref)
    rel = delta / _norm(ref) if _norm(ref) > 0 else delta
    finite = bool(np.isfinite(ours).all())
    max_abs = float(np.abs(ours - ref).max()) if ref.size else 0.0
    return ModuleDiff(module, (ref.size,), max_abs, rel, finite and rel <= grad_rtol)


def _group_norms(grads: dict[str, np.ndarray], group_of) -> dict[str, float]:
    sums: dict[str, float] = {}
    for name, g in grads.items():
        key = group_of(name)
        sums[key] = sums.get(key, 0.0) + _norm(g) ** 2
    return {k: math.sqrt(v) for k, v in sums.items()}


def compare_train_step(
    torch_model,
    ms_model,
    images: np.ndarray,
    targets: np.ndarray,
    mask: np.ndarray,
    atol: float,
    rtol: float,
    grad_rtol: float = 1e-3,
    step_rtol: float = 5e-2,
    use_l1: bool = False,
    mode: str = "graph",
) -> list[ModuleDiff]:
    """One training step of both frameworks on the same batch (targets included).

    Rows: every loss term (whole step in ``mode``, against the original in float64 as the
    whole-network rows); the foreground anchor count (must be equal); the gradient of
    msdet's loss with respect to the raw head outputs, given the original's outputs; per
    module, the gradients of its parameters given the original's input and output gradient
    (PyNative; ``max rel`` is |g - g_orig| / |g_orig|, must be <= ``grad_rtol``) together
    with the whole step's gradient norm of the module (within ``step_rtol``); per YOLOX
    optimizer group, the whole step's gradient norm (within ``step_rtol``).

    The whole-step gradients get the looser ``step_rtol`` because float32 rounding is
    amplified through a training-mode network, and more so in msdet: MindSpore's CPU
    BatchNorm computes batch statistics ~10x less precisely than PyTorch on large feature
    maps with a non-zero mean (the stem sees 0-255 pixels). Leaves MindSpore in PyNative
    mode; :func:`run_comparison` restores the caller's mode.
    """
    import mindspore as ms

    from models.loss import YOLOXLoss

    modules = major_modules(len(ms_model.head.stems))
    ref_targets = targets * mask[..., None]  # YOLOX: an all-zero row is padding
    ref = torch_train_step(torch_model, images, ref_targets, use_l1, capture=modules)
    ref64 = torch_train_step(torch_float64(torch_model), images, ref_targets, use_l1)
    loss = YOLOXLoss(ms_model.num_classes)
    loss.use_l1.set_data(ms.Tensor(1.0 if use_l1 else 0.0, ms.float32))
    ms_model.set_train(True)
    try:
        ms.set_context(mode=ms.GRAPH_MODE if mode == "graph" else ms.PYNATIVE_MODE)
        ours, grads = msdet_train_step(ms_model, loss, images, targets, mask)
        # Isolated checks, each part fed the original's values, like the forward rows.
        ms.set_context(mode=ms.PYNATIVE_MODE)
        cells = dict(ms_model.cells_and_names())
        module_grads = {m: module_param_grads(cells[m], *ref.module_io[m]) for m in ref.module_io}
        raw, raw_grad = ref.head_outputs
        loss_grad = loss_output_grads(loss, raw, targets, mask, images.shape[-1])
    finally:
        ms_model.set_train(False)

    rows = [
        rounding_aware_diff(f"train: loss {t}", ours[t], ref.losses[t], ref64.losses[t], atol, rtol)
        for t, _ in LOSS_TERMS
    ]
    fg = diff("train: foreground anchors", ours["num_fg"], ref.losses["num_fg"], 0.0, 0.0)
    fg.note = (
        f"msdet {ours['num_fg']:.0f}, original {ref.losses['num_fg']:.0f} "
        f"(fp64 {ref64.losses['num_fg']:.0f}); SimOTA must pick the same count"
    )
    rows.append(fg)
    row = grad_diff("train: loss gradient", loss_grad, raw_grad, grad_rtol)
    row.note = "dloss/d(raw head outputs), msdet's loss on the original's outputs"
    rows.append(row)

    unmatched = sorted(set(grads) ^ set(ref.grads))
    if unmatched:
        raise KeyError(f"parameters without a counterpart: {unmatched}")
    step_ours = _group_norms(grads, lambda n: module_of(n, modules))
    step_ref = _group_norms(ref.grads, lambda n: module_of(n, modules))
    for m in modules:
        mine = module_grads.get(m, {})
        names = sorted(mine)
        row = grad_diff(
            f"train: grad {m}",
            np.concatenate([mine[n].ravel() for n in names]) if names else np.zeros(0),
            np.concatenate([ref.grads[n].ravel() for n in names]) if names else np.zeros(0),
            grad_rtol,
        )
        step = abs(step_ours[m] - step_ref[m]) / max(step_ref[m], 1e-30)
        row.passed = row.passed and step <= step_rtol
        row.note = f"step norm {step_ours[m]:.4e} vs {step_ref[m]:.4e} ({step:.1e})"
        rows.append(row)
    group_ours = _group_norms(grads, optimizer_group)
    group_ref = _group_norms(ref.grads, optimizer_group)
    delta = _group_norms({n: grads[n] - ref.grads[n] for n in grads}, optimizer_group)
    for g in OPTIMIZER_GROUPS:
        d = abs(group_ours[g] - group_ref[g])
        rel = d / max(group_ref[g], 1e-30)
        rows.append(
            ModuleDiff(
                f"train: grad group {g}",
                (),
                d,
                rel,
                rel <= step_rtol,
                f"step norm {group_ours[g]:.4e} vs {group_ref[g]:.4e}; "
                f"|g - g_orig|/|g_orig| {delta[g] / max(group_ref[g], 1e-30):.1e}",
            )
        )
    return rows


# --- The command line -------------------------------------------------------------------------


class ComparisonSetupError(RuntimeError):
    """The comparison cannot run (reference missing, bad checkpoint, unreadable image)."""


def build_pair(
    model: str,
    src: str | None,
    num_classes: int | None,
    calibration_images: np.ndarray,
    seed: int = 0,
) -> tuple[Any, Any]:
    """(PyTorch original, msdet network with the converted weights), inference mode.

    ``src`` None: a random-init original whose BatchNorm statistics are calibrated on
    ``calibration_images`` (:func:`models.reference.calibrate`), so that outputs are
    neither degenerate nor overflowing on that input.
    """
    from models.convert import ConversionError, infer_num_classes, load_torch_checkpoint
    from models.reference import ReferenceMissingError, build_torch_yolox, calibrate
    from models.yolox import load_model_config

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
    from models.convert import convert_to_network as convert

    return convert(state_dict, model, num_classes)


def train_batch(x: np.ndarray, num_classes: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The --train-step batch: the input and its mirror image, with synthetic boxes."""
    images = np.ascontiguousarray(np.concatenate((x, x[..., ::-1])))
    targets, mask = synthetic_targets(len(images), x.shape[-1], num_classes)
    return images, targets, mask


def run_comparison(
    torch_model,
    ms_model,
    x: np.ndarray,
    mode: str,
    atol: float,
    rtol: float,
    train_step: bool = False,
    grad_rtol: float = 1e-3,
    step_rtol: float = 5e-2,
    use_l1: bool = False,
) -> list[ModuleDiff]:
    """All rows: modules (PyNative), whole network and NMS (``mode``), optionally the
    training step (:func:`compare_train_step`). Restores MindSpore's mode afterwards."""
    import mindspore as ms

    previous = ms.get_context("mode")
    try:
        ms.set_context(mode=ms.PYNATIVE_MODE)
        rows = compare_modules(torch_model, ms_model, x, atol, rtol)
        ms.set_context(mode=ms.GRAPH_MODE if mode == "graph" else ms.PYNATIVE_MODE)
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
            images, targets, mask = train_batch(x, ms_model.num_classes)
            rows += compare_train_step(
                torch_model,
                ms_model,
                images,
                targets,
                mask,
                atol,
                rtol,
                grad_rtol,
                step_rtol,
                use_l1,
                mode,
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
        help="no checkpoint: random weights, BatchNorm statistics calibrated on the input",
    )
    parser.add_argument("--image", help="an image file; default: a synthetic picture")
    parser.add_argument("--size", type=int, default=DEFAULT_SIZE, help="input side, px")
    parser.add_argument("--num-classes", type=int, help="default: from the checkpoint (80)")
    parser.add_argument("--atol", type=float, default=1e-4)
    parser.add_argument("--rtol", type=float, default=1e-4)
    parser.add_argument("--mode", choices=("graph", "pynative"), default="graph")
    parser.add_argument("--train-step", action="store_true", help="also compare a training step")
    parser.add_argument(
        "--grad-rtol",
        type=float,
        default=1e-3,
        help="train step: |g - g_orig|/|g_orig| of a module fed the original's values",
    )
    parser.add_argument(
        "--step-rtol",
        type=float,
        default=5e-2,
        help="train step: relative difference of whole-step gradient norms",
    )
    parser.add_argument("--use-l1", action="store_true", help="train step with the L1 loss on")
    parser.add_argument("--device", default="auto", help="auto | CPU | GPU | Ascend")
    parser.add_argument("--seed", type=int, default=0, help="random init (--random-init)")
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

    if ms.get_context("device_target") != device:  # a process can set its device only once
        ms.set_device(device)
    start = time.time()
    try:
        x = load_input(args.image, args.size)
        calibration = train_batch(x, 1)[0]
        torch_model, net = build_pair(
            args.model, args.src, args.num_classes, calibration, args.seed
        )
    except ComparisonSetupError as err:
        print(f"comparison cannot run: {err}", file=sys.stderr)
        return 2
    rows = run_comparison(
        torch_model,
        net,
        x,
        args.mode,
        args.atol,
        args.rtol,
        args.train_step,
        args.grad_rtol,
        args.step_rtol,
        args.use_l1,
    )
    seconds = time.time() - start
    source = args.src or f"random init (seed {args.seed}, calibrated)"
    print(
        f"msdet vs YOLOX (PyTorch): {args.model}, {source}, "
        f"input {args.image or 'synthetic'} {args.size}x{args.size}, device {device}\n"
        f"module rows in PyNative mode; whole network, NMS, whole train step in {args.mode} "
        "mode; "
        f"atol {args.atol:g} rtol {args.rtol:g}"
        + (f" grad-rtol {args.grad_rtol:g} step-rtol {args.step_rtol:g}" if args.train_step else "")
        + "\n"
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
            grad_rtol=args.grad_rtol,
            step_rtol=args.step_rtol,
            seconds=round(seconds, 2),
        )
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(_json_safe(report), f, indent=2, allow_nan=False)
        print(f"JSON: {args.json}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
