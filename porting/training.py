"""Training-step rows: loss terms, foreground count, the loss gradient, per-module
parameter gradients fed the original's values, and whole-step gradient norms per module
and per YOLOX optimizer group."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from msdet.porting.forward import network_modules, to_numpy, torch_float64
from msdet.porting.inputs import anchor_points
from msdet.porting.report import ModuleDiff, diff, grad_diff, norm, rounding_aware_diff

OPTIMIZER_GROUPS = ("BN weights", "conv weights", "biases")  # YOLOX's pg0, pg1, pg2
LOSS_TERMS = (("total", "total_loss"), ("iou", "iou_loss"), ("obj", "conf_loss"))
LOSS_TERMS += (("cls", "cls_loss"), ("l1", "l1_loss"))


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


@dataclass
class TorchStep:
    """What one training step of the original produced."""

    losses: dict[str, float]  # msdet's term names, plus num_fg
    grads: dict[str, np.ndarray]  # by msdet parameter name
    module_io: dict[str, tuple[np.ndarray, np.ndarray]]  # module -> (input, output gradient)
    head_outputs: tuple[np.ndarray, np.ndarray] | None  # raw head outputs and dloss/draw


def to_float(t) -> float:
    """A loss term of the original: a tensor, or a plain 0.0 (YOLOX's L1 term when off)."""
    return float(t.detach()) if hasattr(t, "detach") else float(t)


def torch_train_step(
    torch_model, images, targets, use_l1: bool, capture: Sequence[str] = ()
) -> TorchStep:
    """YOLOX's training forward (``YOLOX.forward(x, targets)``) and ``backward()``.

    For each module in ``capture`` the input it received and the gradient of the loss
    with respect to its output are recorded, and so are the raw head outputs (what
    msdet's loss takes) with their gradient.
    """
    import torch

    from msdet.models.convert_pytorch import mindspore_name

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
    losses = {ours: to_float(out[theirs]) for ours, theirs in LOSS_TERMS}
    num_gts = int((np.abs(targets).sum(-1) > 0).sum())
    losses["num_fg"] = float(round(float(out["num_fg"]) * max(num_gts, 1)))
    grads = {
        mindspore_name(n): (to_numpy(p.grad) if p.grad is not None else np.zeros(p.shape))
        for n, p in torch_model.named_parameters()
    }
    torch_model.zero_grad()
    module_io = {n: (to_numpy(v[0]), to_numpy(v[1])) for n, v in io.items() if len(v) == 2}
    head_outputs = None
    if "outputs" in decoded:
        raw, raw_grad = raw_head_outputs(
            to_numpy(decoded["outputs"]), to_numpy(decoded["outputs"].grad), images.shape[-1]
        )
        if decoded["origin"]:
            raw_grad[..., :4] += np.concatenate([to_numpy(t.grad) for t in decoded["origin"]], 1)
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

    from msdet.models.loss import DetectorWithLoss

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


def _group_norms(grads: dict[str, np.ndarray], group_of) -> dict[str, float]:
    sums: dict[str, float] = {}
    for name, g in grads.items():
        key = group_of(name)
        sums[key] = sums.get(key, 0.0) + norm(g) ** 2
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

    from msdet.models.loss import YOLOXLoss

    modules = network_modules(ms_model)
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
