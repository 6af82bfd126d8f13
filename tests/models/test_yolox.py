"""The YOLOX port: sizes, outputs in both modes, initialisation as the original."""

from __future__ import annotations

import math

import mindspore as ms
import numpy as np
import pytest
from omegaconf import OmegaConf

from msdet.models.backbone import Darknet53
from msdet.models.head import make_grid, prior_bias
from msdet.models.layers import (
    BN_EPS,
    BN_MOMENTUM,
    BaseConv,
    Focus,
    ResLayer,
    SPPBottleneck,
    batchnorm_settling_steps,
)
from msdet.models.neck import YOLOFPN
from msdet.models.yolox import architecture, build_model, load_model_config, model_names
from msdet.ops.boxes import decode_boxes

# Parameter counts of the PyTorch original at 80 classes (trainable parameters).
ORIGINAL_PARAMS = {
    "yolox_nano": 912_159,
    "yolox_tiny": 5_055_855,
    "yolox_s": 8_968_255,
    "yolox_m": 25_326_495,
    "yolox_l": 54_208_895,
    "yolox_x": 99_071_455,
    # exp/default/yolov3.py, measured with torch on the original (yolox 0.3.0).
    "yolox_darknet53": 63_724_767,
}


def test_every_original_model_is_configured():
    assert model_names() == sorted(ORIGINAL_PARAMS)


@pytest.mark.slow
@pytest.mark.parametrize(
    "name",
    # l and x are the same modules at larger multipliers: building them costs seconds and
    # GBs, so they run in the full suite only.
    [
        n if n not in ("yolox_l", "yolox_x") else pytest.param(n, marks=pytest.mark.slow)
        for n in sorted(ORIGINAL_PARAMS)
    ],
)
def test_parameter_count_equals_original(name):
    net = build_model(load_model_config(name), 80)
    assert sum(p.size for p in net.trainable_params()) == ORIGINAL_PARAMS[name]


@pytest.mark.slow
def test_darknet53_is_yolov3s_layout():
    """Darknet53 + YOLOv3's FPN, LeakyReLU everywhere (head included), the head on
    128/256/512 channels at width 1; stage depths 1, 2, 8, 8, 4 residual blocks."""
    net = build_model(load_model_config("yolox_darknet53"), 80)
    cells = dict(net.cells_and_names())
    assert isinstance(net.backbone, YOLOFPN) and isinstance(net.backbone.backbone, Darknet53)
    residual = {
        stage: sum(isinstance(c, ResLayer) for c in cells[f"backbone.backbone.{stage}"].cells())
        for stage in ("stem", "dark2", "dark3", "dark4", "dark5")
    }
    assert residual == {"stem": 1, "dark2": 2, "dark3": 8, "dark4": 8, "dark5": 4}
    assert isinstance(cells["backbone.backbone.dark5.7"], SPPBottleneck)
    assert [cells[f"head.stems.{k}"].conv.in_channels for k in range(3)] == [128, 256, 512]
    assert cells["head.stems.0"].conv.out_channels == 256
    acts = {type(c).__name__ for n, c in cells.items() if n.endswith(".act")}
    assert acts == {"LeakyReLU"}
    assert all(c.fused is None for c in cells.values() if isinstance(c, BaseConv))


@pytest.mark.slow
def test_older_configs_build_cspdarknet_pafpn():
    """A model config without the architecture fields (all of them before Darknet53)
    builds what it built before: the parameter names old checkpoints hold."""
    cfg = OmegaConf.create(
        {
            "name": "yolox_s",
            "depth": 0.33,
            "width": 0.5,
            "depthwise": False,
            "num_classes": 3,
            "prior_prob": 0.01,
        }
    )
    arch = architecture(cfg)
    assert (arch["backbone"], arch["neck"], arch["act"]) == ("cspdarknet", "pafpn", "silu")
    assert arch["in_channels"] == [256, 512, 1024]
    old = [n for n, _ in build_model(cfg).parameters_and_names()]
    new = [n for n, _ in build_model(load_model_config("yolox_s"), 3).parameters_and_names()]
    assert old == new and "backbone.backbone.stem.conv.conv.weight" in old


@pytest.mark.parametrize(
    "override,message",
    [
        ({"width": 0.5}, "darknet53 needs"),
        ({"depthwise": True}, "darknet53 needs"),
        ({"in_channels": [256, 512, 1024]}, "darknet53 needs"),
        ({"neck": "pafpn"}, "got darknet53/pafpn"),
        ({"backbone": "resnet50"}, "cspdarknet/pafpn or darknet53/yolofpn"),
    ],
)
def test_darknet53_size_and_combination_are_checked(override, message):
    cfg = OmegaConf.merge(load_model_config("yolox_darknet53"), override)
    with pytest.raises(ValueError, match=message):
        build_model(cfg, 80)


@pytest.mark.slow
def test_num_classes_from_dataset_or_config():
    cfg = load_model_config("yolox_nano")
    assert build_model(cfg, 3).head.cls_preds[0].weight.shape[0] == 3
    cfg = OmegaConf.merge(cfg, {"num_classes": 7})
    assert build_model(cfg, 3).head.cls_preds[0].weight.shape[0] == 7
    with pytest.raises(ValueError, match="num_classes"):
        build_model(load_model_config("yolox_nano"), None)


def test_unknown_model_name_is_reported():
    with pytest.raises(ValueError, match="yolox_nano"):
        load_model_config("yolox_q")


@pytest.mark.slow
def test_outputs_in_training_and_inference_mode():
    net = build_model(load_model_config("yolox_nano"), 3)
    x = ms.Tensor(np.random.default_rng(0).uniform(0, 255, (2, 3, 128, 160)).astype(np.float32))
    anchors = 16 * 20 + 8 * 10 + 4 * 5
    net.set_train(True)
    raw, grids, strides = net(x)
    assert (
        raw.shape == (2, anchors, 8) and grids.shape == (anchors, 2) and strides.shape == (anchors,)
    )
    g, s = grids.asnumpy(), strides.asnumpy()
    # Level 0 (stride 8) grid walks x fastest; the first anchor of level 1 restarts at (0, 0).
    assert g[:3].tolist() == [[0, 0], [1, 0], [2, 0]] and g[20].tolist() == [0, 1]
    assert g[320].tolist() == [0, 0] and s[319] == 8 and s[320] == 16 and s[-1] == 32
    net.set_train(False)
    dec = net(x).asnumpy()
    assert dec.shape == (2, anchors, 8)
    assert (dec[..., 2:4] > 0).all() and ((dec[..., 4:] > 0) & (dec[..., 4:] < 1)).all()


def test_decoding_is_yolox_s():
    """Centre = (raw + grid) * stride, size = exp(raw) * stride."""
    grids, strides = make_grid(2, 3, 16)
    assert grids.asnumpy().tolist() == [[0, 0], [1, 0], [2, 0], [0, 1], [1, 1], [2, 1]]
    raw = np.zeros((1, 6, 4), np.float32)
    raw[0, 4] = [0.5, -0.25, 0.0, math.log(2.0)]
    boxes = decode_boxes(ms.Tensor(raw), grids, strides).asnumpy()
    # exp(log 2) * 16: MindSpore's CPU Exp lands 2 ulp off (2.4e-7 relative, every CPU
    # variant of docs/porting.md); 1e-6 is 8 ulp
    np.testing.assert_allclose(boxes[0, 4], [24.0, 12.0, 16.0, 32.0], rtol=1e-6)
    np.testing.assert_allclose(boxes[0, 0], [0.0, 0.0, 16.0, 16.0], rtol=1e-6)


def test_initialisation_follows_pytorch_defaults():
    net = build_model(load_model_config("yolox_s"), 80)
    params = dict(net.parameters_and_names())
    # kaiming_uniform(a=sqrt(5)) on a conv: U(-1/sqrt(fan_in), 1/sqrt(fan_in)).
    w = params["backbone.backbone.dark3.1.conv3.conv.weight"].asnumpy()
    bound = 1 / math.sqrt(w.shape[1] * w.shape[2] * w.shape[3])
    assert np.abs(w).max() <= bound and np.abs(w).max() > 0.95 * bound
    assert abs(w.std() - bound / math.sqrt(3)) < 0.05 * bound  # std of a uniform
    # Prediction biases: the 0.01 prior for classes and objectness, default for boxes.
    b = -math.log(0.99 / 0.01)
    assert prior_bias(0.01) == pytest.approx(b)
    for k in range(3):
        np.testing.assert_allclose(params[f"head.cls_preds.{k}.bias"].asnumpy(), b, rtol=1e-6)
        np.testing.assert_allclose(params[f"head.obj_preds.{k}.bias"].asnumpy(), b, rtol=1e-6)
        reg_b = params[f"head.reg_preds.{k}.bias"].asnumpy()
        assert 0 < np.abs(reg_b).max() <= 1 / math.sqrt(128)


def test_batchnorm_updates_running_stats_like_pytorch_momentum_003():
    """MindSpore momentum 0.97 == PyTorch momentum 0.03: running = 0.97 running + 0.03 batch."""
    assert BN_EPS == 1e-3 and BN_MOMENTUM == pytest.approx(0.97)
    conv = BaseConv(3, 4, 1)
    conv.set_train(True)
    x = np.random.default_rng(0).normal(2.0, 1.0, (2, 3, 8, 8)).astype(np.float32)
    w = conv.conv.weight.asnumpy().reshape(4, 3)
    batch_mean = np.einsum("oc,bchw->o", w, x) / (2 * 8 * 8)
    conv(ms.Tensor(x))
    np.testing.assert_allclose(  # float32 rounding: at most 0.8% of the tolerance used
        conv.bn.moving_mean.asnumpy(), 0.03 * batch_mean, rtol=1e-4, atol=1e-6
    )


def test_batchnorm_settles_after_the_batches_its_momentum_gives():
    """Batches until the running statistics keep under a share of their initial values."""
    n = batchnorm_settling_steps()
    assert n == 99  # YOLOX's momentum 0.03
    assert BN_MOMENTUM**n < 0.05 <= BN_MOMENTUM ** (n - 1)
    assert batchnorm_settling_steps(0.5) == 23  # 0.97^22 = 0.512, 0.97^23 = 0.496


@pytest.mark.slow
def test_focus_stacks_the_pixel_phases_exactly_as_yolox_slices_them():
    # YOLOX's Focus: cat(x[..., ::2, ::2], x[..., 1::2, ::2], x[..., ::2, 1::2],
    # x[..., 1::2, 1::2]) on channels, then its conv. msdet picks the phases with a one-hot
    # 2x2 stride-2 convolution (no Transpose: MindSpore's CPU one keeps an index per
    # element), which must hand the conv the pixels themselves, bit for bit, and add no
    # parameter (checkpoints keep their keys).
    rng = np.random.default_rng(0)
    x = np.concatenate(
        [
            rng.integers(0, 256, (2, 3, 8, 12)).astype(np.float32),  # image pixels
            (rng.standard_normal((2, 3, 8, 12)) * 1e4).astype(np.float32),  # any floats
        ]
    )
    stacked = np.concatenate(
        (x[..., ::2, ::2], x[..., 1::2, ::2], x[..., ::2, 1::2], x[..., 1::2, 1::2]), 1
    )
    focus = Focus(3, 16, 3)
    focus.set_train(False)
    out = focus(ms.Tensor(x)).asnumpy()
    np.testing.assert_array_equal(out, focus.conv(ms.Tensor(stacked)).asnumpy())
    assert np.abs(out).max() > 0
    assert [p.name for p in focus.get_parameters()] == [p.name for p in focus.conv.get_parameters()]
