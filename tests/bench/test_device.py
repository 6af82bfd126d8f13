"""bench.device: MindYOLO's settings and msdet's, printed in the table; ms/step in every mode;
non-square inputs kept non-square; and one real run of each loop on CPU (slow)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from msdet.bench import device
from msdet.common.config import load_config
from tests.support import ROOT


@pytest.mark.slow
def test_mindyolos_settings_are_its_train_py_defaults_and_the_users_win():
    cfg = load_config("bench.device", device.settings_overrides("mindyolo", []))
    assert (cfg.runtime.jit_level, cfg.runtime.amp, cfg.runtime.sink) == ("O2", "O0", False)
    cfg = load_config("bench.device", device.settings_overrides("msdet", []))
    assert (cfg.runtime.jit_level, cfg.runtime.amp, cfg.runtime.sink) == (None, "auto", "auto")
    mine = device.settings_overrides("mindyolo", ["runtime.amp=O2"])
    assert load_config("bench.device", mine).runtime.amp == "O2"
    with pytest.raises(ValueError, match="choose from mindyolo, msdet"):
        device.settings_overrides("yolov5", [])


def test_ms_per_step_matches_mindyolos_own_rows():
    """MindYOLO's rows: 8 cards x batch 8; its ms/step and img/s agree with each other."""
    for row in device.MINDYOLO_ROWS:
        values = dict(zip(device.COLUMNS, row))
        ms = device.ms_per_step(values["img/s"], values["batch/card"], values["cards"])
        assert ms == pytest.approx(values["ms/step"], abs=0.02), row
    assert device.ms_per_step(0.0, 8, 1) == float("inf")


def test_the_table_prints_the_settings_and_ms_per_step():
    result = {"settings": "mindyolo", "model": "yolox_s", "cards": 8, "batch/card": 8,
              "img": "640x480", "data": "loader", "ms/step": 101.3, "img/s": 632.0,
              "run": {"loop": "model", "jit_level": "O2", "backend": "GE graph sink",
                      "amp": "O0", "sink": False}}  # fmt: skip
    row = device.table_row(result)
    assert row[:12] == ("mindyolo", "model", "yolox_s", 8, 8, "640x480", "O2", "GE graph sink",
                        "O0", "no", "loader", 101.3)  # fmt: skip
    text = device.format_rows([row, *device.MINDYOLO_ROWS])
    header, mine, *published = text.splitlines()
    assert header.split()[:7] == ["settings", "loop", "model", "cards", "batch/card", "img", "jit"]
    assert "101.3" in mine and "no" in mine.split()
    assert published[0].split()[:2] == ["MindYOLO", "910B"] and "305.18" in published[0]


def test_synthetic_batches_keep_height_and_width():
    """The step benchmark once fed a square of the height for [h, w] inputs."""
    from msdet.bench.device_step import image_size, synthetic_batches

    cfg = load_config("bench.device", ["data.img_size=[64,96]"])
    assert image_size(cfg) == (64, 96)
    images, targets, mask = next(synthetic_batches(cfg, 2, 3, 0).create_tuple_iterator(
        num_epochs=1, output_numpy=True))  # fmt: skip
    assert images.shape == (2, 64, 96, 3) and images.dtype == np.uint8
    boxes = targets[mask > 0]
    assert (boxes[:, 1] + boxes[:, 3] / 2 <= 96 + 1e-3).all() and (boxes[:, 1] > 32).any()
    assert (boxes[:, 2] + boxes[:, 4] / 2 <= 64 + 1e-3).all()


@pytest.mark.slow
@pytest.mark.parametrize(
    "settings, data, loops", [("mindyolo", "loader", "model"), ("msdet", "synthetic", "model,jit")]
)
def test_bench_device_runs_on_cpu(tmp_path, settings, data, loops):
    """Nano at 64x96 px, batch 2, two timed steps each way (~2 min each on 2 loaded cores)."""
    done = subprocess.run(
        [sys.executable, "-m", "msdet.bench.device", f"--settings={settings}", f"--data={data}",
         f"--loops={loops}",
         "--steps=2", "--warmup=1", "model=yolox_nano", "data.img_size=[64,96]",
         "train.batch_size=2", "data.num_train=16", "data.num_val=2",
         f"data.cache_dir={tmp_path}", "runtime.cpu_kernels=native"],
        cwd=tmp_path, env={**os.environ, "PYTHONPATH": ROOT}, capture_output=True, text=True,
        timeout=1200,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    result = json.loads(done.stdout.splitlines()[-1].removeprefix("RESULT "))
    rows = result.get("loops", [result])
    assert [r["run"]["loop"] for r in rows] == loops.split(",")
    for r in rows:
        assert r["img"] == "64x96" and r["data"] == data and r["ms/step"] > 0
        want = {"mindyolo": ("O2", "O0"), "msdet": ("O0", "O0")}[settings]  # CPU: msdet's auto
        assert (r["run"]["jit_level"], r["run"]["amp"]) == want
        assert r["run"]["backend"] in ("kernel by kernel", "ms_backend, whole graph")
        assert r["run"]["sink"] is False and len(r["timed_s"]) == 2
    assert "MindYOLO 910B" in done.stdout and settings in done.stdout
