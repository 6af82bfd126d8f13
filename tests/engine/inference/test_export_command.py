"""export.py end to end: a checkpoint in, a verified MINDIR and export.json out."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import mindspore as ms
import pytest

from msdet.models.yolox import build_model, load_model_config
from tests.support import ROOT


def run_export(*overrides: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "export.py", *overrides],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.slow
def test_export_writes_a_verified_mindir_with_nms(tmp_path):
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
        f"run.dir={run_dir}",
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads((run_dir / "export.json").read_text())
    assert report["file"] == str(run_dir / "yolox_nano_128x128_b1_nms.mindir")
    assert os.path.getsize(report["file"]) > 1_000_000  # the weights are in the file
    assert report["num_classes"] == 3  # model.num_classes is null: taken from the checkpoint
    assert report["input_shape"] == [1, 3, 128, 128]
    assert report["output_shapes"] == [[1, 20, 6], [1]]
    assert report["max_abs_diff"] <= 1e-5  # the same kernels run the file: 0 measured
    assert report["example_detections"] == 20  # max_det boxes for the one image


def test_export_without_a_checkpoint_says_how_to_call_it(tmp_path):
    proc = run_export(f"run.dir={tmp_path}")
    assert proc.returncode != 0
    assert "ckpt=PATH" in proc.stderr + proc.stdout
