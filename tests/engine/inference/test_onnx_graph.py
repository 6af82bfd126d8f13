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
from tests.support.inference import MINDSPORE_NAMES, write_model


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
