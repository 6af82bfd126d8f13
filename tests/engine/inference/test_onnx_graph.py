"""ONNX output names and metadata, edited without the onnx package, checked by onnxruntime.

The model is written byte by byte (ONNX's protobuf field numbers) so that the test needs
neither MindSpore nor the onnx package, and names its outputs as MindSpore's exporter does.
"""

from __future__ import annotations

import numpy as np
import pytest

from msdet.engine.inference.onnx_graph import (
    OnnxEditError,
    label_onnx_model,
    onnx_output_names,
    read_model_metadata,
)

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


def test_outputs_renamed_and_metadata_stored_the_graph_unchanged(tmp_path):
    ort = pytest.importorskip("onnxruntime")
    path = tmp_path / "model.onnx"
    write_model(path, {"author": "someone"})
    x = np.array([[-1.0, 0.5, 2.0]], np.float32)
    before = ort.InferenceSession(str(path)).run(None, {"images": x})
    assert onnx_output_names(str(path)) == MINDSPORE_NAMES

    label_onnx_model(str(path), ["detections", "num_detections"], {"msdet_export": '{"a": 1}'})

    session = ort.InferenceSession(str(path))
    assert [o.name for o in session.get_outputs()] == ["detections", "num_detections"]
    after = session.run(None, {"images": x})
    for a, b in zip(before, after):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(after[1], [[-0.0, -0.5, -2.0]])  # Neg still reads Relu's
    metadata = session.get_modelmeta().custom_metadata_map
    assert metadata == {"author": "someone", "msdet_export": '{"a": 1}'}
    assert read_model_metadata(str(path)) == metadata
    assert session.get_modelmeta().producer_name == "MindSpore"  # untouched fields kept


def test_a_wrong_name_count_a_clash_or_a_non_model_is_named(tmp_path):
    path = tmp_path / "model.onnx"
    write_model(path)
    with pytest.raises(OnnxEditError, match="has 2 outputs"):
        label_onnx_model(str(path), ["predictions"])
    with pytest.raises(OnnxEditError, match=r"already uses the names \['images'\]"):
        label_onnx_model(str(path), ["images", "b"])
    assert onnx_output_names(str(path)) == MINDSPORE_NAMES  # a refused edit leaves the file
    (tmp_path / "notes.onnx").write_text("not a model at all")
    with pytest.raises(OnnxEditError, match="notes.onnx is not an ONNX"):
        label_onnx_model(str(tmp_path / "notes.onnx"), ["a"])
