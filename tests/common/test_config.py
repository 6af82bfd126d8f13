"""Hydra configuration: every group option composes, overrides work, typos fail loudly."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from hydra import compose, initialize_config_dir

from tests.support import ROOT

CONFIGS = os.path.join(ROOT, "configs")


def options(group: str) -> list[str]:
    return sorted(f[:-5] for f in os.listdir(os.path.join(CONFIGS, group)) if f.endswith(".yaml"))


def compose_cfg(overrides: list[str]):
    with initialize_config_dir(config_dir=CONFIGS, version_base="1.3"):
        return compose("config", overrides=overrides)


def test_default_composition():
    cfg = compose_cfg([])
    assert cfg.model.name == "yolox_nano" and cfg.data.name == "shapes"
    assert cfg.runtime.device == "auto" and cfg.train.epochs > 0
    assert list(cfg.eval.img_size) == list(cfg.data.img_size)  # interpolation


@pytest.mark.parametrize(
    "group,expected",
    [
        (
            "model",
            [
                "yolox_darknet53",
                "yolox_l",
                "yolox_m",
                "yolox_nano",
                "yolox_s",
                "yolox_tiny",
                "yolox_x",
            ],
        ),
        ("data", ["coco", "shapes", "shapes_stars"]),
        ("runtime", ["ascend", "ascend_8p", "auto", "cpu"]),
        ("train", ["shapes", "yolox"]),
    ],
)
def test_every_option_composes(group, expected):
    assert options(group) == expected
    # What tells the options apart: the runtime files by their device, shapes_stars (a
    # shapes set, name "shapes") by its classes, the others by their name.
    devices = {"ascend": "Ascend", "ascend_8p": "Ascend", "auto": "auto", "cpu": "CPU"}
    for name in expected:
        cfg = compose_cfg([f"{group}={name}"])
        if group == "runtime":
            assert cfg.runtime.device == devices[name]
        elif name == "shapes_stars":
            assert cfg.data.name == "shapes" and list(cfg.data.classes) == ["star", "cross", "ring"]
        else:
            assert cfg[group].name == name


def test_runtime_groups_differ_where_they_should():
    cpu = compose_cfg(["runtime=cpu"]).runtime
    ascend = compose_cfg(["runtime=ascend"]).runtime
    eight = compose_cfg(["runtime=ascend_8p"]).runtime
    assert cpu.device == "CPU" and not cpu.distributed
    assert ascend.device == "Ascend" and ascend.amp == "O2" and ascend.sink is True
    assert eight.device == "Ascend" and eight.distributed is True


def test_darknet53_trains_with_the_yolox_recipe_unchanged():
    """exp/default/yolov3.py changes only the model: its recipe is yolox_base's."""
    darknet = compose_cfg(["model=yolox_darknet53", "train=yolox"])
    assert darknet.model.backbone == "darknet53" and darknet.model.act == "lrelu"
    assert darknet.train == compose_cfg(["model=yolox_l", "train=yolox"]).train


def test_overrides_reach_nested_keys():
    cfg = compose_cfg(
        [
            "model=yolox_s",
            "train.epochs=300",
            "runtime.device=Ascend",
            "data.aug.mosaic_prob=0.25",
            "eval.img_size=[416,416]",
        ]
    )
    assert cfg.model.width == 0.5 and cfg.train.epochs == 300
    assert cfg.runtime.device == "Ascend" and cfg.data.aug.mosaic_prob == 0.25
    assert list(cfg.eval.img_size) == [416, 416]


def run_train(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "train.py", *args], cwd=ROOT, capture_output=True, text=True, timeout=120
    )


def test_cfg_job_prints_all_groups():
    out = run_train("--cfg", "job")
    assert out.returncode == 0, out.stderr
    for group in ("model:", "data:", "train:", "runtime:", "eval:"):
        assert f"\n{group}" in "\n" + out.stdout


@pytest.mark.parametrize(
    "typo,message",
    [
        ("modle=x", "modle"),
        ("train.epoch=3", "epoch"),
        ("model=yolox_q", "yolox_q"),
    ],
)
def test_mistyped_keys_fail_clearly(typo, message):
    out = run_train(typo)
    assert out.returncode != 0
    assert message in out.stderr
