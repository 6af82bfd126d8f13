"""The inference network, its loading from checkpoints, and exported files that compute the same."""

from __future__ import annotations

import mindspore as ms
import numpy as np
import pytest

from msdet.engine.inference.export import (
    ExportError,
    export_network,
    max_abs_diff,
    run_cell,
    sample_images,
    verify_mindir,
    verify_onnx,
)
from msdet.models.inference import InferenceNet, build_nms
from msdet.models.weights import load_detector
from msdet.models.yolox import build_model, load_model_config
from msdet.ops.nms import BatchedNMS, postprocess_numpy

IMG = (128, 160)  # small, and not square: catches h/w mix-ups
NUM_CLASSES = 3


pytestmark = pytest.mark.usefixtures("graph_mode")


def spread_scores(net, seed: int = 0) -> None:
    """Random objectness/class biases: a random-init YOLOX scores every anchor 0.01 * 0.01."""
    rng = np.random.default_rng(seed)
    for name, param in net.parameters_and_names():
        if (".cls_preds." in name or ".obj_preds." in name) and name.endswith(".bias"):
            param.set_data(ms.Tensor(rng.normal(-1.0, 1.5, param.shape).astype(np.float32)))


@pytest.fixture(scope="module")
def detector():
    net = build_model(load_model_config("yolox_nano"), NUM_CLASSES)
    spread_scores(net)
    net.set_train(False)
    return net


@pytest.fixture(scope="module")
def images():
    return sample_images(2, IMG)


@pytest.fixture(scope="module")
def nets(detector):
    """The two inference networks, built once: every new Cell is another graph compile."""
    nms = BatchedNMS(NUM_CLASSES, conf_thresh=0.05, iou_thresh=0.65, pre_nms_topk=300, max_det=50)
    return {"plain": InferenceNet(detector), "nms": InferenceNet(detector, nms)}


@pytest.fixture(scope="module")
def mindir_files(nets, images, tmp_path_factory):
    folder = tmp_path_factory.mktemp("export")
    return {
        kind: export_network(net, images, str(folder / kind), "MINDIR")
        for kind, net in nets.items()
    }


@pytest.mark.slow  # a whole training run or network compile: full suite only
def test_inference_net_is_the_detector_followed_by_nms(nets, images):
    preds = run_cell(nets["plain"], images)
    anchors = sum((IMG[0] // s) * (IMG[1] // s) for s in (8, 16, 32))
    assert preds[0].shape == (2, anchors, 5 + NUM_CLASSES)
    dets, counts = run_cell(nets["nms"], images)
    assert dets.shape == (2, 50, 6) and counts.min() > 0, "the check needs detections"
    expected = postprocess_numpy(preds[0], NUM_CLASSES, 0.05, 0.65, pre_nms_topk=300, max_det=50)
    for i in range(2):
        assert counts[i] == len(expected[i])
        # the same predictions on both sides: equal on every CPU (see tests/ops/test_nms.py)
        np.testing.assert_allclose(dets[i, : counts[i]], expected[i], rtol=0, atol=1e-4)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["plain", "nms"])
def test_mindir_round_trip_computes_what_the_cell_computes(nets, mindir_files, kind):
    assert mindir_files[kind].endswith(".mindir")
    # A fresh input, not the one the graph was traced with; every output is compared.
    other = sample_images(2, IMG, seed=1)
    # the file runs on the same MindSpore CPU kernels: 0 measured under every CPU variant
    assert verify_mindir(nets[kind], mindir_files[kind], other) <= 1e-5
    if kind == "nms":
        assert run_cell(nets[kind], other)[1].min() > 0, "the check needs detections"


@pytest.mark.slow
def test_verify_mindir_catches_a_different_network(detector, nets, mindir_files, images):
    param = detector.head.reg_preds[0].bias
    original = param.asnumpy().copy()
    try:
        param.set_data(ms.Tensor(original + 1.0))  # every box shifts
        with pytest.raises(ExportError, match="max abs diff"):
            verify_mindir(nets["plain"], mindir_files["plain"], images)
    finally:
        param.set_data(ms.Tensor(original))


def test_max_abs_diff_rejects_different_outputs():
    a = [np.zeros((2, 50, 6), np.float32), np.zeros(2, np.int32)]
    assert max_abs_diff(a, [a[0] + 0.5, a[1]]) == 0.5
    with pytest.raises(ExportError, match="output shapes differ"):
        max_abs_diff(a, [np.zeros((2, 336, 8), np.float32)])


@pytest.mark.slow
def test_onnx_export_with_nms_matches_onnxruntime(nets, images, tmp_path):
    import onnxruntime  # noqa: F401  (requirements-dev pins it: a missing one is a failure)

    path = export_network(nets["nms"], images, str(tmp_path / "nano"), "ONNX")
    check = sample_images(2, IMG, seed=1)
    assert run_cell(nets["nms"], check)[1].min() > 0, "the check needs detections"
    # Other kernels (onnxruntime's MLAS, which blocks convolutions by the CPU's vector
    # width): 1e-5 is below one ulp of a box corner past 128 px (1.5e-5). Measured 6e-8
    # (corners bit-equal) under every CPU variant of docs/porting.md, on AVX-512 MLAS only.
    assert verify_onnx(nets["nms"], path, check) <= 1e-4


def test_build_nms_reads_the_eval_config():
    from omegaconf import OmegaConf

    eval_cfg = OmegaConf.create(
        {
            "conf_thresh": 0.2,
            "nms_iou": 0.5,
            "pre_nms_topk": 500,
            "max_det": 30,
            "class_agnostic": True,
        }
    )
    nms = build_nms(eval_cfg, 7)
    assert (nms.num_classes, nms.conf_thresh, nms.iou_thresh) == (7, 0.2, 0.5)
    assert (nms.pre_nms_topk, nms.max_det, nms.class_agnostic) == (500, 30, True)
    with pytest.raises(ValueError, match="eval.pre_nms_topk"):
        build_nms(OmegaConf.merge(eval_cfg, {"pre_nms_topk": 5000}), 7)


@pytest.mark.slow
def test_load_detector_takes_classes_and_ema_weights_from_the_checkpoint(tmp_path):
    cfg = load_model_config("yolox_nano")
    assert cfg.num_classes is None
    trained = build_model(cfg, 5)
    ema = build_model(cfg, 5)
    spread_scores(ema, seed=3)
    params = [{"name": n, "data": p} for n, p in trained.parameters_and_names()]
    params += [{"name": f"ema.{n}", "data": p} for n, p in ema.parameters_and_names()]
    ckpt = str(tmp_path / "last.ckpt")
    ms.save_checkpoint(params, ckpt)

    net, used_ema = load_detector(cfg, ckpt)
    assert used_ema and net.num_classes == 5 and not net.training
    key = "head.obj_preds.1.bias"
    got = dict(net.parameters_and_names())[key].asnumpy()
    np.testing.assert_array_equal(got, dict(ema.parameters_and_names())[key].asnumpy())

    net, used_ema = load_detector(cfg, ckpt, use_ema=False)
    assert not used_ema
    got = dict(net.parameters_and_names())[key].asnumpy()
    np.testing.assert_array_equal(got, dict(trained.parameters_and_names())[key].asnumpy())
