"""The comparison tool ``python -m msdet.porting.compare``: passes on a converted model, names the
module that diverges, writes JSON a CI job can read, compares a training step."""

from __future__ import annotations

import importlib.util
import json
import os

import cv2
import numpy as np
import pytest

from msdet.porting import compare, inputs, report
from msdet.porting.forward import major_modules
from msdet.porting.inputs import yolox_preprocess
from msdet.porting.reference import INSTALL_HINT, ReferenceMissingError
from msdet.porting.report import ModuleDiff, build_report
from tests.support.torch_reference import require_yolox

SIZE = "64"  # small: the tool's cost is mostly compilation and the float64 reference
WHOLE_NETWORK_ROWS = [
    "head (decoded output)",
    "network output (graph)",
    "detections after NMS (graph)",
]
FORWARD_ROWS = major_modules() + WHOLE_NETWORK_ROWS


def run_tool(capsys, *args: str) -> tuple[int, str]:
    code = compare.main(["--model", "yolox_nano", "--size", SIZE, *args])
    return code, capsys.readouterr().out


def read_json(path) -> dict:
    with open(path, encoding="utf-8") as f:
        return json.load(f)


@pytest.fixture(scope="module")
def image(tmp_path_factory) -> str:
    """A picture that is not square: letterboxing pads its bottom."""
    path = str(tmp_path_factory.mktemp("img") / "street.jpg")
    cv2.imwrite(path, inputs.synthetic_image(300, 500, seed=3))
    return path


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory, image):
    """A YOLOX-nano release-format checkpoint ({"model": state_dict}) of the original.
    Random weights: BatchNorm statistics are calibrated on the test image, so that its
    outputs are meaningful there (trained weights need no such thing)."""
    require_yolox()
    import torch

    from msdet.models.yolox import load_model_config
    from msdet.porting.reference import build_torch_yolox, calibrate

    x = inputs.load_input(image, int(SIZE))
    model = build_torch_yolox(load_model_config("yolox_nano"), 80)
    calibrate(model, images=inputs.train_batch(x, 80)[0])
    path = tmp_path_factory.mktemp("ckpt") / "yolox_nano.pth"
    torch.save({"model": model.state_dict(), "epoch": 300}, path)
    return str(path)


@pytest.mark.torch
@pytest.mark.slow  # a whole training run or network compile: full suite only
def test_converted_checkpoint_passes_and_json_is_parsed(checkpoint, image, tmp_path, capsys):
    out_json = tmp_path / "ci" / "compare.json"
    code, out = run_tool(capsys, "--src", checkpoint, "--image", image, "--json", str(out_json))
    print(out)
    assert code == 0
    assert "PASS: all 34 rows" in out

    report = read_json(out_json)
    assert report["passed"] is True and report["first_failure"] is None
    assert report["model"] == "yolox_nano" and report["source"] == checkpoint
    assert report["image"] == image and report["mode"] == "graph"
    rows = report["rows"]
    assert [r["module"] for r in rows] == FORWARD_ROWS
    assert set(rows[0]) == {"module", "shape", "max_abs", "max_rel", "passed", "note"}
    assert rows[0]["shape"] == [1, 16, 32, 32]  # the stem on a 64 px input
    # Each module fed the original's input agrees to float32 rounding: measured 3.3e-5
    # with oneDNN at AVX2, 4.0e-5 at SSE41, 5.1e-5 at AVX512_CORE (5e-5 failed there).
    assert max(r["max_rel"] for r in rows[:31]) < 3e-4
    # NMS on the same decoded predictions: the same detections, bit for bit (boxes are
    # cx -+ w * 0.5 and scores one product: correctly rounded on every CPU).
    assert rows[-1]["max_abs"] == 0.0 and rows[-1]["shape"][1] == 6


@pytest.mark.torch
@pytest.mark.slow
def test_darknet53_rows_are_its_own_modules(tmp_path, capsys):
    """YOLOX-Darknet53: the rows follow its network (YOLOFPN's four blocks), and a random
    network calibrated on the picture passes in graph mode."""
    require_yolox()
    from msdet.models.neck import YOLOFPN

    out_json = tmp_path / "darknet53.json"
    code = compare.main(
        ["--model", "yolox_darknet53", "--random-init", "--size", SIZE, "--json", str(out_json)]
    )
    out = capsys.readouterr().out
    print(out)
    assert code == 0 and "PASS: all 30 rows" in out
    report = read_json(out_json)
    assert report["model"] == "yolox_darknet53"
    rows = report["rows"]
    assert [r["module"] for r in rows] == major_modules(YOLOFPN.BLOCKS) + WHOLE_NETWORK_ROWS
    assert rows[0]["shape"] == [1, 64, 32, 32]  # Darknet53's stem: stride 2, 64 channels
    assert rows[-1]["max_abs"] == 0.0


@pytest.mark.torch
@pytest.mark.slow
def test_perturbed_layer_is_named(checkpoint, image, tmp_path, capsys, monkeypatch):
    """One conv of the neck is off by a little after conversion: that block, and only
    that block, fails; the tool exits 1 naming it."""
    require_yolox()
    import mindspore as ms

    convert = inputs.convert_to_network

    def convert_then_perturb(state_dict, model, num_classes):
        net = convert(state_dict, model, num_classes)
        param = dict(net.parameters_and_names())["backbone.C3_p4.conv2.conv.weight"]
        value = param.asnumpy()
        param.set_data(ms.Tensor(value + 0.01 * value.std(), ms.float32))
        return net

    monkeypatch.setattr(inputs, "convert_to_network", convert_then_perturb)
    out_json = tmp_path / "compare.json"
    code, out = run_tool(
        capsys, "--src", checkpoint, "--image", image, "--mode", "pynative", "--json", str(out_json)
    )
    print(out)
    assert code == 1
    assert "FAIL: first divergence at backbone.C3_p4" in out
    report = read_json(out_json)
    assert report["passed"] is False and report["first_failure"] == "backbone.C3_p4"
    failed = [r["module"] for r in report["rows"] if not r["passed"]]
    # Modules are fed the original's inputs, so the error does not spread to the blocks
    # after C3_p4; only the rows that run the whole network see it again.
    assert failed == ["backbone.C3_p4", "network output (pynative)"]


@pytest.mark.torch
@pytest.mark.slow
def test_training_step_matches(capsys, tmp_path):
    require_yolox()
    out_json = tmp_path / "step.json"
    code, out = run_tool(
        capsys,
        "--random-init",
        "--train-step",
        "--use-l1",  # every loss term, the L1 one included
        "--mode",
        "pynative",
        "--json",
        str(out_json),
    )
    print(out)
    assert code == 0
    report = read_json(out_json)
    rows = {r["module"]: r for r in report["rows"]}
    assert report["train_step"] is True and report["first_failure"] is None
    for term in ("total", "iou", "obj", "cls", "l1"):
        assert rows[f"train: loss {term}"]["passed"]
    # Measured, worst of the CPU variants in docs/porting.md: loss total 1.3e-6, loss
    # gradient 3.6e-7, module gradients 9.1e-6, group gradient norms 2.0e-4.
    assert rows["train: loss total"]["max_rel"] < 1e-4
    assert "msdet 9, original 9" in rows["train: foreground anchors"]["note"]
    assert rows["train: loss gradient"]["max_rel"] < 1e-5
    grads = [r for name, r in rows.items() if name.startswith("train: grad backbone")]
    assert len(grads) == 13 and max(r["max_rel"] for r in grads) < 1e-3
    groups = [f"train: grad group {g}" for g in ("BN weights", "conv weights", "biases")]
    assert all(rows[g]["passed"] and rows[g]["max_rel"] < 5e-2 for g in groups)


def test_missing_reference_names_the_install_command(capsys, monkeypatch):
    def missing():
        raise ReferenceMissingError(f"torch is not installed: {INSTALL_HINT}")

    monkeypatch.setattr("msdet.porting.reference.import_yolox", missing)
    assert compare.main(["--model", "yolox_nano", "--random-init", "--size", SIZE]) == 2
    assert INSTALL_HINT in capsys.readouterr().err


def test_unreadable_image_is_a_setup_error(tmp_path, capsys):
    broken = tmp_path / "broken.jpg"
    broken.write_bytes(b"not a jpeg")
    code = compare.main(["--model", "yolox_nano", "--random-init", "--image", str(broken)])
    assert code == 2
    assert "cannot read image" in capsys.readouterr().err


def test_json_report_is_strict_json():
    """A shape mismatch has no finite difference: it becomes null, not Infinity."""
    rows = [
        ModuleDiff("backbone.backbone.stem", (1, 16, 32, 32), 1e-6, 1e-6, True),
        report.diff("backbone.backbone.dark2", np.zeros((1, 2)), np.zeros((1, 3)), 1e-4, 1e-4),
    ]
    text = json.dumps(report.json_safe(build_report(rows, model="m")), allow_nan=False)
    doc = json.loads(text)
    assert doc["first_failure"] == "backbone.backbone.dark2"
    assert doc["rows"][1]["max_abs"] is None and "shape (1, 2)" in doc["rows"][1]["note"]


def test_letterbox_matches_yolox_preprocessing():
    """The tool's preprocessing is YOLOX's ``preproc`` (read from its source file: the
    ``yolox.data`` package itself needs extra dependencies to import)."""
    require_yolox()
    import yolox

    path = os.path.join(os.path.dirname(yolox.__file__), "data", "data_augment.py")
    spec = importlib.util.spec_from_file_location("yolox_data_augment", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    img = inputs.synthetic_image(300, 500, seed=1)
    ours, ratio = yolox_preprocess(img, (416, 416))
    ref, ref_ratio = module.preproc(img, (416, 416))
    assert ratio == ref_ratio and np.array_equal(ours, ref)
    assert (ours[:, 250:, :] == 114).all()  # 300 * 416 / 500 = 249.6 rows of picture
