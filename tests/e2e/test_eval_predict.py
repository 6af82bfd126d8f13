"""eval.py and predict.py on a trained and on a PyTorch-converted checkpoint."""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from pycocotools.coco import COCO
from pycocotools.cocoeval import COCOeval

from tests.support.tiny_run import ROOT, run_entry, tiny_val_split
from tests.support.torch_reference import require_yolox

pytestmark = pytest.mark.slow


# A run that finds something on every CPU: the shared `trained` run (18 steps) scores mAP 0
# on some CPUs, so this one trains 200 steps of batch 8 on 400 images with shapes of at least
# 120 px (~40 px at 128). Measured on the Intel Xeon: mAP50 0.003, 0.034, 0.105 after epochs
# 2-4 (mAP 0.023), ~50 s; the default-size shapes reached only mAP50 0.034.
LEARNS = [
    "data.num_train=400",
    "data.min_object_size=120",
    "train.batch_size=8",
    "train.epochs=4",
    "train.no_aug_epochs=1",
    "train.lr_per_img=0.0025",
    "train.log_interval=10",
    "train.tensorboard=false",
]


def test_eval_metrics_agree_with_independent_pycocotools(cache_dir, tmp_path):
    run_dir = tmp_path / "run"
    trained = run_entry("train.py", run_dir, cache_dir, *LEARNS)
    assert trained.returncode == 0, trained.stdout[-3000:] + trained.stderr[-3000:]
    # A low threshold so that there are detections to score.
    out = run_entry(
        "eval.py",
        tmp_path,
        cache_dir,
        *[o for o in LEARNS if o.startswith("data.")],
        f"ckpt={run_dir}/checkpoints/best.ckpt",
        "eval.conf_thresh=0.0001",
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "EMA weights" in Path(tmp_path / "eval.log").read_text()
    metrics = json.loads(Path(tmp_path / "metrics.json").read_text())
    detections = json.loads(Path(tmp_path / "detections.json").read_text())
    assert len(detections) > 0
    ann, _ = tiny_val_split(cache_dir, *LEARNS)
    with contextlib.redirect_stdout(io.StringIO()):
        gt = COCO(str(ann))
        coco_eval = COCOeval(gt, gt.loadRes(str(tmp_path / "detections.json")), "bbox")
        coco_eval.evaluate()
        coco_eval.accumulate()
        coco_eval.summarize()
    assert metrics["mAP"] == pytest.approx(coco_eval.stats[0], abs=1e-9)
    assert metrics["mAP50"] == pytest.approx(coco_eval.stats[1], abs=1e-9)
    # An agreement of two zeros would prove nothing: the model must have found something.
    assert metrics["mAP50"] > 0 and metrics["mAP"] > 0, metrics
    assert metrics["images"] == len(gt.getImgIds())
    # Category ids are the dataset's own (shapes uses 1, 3, 7), never training indices.
    assert {d["category_id"] for d in detections} <= {1, 3, 7}


def test_predict_writes_images_and_records_and_skips_broken_files(trained, cache_dir, tmp_path):
    run_dir, _ = trained
    _, images = tiny_val_split(cache_dir)
    source = tmp_path / "images"
    source.mkdir()
    names = sorted(os.listdir(images))[:3]
    for name in names:
        (source / name).write_bytes((images / name).read_bytes())
    (source / "broken.jpg").write_bytes((images / names[0]).read_bytes()[:500])
    out_dir = tmp_path / "out"
    out = run_entry(
        "predict.py",
        out_dir,
        cache_dir,
        f"ckpt={run_dir}/checkpoints/last.ckpt",
        f"source={source}",
        "predict.conf=0.0001",
    )
    assert out.returncode == 0, out.stderr[-3000:]
    preds = json.loads(Path(out_dir / "predictions.json").read_text())
    assert sorted(preds) == names  # the broken file is reported and skipped
    assert "broken.jpg" in Path(out_dir / "predict.log").read_text()
    assert sum(len(v) for v in preds.values()) > 0
    for name in names:
        assert (out_dir / name).is_file()
        for rec in preds[name]:
            assert set(rec) == {"bbox", "score", "category_id", "category_name"}
            assert rec["category_name"] in {"disc", "rectangle", "triangle"}
            assert rec["score"] >= 0.0001 and rec["bbox"][2] >= 0 and rec["bbox"][3] >= 0


def _convert(tmp_path, model: str) -> Path:
    """The original's random-weight ``model`` (80 classes), saved as a release .pth and
    converted as README's "From PyTorch" does: no class names given."""
    require_yolox()
    import torch

    from msdet.models.yolox import load_model_config
    from msdet.porting.reference import build_torch_yolox, calibrate

    pt = calibrate(build_torch_yolox(load_model_config(model), 80), img_size=128)
    torch.save({"model": pt.state_dict()}, tmp_path / f"{model}.pth")
    dst = tmp_path / f"{model}.ckpt"
    conv = subprocess.run(
        [
            sys.executable,
            "-m",
            "msdet.models.convert_pytorch",
            "--model",
            model,
            "--src",
            str(tmp_path / f"{model}.pth"),
            "--dst",
            str(dst),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert conv.returncode == 0, conv.stderr[-2000:]
    assert "class names: the 80 COCO classes" in conv.stderr + conv.stdout
    return dst


def _predict(out_dir, data_cache, *overrides: str) -> subprocess.CompletedProcess:
    """predict.py as README shows it: no TINY data overrides, only what is given."""
    return run_entry("predict.py", out_dir, data_cache, *overrides, tiny=False)


@pytest.mark.torch
def test_a_converted_checkpoint_predicts_named_coco_classes_with_only_ckpt(tmp_path, cache_dir):
    """README's "From PyTorch": ``predict.py ckpt=yolox_tiny.ckpt source=image.jpg``. The
    network (a tiny, not the default nano), its 80 COCO class names and ids and its input
    size come from the checkpoint; no training set is built (the data cache stays empty)."""
    from msdet.models.description import COCO_CATEGORY_IDS, COCO_NAMES

    ckpt = _convert(tmp_path, "yolox_tiny")
    _, images = tiny_val_split(cache_dir)
    image = images / sorted(os.listdir(images))[0]
    empty_cache = tmp_path / "no_data_here"
    out = _predict(
        tmp_path / "out",
        empty_cache,
        "runtime=cpu",
        f"ckpt={ckpt}",
        f"source={image}",
        "predict.conf=0.0",  # random weights score ~1e-4: keep boxes to look at
        "eval.max_det=10",
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert not empty_cache.exists() or not any(empty_cache.iterdir())
    log = Path(tmp_path / "out" / "predict.log").read_text()
    assert (
        "yolox_tiny EMA" not in log and "yolox_tiny raw weights, 80 classes (person, bicycle" in log
    )
    preds = json.loads(Path(tmp_path / "out" / "predictions.json").read_text())
    assert list(preds) == [image.name] and len(preds[image.name]) == 10
    for rec in preds[image.name]:
        assert rec["category_name"] in COCO_NAMES
        assert rec["category_id"] == COCO_CATEGORY_IDS[COCO_NAMES.index(rec["category_name"])]
    # A command line that contradicts the checkpoint: one line naming both.
    out = _predict(
        tmp_path / "wrong",
        empty_cache,
        "runtime=cpu",
        f"ckpt={ckpt}",
        f"source={image}",
        "model=yolox_s",
    )
    assert out.returncode == 1
    assert "model=yolox_s contradicts the checkpoint, a yolox_tiny" in out.stderr + out.stdout


@pytest.mark.torch
def test_a_checkpoint_without_description_still_loads_with_todays_flags(tmp_path, cache_dir):
    """Written before checkpoints described themselves: model= says what it is; classes
    are numbered, and the log says how to name them."""
    import mindspore as ms

    from msdet.models.description import DESCRIPTION_KEY

    ckpt = _convert(tmp_path, "yolox_tiny")
    params = ms.load_checkpoint(str(ckpt))
    old = tmp_path / "old.ckpt"
    ms.save_checkpoint(
        [{"name": k, "data": v} for k, v in params.items() if k != DESCRIPTION_KEY], str(old)
    )
    _, images = tiny_val_split(cache_dir)
    image = images / sorted(os.listdir(images))[0]
    common = [
        "runtime=cpu",
        f"ckpt={old}",
        f"source={image}",
        "predict.conf=0.0",
        "eval.max_det=5",
    ]
    out = _predict(
        tmp_path / "out", tmp_path / "cache", *common, "model=yolox_tiny", "eval.img_size=416"
    )
    assert out.returncode == 0, out.stderr[-3000:]
    preds = json.loads(Path(tmp_path / "out" / "predictions.json").read_text())
    assert [r["category_name"] for r in preds[image.name]] == [
        f"class{r['category_id']}" for r in preds[image.name]
    ]
    assert "has no description" in Path(tmp_path / "out" / "predict.log").read_text()
    # Without model= it is built as the default nano and the shapes do not fit: named.
    out = _predict(tmp_path / "nano", tmp_path / "cache", *common)
    assert out.returncode == 1 and "check model=" in out.stderr + out.stdout


def test_eval_refuses_other_class_names_and_maps_them_by_name_when_asked(cache_dir, tmp_path):
    """A checkpoint whose classes are the dataset's in another order: an error naming both
    lists (never an mAP under the wrong names); with eval.class_map=by_name each detection
    is scored under the dataset's class of its name: the same detections as the same
    weights described in the dataset's order, their category ids moved accordingly."""
    import mindspore as ms

    from tests.support.inference import varied_nano

    order = ["triangle", "disc", "rectangle"]
    data_ids = {"disc": 1, "rectangle": 3, "triangle": 7}
    for name, names in (("other", order), ("same", list(data_ids))):
        ms.set_seed(0)  # the same weights (those varied_nano leaves to the initialisers too)
        varied_nano(tmp_path / f"{name}.ckpt", names=names)
    low = "eval.conf_thresh=0.001"
    out = run_entry("eval.py", tmp_path / "strict", cache_dir, f"ckpt={tmp_path}/other.ckpt", low)
    assert out.returncode == 1, out.stdout[-3000:] + out.stderr[-3000:]
    assert (
        "the classes differ: " + str(tmp_path / "other.ckpt") + " has ['triangle', 'disc', "
        "'rectangle'], " in out.stdout
    )
    assert "instances_val.json has ['disc', 'rectangle', 'triangle']" in out.stdout
    assert "eval.class_map=by_name" in out.stdout
    assert not (tmp_path / "strict" / "metrics.json").exists()

    runs = {}
    for name, extra in (("other", "eval.class_map=by_name"), ("same", low)):
        run_dir = tmp_path / f"eval_{name}"
        out = run_entry("eval.py", run_dir, cache_dir, f"ckpt={tmp_path}/{name}.ckpt", low, extra)
        assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
        runs[name] = json.loads((run_dir / "detections.json").read_text())
    assert len(runs["same"]) > 0
    # Model class k: the dataset's k-th id under `same`, the id of order[k]'s name under `other`.
    moved = {data_ids[n]: data_ids[order[k]] for k, n in enumerate(data_ids)}
    assert [{**d, "category_id": moved[d["category_id"]]} for d in runs["same"]] == runs["other"]
