"""The PyTorch original (YOLOX 0.3.0, Megvii) as a reference for parity tests and tools.

Needs ``torch`` and ``yolox`` (``pip install torch==2.13.0`` then
``MAX_JOBS=1 pip install --no-deps --no-build-isolation yolox==0.3.0 && pip install loguru thop tabulate tqdm``).
YOLOX imports torchvision only for ``nms``/``batched_nms``; PyPI's torchvision does not
import beside CPU torch, so :func:`install_torchvision_standin` provides those two
functions (a plain greedy NMS) before YOLOX is imported.
"""

from __future__ import annotations

import sys
import types
from typing import Any

INSTALL_HINT = (
    "pip install torch==2.13.0 && MAX_JOBS=1 pip install --no-deps --no-build-isolation "
    "yolox==0.3.0 && pip install loguru thop tabulate tqdm"
)


class ReferenceMissingError(ImportError):
    """torch or yolox is not installed."""


def _greedy_nms(boxes, scores, iou_threshold: float):
    """torchvision.ops.nms: kept indices in decreasing score order (ties: input order);
    a box is suppressed when its IoU with a kept box is > ``iou_threshold``."""
    import torch

    order = torch.argsort(scores, descending=True, stable=True)
    keep = []
    x1, y1, x2, y2 = boxes.unbind(1)
    areas = (x2 - x1) * (y2 - y1)
    suppressed = torch.zeros(len(boxes), dtype=torch.bool)
    for i in order.tolist():
        if suppressed[i]:
            continue
        keep.append(i)
        w = (torch.minimum(x2[i], x2) - torch.maximum(x1[i], x1)).clamp(min=0)
        h = (torch.minimum(y2[i], y2) - torch.maximum(y1[i], y1)).clamp(min=0)
        inter = w * h
        iou = inter / (areas[i] + areas - inter)
        suppressed |= iou > iou_threshold
    return torch.tensor(keep, dtype=torch.int64)


def _batched_nms(boxes, scores, idxs, iou_threshold: float):
    """torchvision.ops.batched_nms: NMS within each class (``idxs``), kept indices in
    decreasing score order."""
    # torchvision's trick: offset boxes per class so different classes never overlap.
    if boxes.numel() == 0:
        import torch

        return torch.empty((0,), dtype=torch.int64)
    offsets = idxs.to(boxes) * (boxes.max() + 1)
    return _greedy_nms(boxes + offsets[:, None], scores, iou_threshold)


def install_torchvision_standin() -> bool:
    """Register a minimal ``torchvision`` (``torchvision.ops.nms``, ``batched_nms``) unless a
    real one imports.

    Returns True when ``torchvision.ops`` is the stand-in. A torchvision that is installed but
    fails to import (PyPI's CUDA build beside CPU torch: "operator torchvision::nms does
    not exist") counts as missing.
    """
    current = sys.modules.get("torchvision.ops")
    if current is not None and getattr(current, "nms", None) is not None:
        return getattr(current, "STANDIN", False)
    try:
        import torchvision.ops  # noqa: F401

        return False
    except Exception:  # ImportError, or the RuntimeError of a mismatched build
        for name in [m for m in sys.modules if m == "torchvision" or m.startswith("torchvision.")]:
            del sys.modules[name]
    tv = types.ModuleType("torchvision")
    tv_ops = types.ModuleType("torchvision.ops")
    tv_ops.nms = _greedy_nms
    tv_ops.batched_nms = _batched_nms
    tv_ops.STANDIN = True
    tv.ops = tv_ops
    sys.modules["torchvision"] = tv
    sys.modules["torchvision.ops"] = tv_ops
    return True


def import_yolox() -> Any:
    """Import the ``yolox`` package (with the torchvision stand-in) or raise with the fix."""
    try:
        import torch  # noqa: F401
    except ImportError as err:
        raise ReferenceMissingError(f"torch is not installed: {INSTALL_HINT}") from err
    install_torchvision_standin()
    try:
        import yolox.models
        import yolox.utils  # noqa: F401
    except ImportError as err:
        raise ReferenceMissingError(f"yolox is not importable ({err}): {INSTALL_HINT}") from err
    return yolox


def build_torch_yolox(model_cfg: Any, num_classes: int, seed: int = 0):
    """The PyTorch YOLOX for a msdet ``model`` config, initialised as YOLOX's Exp does.

    CSPDarknet/PAFPN configs build what ``yolox_base.py`` builds; darknet53/yolofpn what
    ``exp/default/yolov3.py`` builds, whose backbone and neck are always LeakyReLU.
    """
    import_yolox()
    import torch
    from torch import nn
    from yolox.models import YOLOFPN, YOLOPAFPN, YOLOX, YOLOXHead

    from msdet.models.yolox import architecture

    arch = architecture(model_cfg)
    torch.manual_seed(seed)
    if arch["backbone"] == "darknet53":
        if arch["act"] != "lrelu":
            raise ValueError(f"the original's Darknet53 is LeakyReLU only, got act={arch['act']}")
        backbone = YOLOFPN(depth=53)
    else:
        backbone = YOLOPAFPN(
            arch["depth"],
            arch["width"],
            in_channels=arch["in_channels"],
            act=arch["act"],
            depthwise=arch["depthwise"],
        )
    head = YOLOXHead(
        num_classes,
        arch["width"],
        in_channels=arch["in_channels"],
        act=arch["act"],
        depthwise=arch["depthwise"],
    )
    model = YOLOX(backbone, head)
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.eps, m.momentum = 1e-3, 0.03
    model.head.initialize_biases(float(model_cfg.prior_prob))
    return model


def calibrate(model, img_size: int = 320, num_images: int = 4, seed: int = 0, images=None):
    """Make a random-init model's outputs non-degenerate, in place.

    Random-init YOLOX predicts the prior (0.01) for every class and anchor, and its default
    BatchNorm statistics (mean 0, var 1) let activations explode. Each BatchNorm's running
    statistics are set, in execution order, to those of its input on a batch of random
    images as the already calibrated layers before it produce them in eval mode; then the
    objectness and class biases are spread (N(-2, 1.5) per channel) so scores differ.
    ``images`` (``[N, 3, H, W]`` float32, 0-255) calibrates on those instead: a network
    calibrated on noise can overflow (exp of box sizes) on a real picture.
    """
    import torch

    gen = torch.Generator().manual_seed(seed)
    if images is None:
        images = torch.rand(num_images, 3, img_size, img_size, generator=gen) * 255
    else:
        images = torch.as_tensor(images, dtype=torch.float32)

    def set_stats(bn, inputs):
        x = inputs[0]
        bn.running_mean.copy_(x.mean(dim=(0, 2, 3)))
        bn.running_var.copy_(x.var(dim=(0, 2, 3)))

    model.eval()
    with torch.no_grad():
        hooks = [
            m.register_forward_pre_hook(set_stats)
            for m in model.modules()
            if isinstance(m, torch.nn.BatchNorm2d)
        ]
        try:
            model(images)
        finally:
            for h in hooks:
                h.remove()
        for conv in list(model.head.cls_preds) + list(model.head.obj_preds):
            conv.bias.copy_(torch.randn(conv.bias.shape, generator=gen) * 1.5 - 2.0)
    return model


def yolox_optimizer(model, lr: float = 0.01):
    """SGD with YOLOX's three parameter groups (BN weights, other weights with decay, biases)."""
    import torch
    from torch import nn

    pg0, pg1, pg2 = [], [], []
    for k, v in model.named_modules():
        if hasattr(v, "bias") and isinstance(v.bias, nn.Parameter):
            pg2.append(v.bias)
        if isinstance(v, nn.BatchNorm2d) or "bn" in k:
            pg0.append(v.weight)
        elif hasattr(v, "weight") and isinstance(v.weight, nn.Parameter):
            pg1.append(v.weight)
    opt = torch.optim.SGD(pg0, lr=lr, momentum=0.9, nesterov=True)
    opt.add_param_group({"params": pg1, "weight_decay": 5e-4})
    opt.add_param_group({"params": pg2})
    return opt
