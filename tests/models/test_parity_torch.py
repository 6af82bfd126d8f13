"""The port computes what the PyTorch original computes (YOLOX 0.3.0, eval mode).

Two views of parity:
- module by module, each fed the original's input: every module agrees within 3e-4
  (measured up to 6.5e-5, float32 rounding; 0.4-1.4 with a BatchNorm eps of 1e-5), which
  pins every weight and layer;
- end to end, both in float32 against the original run in float64: float32 rounding
  grows through ~100 layers of a random-init network (PyTorch float32 itself differs from
  its float64 by up to ~1e-3 on a score), so the end-to-end check bounds mean and max
  error instead of demanding 1e-4 everywhere.
"""

from __future__ import annotations

import copy

import mindspore as ms
import numpy as np
import pytest

from msdet.models.convert_pytorch import convert_state_dict, mindspore_name
from msdet.models.yolox import build_model, load_model_config
from msdet.porting.forward import compare_modules
from msdet.porting.reference import build_torch_yolox, calibrate
from msdet.porting.report import first_failure, format_table
from tests.support.torch_reference import require_yolox

pytestmark = pytest.mark.torch

NUM_CLASSES = 80
IMG = 256
# YOLOX-Darknet53 (63.7 M parameters) runs at 128 px to keep its tests seconds long; at
# 256 px its errors were within the same bounds (measured: module max rel 1.05e-4 with
# atol/rtol 1e-4 met, end to end score max 2.2e-5, box max 8.4e-4).
IMG_SIZE = {"yolox_darknet53": 128}


def errors(ours: np.ndarray, ref: np.ndarray) -> dict[str, float]:
    """Box error relative (to max(|ref|, 1) px) and score error absolute: max and mean."""
    box = np.abs(ours[..., :4] - ref[..., :4]) / np.maximum(np.abs(ref[..., :4]), 1.0)
    score = np.abs(ours[..., 4:] - ref[..., 4:])
    return {
        "box_max": float(box.max()),
        "box_mean": float(box.mean()),
        "score_max": float(score.max()),
        "score_mean": float(score.mean()),
    }


def ported_pair(name: str, corrupt=None):
    """(calibrated PyTorch model, msdet model with its converted weights, input batch)."""
    require_yolox()
    cfg = load_model_config(name)
    img = IMG_SIZE.get(name, IMG)
    pt = calibrate(build_torch_yolox(cfg, NUM_CLASSES), img_size=img)
    state = pt.state_dict()
    if corrupt:
        state = corrupt(dict(state))
    net = build_model(cfg, NUM_CLASSES)
    expected = {k: tuple(p.shape) for k, p in net.parameters_and_names()}
    arrays = convert_state_dict(state, expected)
    ms.load_param_into_net(net, {k: ms.Parameter(ms.Tensor(v), k) for k, v in arrays.items()})
    net.set_train(False)
    x = np.random.default_rng(0).uniform(0, 255, (2, 3, img, img)).astype(np.float32)
    return pt, net, x


def torch_outputs(pt, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The original's output in float32 and in float64 (the rounding-free reference)."""
    import torch

    with torch.no_grad():
        out32 = pt(torch.from_numpy(x)).numpy()
        out64 = copy.deepcopy(pt).double()(torch.from_numpy(x).double()).numpy()
    return out32, out64


@pytest.fixture(params=["graph", "pynative"])
def mode(request):
    ms.set_context(mode=ms.GRAPH_MODE if request.param == "graph" else ms.PYNATIVE_MODE)
    yield request.param
    ms.set_context(mode=ms.GRAPH_MODE)


@pytest.mark.slow  # whole networks in both modes: full suite only (modules stay fast)
@pytest.mark.parametrize("name", ["yolox_nano", "yolox_tiny", "yolox_darknet53"])
def test_decoded_outputs_match_pytorch(name, mode):
    pt, net, x = ported_pair(name)
    out32, out64 = torch_outputs(pt, x)
    ours = net(ms.Tensor(x)).asnumpy()
    img = x.shape[-1]
    anchors = (img // 8) ** 2 + (img // 16) ** 2 + (img // 32) ** 2
    assert ours.shape == out32.shape == (2, anchors, 5 + NUM_CLASSES)
    # Calibration makes the comparison meaningful: scores spread, not all at the prior
    # (seeded weights: nano 0.108 / 0.289, tiny 0.047 / 0.253; rounding moves the 6th digit).
    assert out32[..., 4].std() > 0.02 and out32[..., 5:].std() > 0.05
    e_ms, e_pt = errors(ours, out64), errors(out32, out64)
    print(f"\n{name} {mode}: msdet fp32 vs original fp64 {e_ms}\n  original fp32 vs fp64 {e_pt}")
    # Measured (nano / tiny, worst of the CPU variants in docs/porting.md): score_mean
    # 1.1e-5 / 6.8e-6, box_mean 7.1e-5 / 3.8e-5 (oneDNN at SSE41), score_max 1.4e-3 /
    # 2.1e-4, box_max 1.2e-2 / 5.7e-3; a BatchNorm eps 10% off gives score_mean 2.4e-2.
    assert e_ms["score_mean"] < 1e-4 and e_ms["box_mean"] < 5e-4
    assert e_ms["score_max"] < 5e-3 and e_ms["box_max"] < 5e-2


@pytest.mark.slow
@pytest.mark.parametrize(
    "name",
    ["yolox_nano", pytest.param("yolox_tiny", marks=pytest.mark.slow), "yolox_darknet53"],
)
def test_every_module_matches_pytorch(name):
    ms.set_context(mode=ms.PYNATIVE_MODE)
    try:
        pt, net, x = ported_pair(name)
        rows = compare_modules(pt, net, x, atol=3e-4, rtol=3e-4)
    finally:
        ms.set_context(mode=ms.GRAPH_MODE)
    print("\n" + format_table(rows))
    neck_blocks = 4 if name == "yolox_darknet53" else 8  # YOLOFPN's 4, PAFPN's 8
    assert len(rows) == 5 + neck_blocks + 3 * 6 + 1
    assert first_failure(rows) is None
    # Measured max_rel: nano 2.9e-5 (oneDNN at AVX2) to 6.5e-5 (AVX512_CORE, the decoded
    # head output: 5e-5 failed there), tiny 2.2e-5, Darknet53 8.6e-5 (its dark5, 14
    # convolutions up to 1024 channels: PyTorch float32 is 8.2e-5 from float64 there, msdet
    # 2.9e-5); rows used <= 43% of the former atol = rtol = 1e-4. A BatchNorm eps of 1e-5
    # instead of 1e-3 gives 0.4-1.4.
    assert max(r.max_rel for r in rows) < 3e-4


@pytest.mark.slow
def test_swapped_bn_parameters_are_caught():
    """The comparison can fail: one BatchNorm with gamma and beta swapped is named."""
    bn = "backbone.backbone.dark3.1.m.0.conv1.bn"

    def swap(state):
        state[f"{bn}.weight"], state[f"{bn}.bias"] = state[f"{bn}.bias"], state[f"{bn}.weight"]
        return state

    ms.set_context(mode=ms.PYNATIVE_MODE)
    try:
        pt, net, x = ported_pair("yolox_nano", corrupt=swap)
        rows = compare_modules(pt, net, x)
        _, out64 = torch_outputs(pt, x)
        e_ms = errors(net(ms.Tensor(x)).asnumpy(), out64)
    finally:
        ms.set_context(mode=ms.GRAPH_MODE)
    assert first_failure(rows).module == "backbone.backbone.dark3"
    assert all(r.passed for r in rows[:2])  # stem and dark2 still agree
    assert e_ms["score_max"] > 5e-2 or e_ms["box_max"] > 5e-1  # measured 0.997 and 91.8


def test_bn_names_map_to_mindspore():
    assert (
        mindspore_name("backbone.backbone.stem.conv.bn.weight")
        == "backbone.backbone.stem.conv.bn.gamma"
    )
    assert mindspore_name("head.stems.0.bn.running_var") == "head.stems.0.bn.moving_variance"
    assert mindspore_name("head.stems.0.bn.num_batches_tracked") is None
    assert mindspore_name("head.cls_preds.2.bias") == "head.cls_preds.2.bias"
