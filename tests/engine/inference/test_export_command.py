"""export.py end to end: a checkpoint in, a verified file and its report out beside it, the
file scored on a val split beside the checkpoint, and eval.py and predict.py running it."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import cv2
import mindspore as ms
import numpy as np
import pytest

from msdet.common.config import load_config
from msdet.data.synthetic import categories_for, render_image
from msdet.engine.inference.export_check import compare_on_val
from msdet.models.weights import load_described_detector
from msdet.models.yolox import build_model, load_model_config
from tests.support import ROOT
from tests.support.inference import varied_nano
from tests.support.tiny_run import run_entry


def run_export(*overrides: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "export.py", *overrides],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.slow
def test_export_writes_a_verified_mindir_with_nms_beside_the_checkpoint(tmp_path):
    ckpt = str(tmp_path / "nano.ckpt")
    ms.save_checkpoint(build_model(load_model_config("yolox_nano"), 3), ckpt)
    run_dir = tmp_path / "run"
    # A random-init model scores ~1e-4 everywhere: threshold 0 keeps candidates, so the
    # file's detections are compared with the network's, not two empty outputs.
    proc = run_export(
        f"ckpt={ckpt}",
        "eval.img_size=128",
        "eval.max_det=20",
        "eval.conf_thresh=0.0",
        "export.val=false",
        f"run.dir={run_dir}",
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    model = tmp_path / "nano_yolox_nano_128x128_b1_nms.mindir"
    report = json.loads((tmp_path / (model.name + ".json")).read_text())
    assert report["file"] == str(model)
    assert os.path.getsize(report["file"]) > 1_000_000  # the weights are in the file
    assert report["num_classes"] == 3  # model.num_classes is null: taken from the checkpoint
    assert report["input_shape"] == [1, 3, 128, 128]
    assert report["output_shapes"] == [[1, 20, 6], [1]]
    assert list(report["outputs"]) == ["detections", "num_detections"]
    assert report["max_abs_diff"] <= 1e-5  # the same kernels run the file: 0 measured
    assert report["example_detections"] == 20  # max_det boxes for the one image
    assert "val" not in report
    assert not list(run_dir.glob("*.mindir"))  # the run folder keeps the log only


@pytest.mark.slow
def test_an_onnx_export_prints_msdets_lines_only(tmp_path):
    ckpt = str(tmp_path / "nano.ckpt")
    ms.save_checkpoint(build_model(load_model_config("yolox_nano"), 3), ckpt)
    proc = run_export(
        f"ckpt={ckpt}",
        "export.format=ONNX",
        "eval.img_size=64",
        "export.val=false",
        f"run.dir={tmp_path / 'run'}",
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    lines = (proc.stdout + proc.stderr).splitlines()
    assert any(line.startswith("exported ") and ".onnx (ONNX" in line for line in lines)
    # No MindSpore logger line ("[WARNING] ME(pid,...)"; MindSpore's note on its ONNX
    # exporter went there), none wider than a console.
    assert [line for line in lines if "[WARNING]" in line or " ME(" in line] == []
    assert max(len(line) for line in lines) <= 160


def own_predictions_as_truth(folder, records: dict, min_score: float) -> None:
    """A COCO val split of the images predict.py saw, its ground truth the detections
    scoring >= ``min_score``: a val set the model scores well on, whatever its training."""
    images, annotations = [], []
    for i, (name, dets) in enumerate(sorted(records.items()), 1):
        h, w = cv2.imread(str(folder / "images" / name)).shape[:2]
        images.append({"id": i, "file_name": name, "height": h, "width": w})
        for det in dets:
            if det["score"] >= min_score:
                x, y, bw, bh = det["bbox"]
                annotations.append(
                    {"id": len(annotations) + 1, "image_id": i, "category_id": det["category_id"],
                     "bbox": [x, y, bw, bh], "area": bw * bh, "iscrowd": 0}
                )  # fmt: skip
    categories = [{"id": c, "name": n} for c, n in ((1, "disc"), (3, "rectangle"), (7, "triangle"))]
    (folder / "annotations").mkdir()
    (folder / "annotations" / "val.json").write_text(
        json.dumps({"images": images, "annotations": annotations, "categories": categories})
    )
    assert len(annotations) >= 10, "the val split needs boxes"


@pytest.mark.slow
def test_the_export_is_scored_beside_its_checkpoint_and_runs_in_eval_and_predict(tmp_path):
    ckpt = tmp_path / "nano.ckpt"
    varied_nano(ckpt)
    data = tmp_path / "data"
    rng = np.random.default_rng(5)
    for k in range(6):
        (data / "images").mkdir(parents=True, exist_ok=True)
        cv2.imwrite(
            str(data / "images" / f"{k}.jpg"), render_image(rng, categories_for(None), 8)[0]
        )
    reference = run_entry(
        "predict.py", tmp_path / "pred_ckpt", tmp_path, f"ckpt={ckpt}",
        f"source={data / 'images'}", "predict.conf=0.3", "runtime=cpu", tiny=False,
    )  # fmt: skip
    assert reference.returncode == 0, reference.stderr[-3000:]
    predictions = json.loads((tmp_path / "pred_ckpt" / "predictions.json").read_text())
    own_predictions_as_truth(data, predictions, 0.45)
    dataset = [
        "data=coco", f"data.root={data}", "data.val.ann_file=annotations/val.json",
        "data.val.img_dir=images", "runtime=cpu",
    ]  # fmt: skip

    proc = run_entry("export.py", tmp_path / "run", tmp_path, f"ckpt={ckpt}", *dataset, tiny=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    model = tmp_path / "nano_yolox_nano_64x64_b1_nms.mindir"
    report = json.loads((tmp_path / (model.name + ".json")).read_text())
    val = report["val"]
    assert val["images"] == 6 and val["agrees"] is True
    assert val["checkpoint"]["mAP"] > 0.3  # a comparison of real detections
    assert val["exported"] == pytest.approx(val["checkpoint"], abs=1e-4)
    console = " ".join((proc.stderr + proc.stdout).split())  # wrapped at 160 characters
    assert " ".join(val["verdict"].split()) in console

    evaluated = run_entry(
        "eval.py", tmp_path / "eval", tmp_path, f"ckpt={model}", *dataset, tiny=False
    )
    assert evaluated.returncode == 0, evaluated.stderr[-3000:]
    metrics = json.loads((tmp_path / "eval" / "metrics.json").read_text())
    assert metrics["mAP"] == pytest.approx(val["checkpoint"]["mAP"], abs=1e-4)
    assert metrics["mAP50"] == pytest.approx(val["checkpoint"]["mAP50"], abs=1e-4)

    predicted = run_entry(
        "predict.py", tmp_path / "pred_mindir", tmp_path, f"ckpt={model}",
        f"source={data / 'images'}", "predict.conf=0.3", "runtime=cpu", tiny=False,
    )  # fmt: skip
    assert predicted.returncode == 0, predicted.stderr[-3000:]
    got = json.loads((tmp_path / "pred_mindir" / "predictions.json").read_text())
    assert got == predictions  # MINDIR runs MindSpore's own kernels: the same numbers

    # A file that computes something else than its checkpoint is caught: here the
    # checkpoint's boxes are shifted by one stride instead.
    cfg = load_config("export", [f"ckpt={ckpt}", *dataset])
    detector, _, _ = load_described_detector(str(ckpt), cfg.model, {})
    for level in range(3):
        bias = detector.head.reg_preds[level].bias
        bias.set_data(ms.Tensor(bias.asnumpy() + np.float32([1.0, 1.0, 0.0, 0.0])))
    other = compare_on_val(cfg, detector, str(model), {}, None, str(tmp_path / "other"))
    assert other["agrees"] is False and "computes something else" in other["verdict"], other


@pytest.mark.slow
def test_export_without_a_checkpoint_says_how_to_call_it(tmp_path):
    proc = run_export(f"run.dir={tmp_path}")
    assert proc.returncode != 0
    assert "ckpt=PATH" in proc.stderr + proc.stdout


def test_export_out_naming_a_file_says_it_must_be_a_folder(tmp_path):
    """Issue: export.out naming an existing file ended in "[Errno 17] File exists"."""
    from omegaconf import OmegaConf

    from msdet.engine.inference.export import ExportFolderError, export_folder

    (tmp_path / "model.mindir").write_bytes(b"")
    cfg = OmegaConf.create({"ckpt": str(tmp_path / "best.ckpt"), "export": {"out": None}})
    assert export_folder(cfg) == str(tmp_path)
    cfg.export.out = str(tmp_path / "model.mindir")
    with pytest.raises(
        ExportFolderError, match=r"export.out=.*model.mindir is a file: export.out names the folder"
    ):
        export_folder(cfg)
    cfg.export.out = str(tmp_path / "model.mindir" / "sub")
    with pytest.raises(
        ExportFolderError, match=r"export.out=.*sub cannot be created \(Not a directory\)"
    ):
        export_folder(cfg)
