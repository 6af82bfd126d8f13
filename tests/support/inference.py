"""Models for the inference tests: an ONNX file written byte by byte (ONNX's protobuf field
numbers, no onnx package), its outputs named as MindSpore's exporter names them, and a
described nano checkpoint whose scores vary from anchor to anchor."""

from __future__ import annotations

from typing import Any

import numpy as np


def write_model(path, metadata: dict[str, str] | None = None, dims=(1, 3)) -> None:
    """images -> Relu -> "592" (an output, also read by the next node) -> Neg -> "595-...",
    every tensor float32 of shape ``dims``."""
    relu = _bytes(1, "images") + _bytes(2, MINDSPORE_NAMES[0]) + _bytes(4, "Relu")
    neg = _bytes(1, MINDSPORE_NAMES[0]) + _bytes(2, MINDSPORE_NAMES[1]) + _bytes(4, "Neg")
    graph = (
        _bytes(1, relu)
        + _bytes(1, neg)
        + _bytes(2, "g")
        + _bytes(11, _float_tensor("images", list(dims)))
        + b"".join(_bytes(12, _float_tensor(n, list(dims))) for n in MINDSPORE_NAMES)
    )
    model = _int(1, 8) + _bytes(2, "MindSpore") + _bytes(7, graph)
    model += _bytes(8, _bytes(1, "") + _int(2, 13))  # opset_import: default domain, 13
    for key, value in (metadata or {}).items():
        model += _bytes(14, _bytes(1, key) + _bytes(2, value))
    path.write_bytes(model)


def varied_nano(path, size: int = 64, names=("disc", "rectangle", "triangle")) -> None:
    """A described 3-class nano (classes ``names``) whose scores vary from anchor to anchor as a trained one's
    do: He-normal convolutions (the stem scaled for 0-255 input), spread head biases. (A
    random init scores every anchor of a level alike: their order after NMS is arbitrary.)"""
    import mindspore as ms

    from msdet.models.description import DESCRIPTION_KEY, describe
    from msdet.models.yolox import build_model, load_model_config

    cfg = load_model_config("yolox_nano")
    net = build_model(cfg, 3)
    rng = np.random.default_rng(0)
    for name, param in net.parameters_and_names():
        value = None
        if param.ndim == 4:
            value = rng.normal(0, np.sqrt(2.0 / np.prod(param.shape[1:])), param.shape)
            value /= 128 if name.startswith("backbone.backbone.stem") else 1
        elif (".cls_preds." in name or ".obj_preds." in name) and name.endswith(".bias"):
            value = rng.normal(-0.5, 1.0, param.shape)
        if value is not None:
            param.set_data(ms.Tensor(value.astype(np.float32)))
    description = describe(cfg, 3, list(names), [1, 3, 7], [size, size], "train")
    ms.save_checkpoint(net, str(path), append_dict={DESCRIPTION_KEY: description.to_json()})


MINDSPORE_NAMES = ["592", "595-Default/detector-YOLOX/backbone-YOLOPAFPN/Cast-op2"]


def _varint(n: int) -> bytes:
    out = b""
    while True:
        byte, n = n & 0x7F, n >> 7
        out += bytes([byte | (0x80 if n else 0)])
        if not n:
            return out


def _bytes(field: int, payload: bytes | str) -> bytes:
    payload = payload.encode() if isinstance(payload, str) else payload
    return _varint(field << 3 | 2) + _varint(len(payload)) + payload


def _int(field: int, value: int) -> bytes:
    return _varint(field << 3) + _varint(value)


def _float_tensor(name: str, dims: list[int]) -> bytes:
    """ValueInfoProto: name, TypeProto.tensor_type (elem_type FLOAT, shape)."""
    shape = b"".join(_bytes(1, _int(1, d)) for d in dims)
    return _bytes(1, name) + _bytes(2, _bytes(1, _int(1, 1) + _bytes(2, shape)))


def export_info(**changes) -> Any:
    """An ONNX export's description (ExportInfo) of a 3-class nano with NMS inside, with
    ``changes``."""
    from msdet.engine.inference.exported import OUTPUTS_WITH_NMS, ExportInfo

    fields = {
        "format": "ONNX",
        "model": "yolox_nano",
        "num_classes": 3,
        "class_names": ["disc", "rectangle", "triangle"],
        "category_ids": [1, 3, 7],
        "input_shape": [2, 3],
        "with_nms": True,
        "nms": {"conf_thresh": 0.01, "nms_iou": 0.65, "pre_nms_topk": 1000, "max_det": 100,
                "class_agnostic": False},
        "outputs": dict(OUTPUTS_WITH_NMS),
        "checkpoint": "best.ckpt",
        "ema_weights": True,
    }  # fmt: skip
    return ExportInfo(**{**fields, **changes})
