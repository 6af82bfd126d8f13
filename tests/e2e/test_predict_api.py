"""predict.py on a folder with a video, and the Python API in a plain session: the same
boxes. The checkpoint is a described, untrained nano (no training run needed)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import cv2
import mindspore as ms
import numpy as np
import pytest

from msdet.data.synthetic import categories_for, render_image
from msdet.models.description import DESCRIPTION_KEY, describe
from msdet.models.yolox import build_model, load_model_config
from tests.support.media import write_video
from tests.support.tiny_run import ROOT, run_entry

pytestmark = pytest.mark.slow

# What a user types in a Python session (README "Python API"), then the results as json.
API_SESSION = """
import json, sys
import cv2
from msdet.engine.inference.predictor import Predictor
assert "mindspore" not in sys.modules  # Predictor.load sets the process up first
ckpt, image, video = sys.argv[1:4]
predictor = Predictor.load(ckpt, device="CPU")
result = predictor.predict(image)
capture, frames = cv2.VideoCapture(video), []
while True:
    ok, frame = capture.read()
    if not ok:
        break
    frames.append(predictor.predict(frame).records())
print("RESULT " + json.dumps({
    "records": result.records(),
    "array": predictor.predict(cv2.imread(image)).records(),
    "boxes": result.boxes.tolist(), "scores": result.scores.tolist(),
    "labels": result.labels.tolist(), "label_names": result.label_names, "names": result.names,
    "frames": frames,
}))
"""


def described_nano(path) -> None:
    """An untrained 3-class nano whose head biases give scores around 0.3-0.6 (a random
    init scores every anchor 0.01 x 0.01), described at 64 px as training describes."""
    cfg = load_model_config("yolox_nano")
    net = build_model(cfg, 3)
    rng = np.random.default_rng(0)
    for name, param in net.parameters_and_names():
        if (".cls_preds." in name or ".obj_preds." in name) and name.endswith(".bias"):
            mean = 0.5 if ".obj_preds." in name else -0.5
            param.set_data(ms.Tensor(rng.normal(mean, 1.5, param.shape).astype(np.float32)))
    description = describe(cfg, 3, ["disc", "rectangle", "triangle"], [1, 3, 7], [64, 64], "train")
    ms.save_checkpoint(net, str(path), append_dict={DESCRIPTION_KEY: description.to_json()})


def test_the_api_returns_what_predict_py_writes(tmp_path):
    ckpt = tmp_path / "nano.ckpt"
    described_nano(ckpt)
    source = tmp_path / "photos"
    for k, rel in enumerate(("a/x.jpg", "b/x.jpg")):
        (source / rel).parent.mkdir(parents=True)
        img, _ = render_image(np.random.default_rng(k), categories_for(None), 8)
        cv2.imwrite(str(source / rel), img)
    write_video(source / "clip.mp4", 3)

    out = tmp_path / "run"
    cli = run_entry(
        "predict.py",
        out,
        tmp_path / "cache",
        "runtime=cpu",
        f"ckpt={ckpt}",
        f"source={source}",
        "predict.save_txt=true",
        "eval.conf_thresh=0.001",  # eval's: named in a warning, not used
        tiny=False,
    )
    assert cli.returncode == 0, cli.stderr[-3000:]
    log = (out / "predict.log").read_text()
    assert "score >= 0.25" in log and "set predict.conf=0.001 instead" in log
    assert "2 images, 1 videos (3 frames)" in log
    preds = json.loads((out / "predictions.json").read_text())
    assert sorted(preds) == ["a/x.jpg", "b/x.jpg"]
    assert all(len(v) > 0 and min(r["score"] for r in v) >= 0.25 for v in preds.values())
    frames = json.loads((out / "clip.frames.json").read_text())["frames"]
    assert len(frames) == 3 and len(os.listdir(out / "labels")) == 2 + 3  # a/, b/, 3 frames

    api = subprocess.run(
        [
            sys.executable,
            "-c",
            API_SESSION,
            str(ckpt),
            str(source / "a/x.jpg"),
            str(source / "clip.mp4"),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert api.returncode == 0, api.stderr[-3000:]
    got = json.loads(api.stdout.split("RESULT ", 1)[1])
    assert got["records"] == preds["a/x.jpg"]  # equal, as written: the same rounding
    assert got["array"] == preds["a/x.jpg"]
    assert [f["detections"] for f in frames] == got["frames"]
    boxes = np.array(got["boxes"])
    xywh = np.concatenate((boxes[:, :2], boxes[:, 2:] - boxes[:, :2]), 1)
    np.testing.assert_allclose(xywh, [r["bbox"] for r in preds["a/x.jpg"]], atol=0.005 + 1e-9)
    assert got["label_names"] == [r["category_name"] for r in preds["a/x.jpg"]]
    assert got["names"] == ["disc", "rectangle", "triangle"]  # the model's classes
    assert [[1, 3, 7][k] for k in got["labels"]] == [r["category_id"] for r in preds["a/x.jpg"]]
    np.testing.assert_allclose(got["scores"], [r["score"] for r in preds["a/x.jpg"]], atol=5e-6)


# A user's session outside the repository: only the installed package `msdet` is there.
ANYWHERE_SESSION = """
import importlib.util, json, os, sys
top_level = {n: importlib.util.find_spec(n) is not None
             for n in ("models", "data", "ops", "engine", "common", "porting", "bench")}
import msdet
from msdet.engine.inference.predictor import Predictor
predictor = Predictor.load(sys.argv[1], device="CPU")
result = predictor.predict(sys.argv[2])
print("RESULT " + json.dumps({
    "top_level": top_level, "names": result.names, "label_names": result.label_names,
    "labels": result.labels.tolist(), "cwd": os.getcwd(),
}))
"""


def test_the_api_works_from_any_folder_with_only_msdet_importable(tmp_path):
    ckpt = tmp_path / "nano.ckpt"
    described_nano(ckpt)
    img, _ = render_image(np.random.default_rng(0), categories_for(None), 8)
    cv2.imwrite(str(tmp_path / "x.jpg"), img)
    work = tmp_path / "elsewhere"
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    api = subprocess.run(
        [sys.executable, "-c", ANYWHERE_SESSION, str(ckpt), str(tmp_path / "x.jpg")],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert api.returncode == 0, api.stderr[-3000:]
    got = json.loads(api.stdout.split("RESULT ", 1)[1])
    assert got["cwd"] == str(work) and not work.samefile(ROOT)
    assert not any(got["top_level"].values()), got["top_level"]
    assert got["names"] == ["disc", "rectangle", "triangle"]
    assert len(got["labels"]) > 0, "the check needs detections"
    assert got["label_names"] == [got["names"][k] for k in got["labels"]]
    assert not list(work.iterdir())  # nothing left in the user's folder
