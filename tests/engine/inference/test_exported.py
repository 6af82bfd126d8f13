"""Exported files as eval.py's and predict.py's network: what they carry, how they run, and
(slow) the same detections as the checkpoint they came from."""

from __future__ import annotations

import json
import logging
import os
import sys

import numpy as np
import pytest
from omegaconf import OmegaConf

from msdet.engine.inference.exported import (
    METADATA_KEY,
    ExportedModel,
    ExportedModelError,
    ExportedNMS,
    exported_nms,
    inference_size,
    read_export_info,
    weights_format,
)
from tests.support.inference import export_info as info
from tests.support.inference import varied_nano, write_model


def test_the_format_is_the_suffix():
    assert weights_format("runs/x/best.ckpt") == "checkpoint"
    assert weights_format("best_yolox_nano_320x320_b1_nms.MINDIR") == "MINDIR"
    assert weights_format("model.onnx") == "ONNX"
    assert weights_format("weights.pth") == "checkpoint"  # read as one; its error says more


def test_the_description_travels_inside_the_file(tmp_path):
    path = tmp_path / "model.onnx"
    write_model(path, {METADATA_KEY: info().to_json()}, dims=(2, 3))
    assert read_export_info(str(path)) == info()
    bare = tmp_path / "bare.onnx"
    write_model(bare)
    with pytest.raises(ExportedModelError, match="no msdet description.*export the checkpoint"):
        read_export_info(str(bare))
    wrong = tmp_path / "model.mindir"
    wrong.write_bytes(path.read_bytes())
    with pytest.raises(ExportedModelError, match="holds a ONNX model, its suffix says MINDIR"):
        read_export_info(str(wrong))
    with pytest.raises(ExportedModelError, match="exported model not found"):
        read_export_info(str(tmp_path / "gone.onnx"))


def test_a_smaller_batch_is_padded_to_the_files_and_cut_back(tmp_path):
    path = tmp_path / "model.onnx"
    write_model(path, {METADATA_KEY: info().to_json()}, dims=(2, 3))
    model = ExportedModel(str(path))
    out = model.run(np.array([[-1.0, 0.5, 2.0]], np.float32))
    assert [o.shape for o in out] == [(1, 3), (1, 3)]
    np.testing.assert_array_equal(out[0], [[0.0, 0.5, 2.0]])
    with pytest.raises(ExportedModelError, match=r"takes input \[2, 3\], got \[3, 3\]"):
        model.run(np.zeros((3, 3), np.float32))


def test_without_onnxruntime_onnx_files_and_exports_say_what_to_install(tmp_path, monkeypatch):
    from msdet.common.config import load_config
    from msdet.engine.inference.export import ExportError, export_checkpoint

    path = tmp_path / "model.onnx"
    write_model(path, {METADATA_KEY: info().to_json()}, dims=(2, 3))
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # import onnxruntime: ImportError
    with pytest.raises(ExportedModelError) as err:
        ExportedModel(str(path))
    assert f"{path}: running an ONNX model needs onnxruntime" in str(err.value)
    assert "pip install onnxruntime" in str(err.value)
    # An ONNX export is refused before it is made, not left unchecked.
    overrides = [f"ckpt={tmp_path}/nano.ckpt", "export.format=onnx", "export.val=false"]
    cfg = load_config("export", overrides)
    with pytest.raises(ExportError) as err:
        export_checkpoint(cfg, dict(o.split("=", 1) for o in overrides), str(tmp_path / "run"))
    assert "export.format=ONNX (the written file is checked by running it) needs onnxruntime" in (
        str(err.value)
    )
    assert "pip install onnxruntime" in str(err.value)
    assert sorted(os.listdir(tmp_path)) == ["model.onnx"]


def test_nms_inside_the_file_keeps_its_detections_over_the_threshold():
    dets = np.zeros((2, 4, 6), np.float32)
    dets[0, :3, 4] = [0.9, 0.3, 0.2]
    dets[0, :3, 0] = [1, 2, 3]
    dets[1, :2, 4] = [0.26, 0.24]
    counts = np.array([3, 2], np.int32)
    out, kept = ExportedNMS(0.25)((dets, counts))
    assert kept.tolist() == [2, 1] and kept.dtype == np.int32
    np.testing.assert_array_equal(out[0, :2, 4], np.float32([0.9, 0.3]))
    np.testing.assert_array_equal(out[0, :2, 0], [1, 2])
    assert (out[0, 2:] == 0).all() and out[1, 0, 4] == np.float32(0.26)


def test_run_time_nms_settings_cannot_change_the_files_and_say_so(caplog):
    eval_cfg = OmegaConf.create({"conf_thresh": 0.01})
    with caplog.at_level(logging.WARNING):
        nms = exported_nms(info(), "m.onnx", eval_cfg, {"eval.nms_iou": "0.5"}, 0.001)
    assert nms.conf_thresh == 0.01  # the file dropped everything under its own 0.01
    text = caplog.text
    assert "eval.nms_iou=0.5 cannot change it" in text and "export.with_nms=false" in text
    assert "keeps none below it" in text
    assert exported_nms(info(with_nms=False), "m.onnx", eval_cfg, {}, None) is None


def test_the_input_size_is_the_files():
    """An exported file runs at its own input: a typed eval.img_size may repeat it, not
    change it; the config is left as loaded."""
    cfg = OmegaConf.create({"eval": {"img_size": [640, 640], "batch_size": 8}})
    fixed = info(input_shape=[1, 3, 320, 416]).img_size
    assert inference_size(cfg, {}, fixed=fixed, path="m.onnx") == (320, 416)
    assert list(cfg.eval.img_size) == [640, 640] and cfg.eval.batch_size == 8
    with pytest.raises(ExportedModelError, match="m.onnx takes 320x416 images only"):
        inference_size(cfg, {"eval.img_size": "640"}, fixed=fixed, path="m.onnx")
    cfg.eval.img_size = [320, 416]
    typed = {"eval.img_size": "[320,416]"}
    assert inference_size(cfg, typed, fixed=fixed, path="m.onnx") == (320, 416)
    # A described size cannot move a file's input either.
    assert inference_size(cfg, {}, described=[64, 64], fixed=fixed) == (320, 416)


def test_a_checkpoint_runs_at_its_described_size_unless_one_is_typed():
    cfg = OmegaConf.create({"eval": {"img_size": [320, 320]}})
    assert inference_size(cfg, {}, described=[256, 288], path="best.ckpt") == (256, 288)
    assert inference_size(cfg, {"eval.img_size": "320"}, described=[256, 288]) == (320, 320)
    assert inference_size(cfg, {"data.img_size": "416"}, described=[256, 288]) == (256, 288)
    assert inference_size(cfg, {}, described=None) == (320, 320)  # not described: the config's
    assert list(cfg.eval.img_size) == [320, 320]
    with pytest.raises(ValueError, match="best.ckpt: its described input size must be a size"):
        inference_size(cfg, {}, described=[100, 100], path="best.ckpt")


@pytest.fixture(scope="module")
def exports(tmp_path_factory):
    """:func:`varied_nano` exported three ways, beside it."""
    from msdet.common.config import load_config
    from msdet.engine.inference.export import export_checkpoint

    folder = tmp_path_factory.mktemp("exported")
    ckpt = folder / "nano.ckpt"
    varied_nano(ckpt)
    reports = {}
    for fmt, nms in (("MINDIR", "true"), ("ONNX", "true"), ("ONNX", "false")):
        overrides = [
            f"ckpt={ckpt}",
            f"export.format={fmt}",
            f"export.with_nms={nms}",
            "export.val=false",
            "runtime.cpu_kernels=native",
        ]
        cfg = load_config("export", overrides)
        typed = dict(o.split("=", 1) for o in overrides)
        reports[fmt, nms] = export_checkpoint(cfg, typed, str(folder / "run"))
    return ckpt, reports


@pytest.mark.slow
def test_exported_files_detect_what_their_checkpoint_detects(exports, tmp_path):
    import onnxruntime

    from msdet.common.config import load_config
    from msdet.data.synthetic import categories_for, render_image
    from msdet.engine.inference.predictor import Predictor

    ckpt, reports = exports
    names = ["disc", "rectangle", "triangle"]
    expected_outputs = {"true": ["detections", "num_detections"], "false": ["predictions"]}
    for (fmt, nms), report in reports.items():
        assert report["file"].startswith(str(ckpt.parent))  # beside the checkpoint
        assert report["file"].endswith(
            f"nano_yolox_nano_64x64_b1{'_nms' * (nms == 'true')}.{fmt.lower()}"
        )
        with open(report["file"] + ".json", encoding="utf-8") as f:
            assert json.load(f)["outputs"] == report["outputs"]
        if fmt == "ONNX":
            session = onnxruntime.InferenceSession(report["file"])
            assert [o.name for o in session.get_outputs()] == expected_outputs[nms]

    def predictor(path):
        cfg = load_config("predict", [f"ckpt={path}", "runtime.device=CPU"])
        return Predictor(cfg, None, typed={"ckpt": str(path)})

    rng = np.random.default_rng(3)
    images = [render_image(rng, categories_for(None), 8)[0] for _ in range(3)]
    reference = predictor(ckpt)
    want = [reference.predict(img) for img in images]
    assert sum(len(d) for d in want) >= 10, "the comparison needs detections"
    assert len(np.unique(np.concatenate([d.scores for d in want]))) >= 10  # no tied scores
    for key, report in reports.items():
        exported = predictor(report["file"])
        assert exported.img_size == reference.img_size == (64, 64)
        assert exported.class_names == reference.class_names == names
        for img, expected in zip(images, want):
            got = exported.predict(img)
            assert got.names == expected.names == names
            assert got.label_names == expected.label_names, key
            np.testing.assert_array_equal(got.labels, expected.labels)
            # The same network: MINDIR bit-equal; onnxruntime's kernels round differently.
            np.testing.assert_allclose(
                got.boxes, expected.boxes, rtol=0, atol=1e-3, err_msg=str(key)
            )
            np.testing.assert_allclose(
                got.scores, expected.scores, rtol=0, atol=1e-5, err_msg=str(key)
            )
