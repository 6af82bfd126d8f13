"""The port computes what the PyTorch original computes (YOLOX 0.3.0, eval mode)."""

from __future__ import annotations

import mindspore as ms
import numpy as np
import pytest

from models.convert import convert_state_dict, mindspore_name
from models.reference import build_torch_yolox, calibrate
from models.yolox import build_model, load_model_config
from tests.torch_reference import require_yolox

pytestmark = pytest.mark.torch

NUM_CLASSES = 80
IMG = 256


def max_diffs(ms_out: np.ndarray, pt_out: np.ndarray) -> tuple[float, float]:
    """(max relative difference of boxes, max absolute difference of scores)."""
    box_rel = np.abs(ms_out[..., :4] - pt_out[..., :4]) / np.maximum(np.abs(pt_out[..., :4]), 1.0)
    score_abs = np.abs(ms_out[..., 4:] - pt_out[..., 4:])
    return float(box_rel.max()), float(score_abs.max())


def ported_pair(name: str, corrupt=None):
    """(PyTorch model, MindSpore model with the converted weights, input image batch)."""
    require_yolox()
    import torch

    cfg = load_model_config(name)
    pt = calibrate(build_torch_yolox(cfg, NUM_CLASSES), img_size=IMG)
    state = pt.state_dict()
    if corrupt:
        state = corrupt(dict(state))
    net = build_model(cfg, NUM_CLASSES)
    expected = {k: tuple(p.shape) for k, p in net.parameters_and_names()}
    arrays = convert_state_dict(state, expected)
    ms.load_param_into_net(net, {k: ms.Parameter(ms.Tensor(v), k) for k, v in arrays.items()})
    net.set_train(False)
    x = np.random.default_rng(0).uniform(0, 255, (2, 3, IMG, IMG)).astype(np.float32)
    with torch.no_grad():
        ref = pt(torch.from_numpy(x)).numpy()
    return ref, net, x


@pytest.fixture(params=["graph", "pynative"])
def mode(request):
    ms.set_context(mode=ms.GRAPH_MODE if request.param == "graph" else ms.PYNATIVE_MODE)
    yield request.param
    ms.set_context(mode=ms.GRAPH_MODE)


@pytest.mark.parametrize("name", ["yolox_nano", "yolox_tiny"])
def test_decoded_outputs_match_pytorch(name, mode):
    ref, net, x = ported_pair(name)
    out = net(ms.Tensor(x)).asnumpy()
    assert out.shape == ref.shape == (2, (IMG // 8) ** 2 + (IMG // 16) ** 2 + (IMG // 32) ** 2, 85)
    # Calibration must make the comparison meaningful: scores spread, not all at the prior.
    assert ref[..., 4].std() > 0.05 and ref[..., 5:].std() > 0.05
    box_rel, score_abs = max_diffs(out, ref)
    print(f"{name} {mode}: box max rel diff {box_rel:.2e}, score max abs diff {score_abs:.2e}")
    assert box_rel < 1e-4
    assert score_abs < 1e-4


def test_swapped_bn_parameters_break_parity():
    """The comparison can fail: one BatchNorm with gamma and beta swapped is caught."""

    def swap_first_bn(state):
        key = "backbone.backbone.dark2.1.conv1.bn"
        state[f"{key}.weight"], state[f"{key}.bias"] = state[f"{key}.bias"], state[f"{key}.weight"]
        return state

    ref, net, x = ported_pair("yolox_nano", corrupt=swap_first_bn)
    box_rel, score_abs = max_diffs(net(ms.Tensor(x)).asnumpy(), ref)
    assert max(box_rel, score_abs) > 1e-2


def test_bn_names_map_to_mindspore():
    assert mindspore_name("backbone.backbone.stem.conv.bn.weight") == "backbone.backbone.stem.conv.bn.gamma"
    assert mindspore_name("head.stems.0.bn.running_var") == "head.stems.0.bn.moving_variance"
    assert mindspore_name("head.stems.0.bn.num_batches_tracked") is None
    assert mindspore_name("head.cls_preds.2.bias") == "head.cls_preds.2.bias"
