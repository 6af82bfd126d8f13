"""train.freeze: frozen parameters get no gradient, update or decay; BN on running stats."""

from __future__ import annotations

import mindspore as ms
import numpy as np
import pytest
from mindspore import nn
from omegaconf import OmegaConf

from msdet.engine.training.ema import ModelEMA
from msdet.engine.training.fine_tuning import (
    META_FREEZE,
    check_freeze,
    freeze,
    freeze_level_code,
    resolve_freeze,
)
from msdet.engine.training.optim import build_optimizer
from msdet.engine.training.step import TrainStep
from msdet.models.loss import DetectorWithLoss, YOLOXLoss
from msdet.models.yolox import build_model, load_model_config
from tests.support.modes import execution_mode

SGD = OmegaConf.create({"momentum": 0.9, "nesterov": True, "weight_decay": 0.05})


def _batch(seed: int = 0):
    rng = np.random.default_rng(seed)
    images = rng.uniform(0, 255, (2, 3, 64, 64)).astype(np.float32)
    targets = np.zeros((2, 4, 5), np.float32)
    targets[:, 0] = [1, 32, 32, 20, 24]
    targets[:, 1] = [0, 16, 20, 10, 12]
    mask = np.zeros((2, 4), np.float32)
    mask[:, :2] = 1
    return ms.Tensor(images), ms.Tensor(targets), ms.Tensor(mask)


@pytest.fixture
def pynative():
    """PyNative mode: a nano training step without a ~40 s graph compile."""
    with execution_mode(ms.PYNATIVE_MODE):
        yield


def _values(net):
    return {p.name: p.asnumpy().copy() for p in net.get_parameters()}


@pytest.mark.slow  # real training steps: full suite only
@pytest.mark.parametrize(
    ("level", "prefix"),
    [
        ("backbone", "backbone.backbone."),
        pytest.param("backbone+neck", "backbone.", marks=pytest.mark.slow),
    ],
)
def test_frozen_part_stays_bit_identical_through_training_steps(level, prefix, pynative):
    net = build_model(load_model_config("yolox_nano"), 3)
    report = freeze(net, level)
    before = _values(net)
    frozen = {k for k in before if k.startswith(prefix)}
    assert report.frozen_params == len(frozen) > 0
    optimizer = build_optimizer(net, 0.05, SGD)
    assert not {p.name for p in optimizer.parameters} & frozen  # no update, no decay
    assert {p.name for p in optimizer.parameters} == {
        p.name for p in net.get_parameters() if p.requires_grad
    }
    ema = ModelEMA(net, 0.9)
    step = TrainStep(DetectorWithLoss(net, YOLOXLoss(3)), optimizer, ema)
    step.set_train(True)
    for seed in range(2):
        step(*_batch(seed))
    after = _values(net)
    averages = ema.named_averages()
    for name in frozen:  # weights and BatchNorm running statistics
        assert after[name].tobytes() == before[name].tobytes(), name
        assert averages[name].tobytes() == before[name].tobytes(), name
    moved = [k for k in before if k not in frozen and not np.array_equal(after[k], before[k])]
    assert any(k.startswith("head.") for k in moved)
    if level == "backbone":  # the neck trains, its BatchNorm statistics move
        assert any(k.startswith("backbone.") and "moving_mean" in k for k in moved)


@pytest.mark.slow
def test_frozen_batchnorm_uses_running_statistics_in_training_mode():
    net = build_model(load_model_config("yolox_nano"), 3)
    report = freeze(net, "backbone")
    bns = [(name, cell) for name, cell in net.cells_and_names() if isinstance(cell, nn.BatchNorm2d)]
    frozen = [c for n, c in bns if n.startswith("backbone.backbone.")]
    assert report.frozen_bn == len(frozen) > 0
    assert all(c.use_batch_statistics is False for c in frozen)
    assert all(c.use_batch_statistics is None for n, c in bns if n.startswith("head."))
    # In training mode the frozen stem computes what it computes in eval mode.
    stem = net.backbone.backbone.stem
    x = ms.Tensor(np.random.default_rng(0).uniform(0, 255, (2, 3, 64, 64)).astype(np.float32))
    stem.set_train(False)
    eval_out = stem(x).asnumpy()
    stem.set_train(True)
    np.testing.assert_array_equal(stem(x).asnumpy(), eval_out)


@pytest.mark.slow
def test_none_freezes_nothing_and_bad_level_is_named():
    net = build_model(load_model_config("yolox_nano"), 3)
    assert freeze(net, "none").frozen_params == 0
    assert all(p.requires_grad for p in net.trainable_params())
    with pytest.raises(ValueError, match="train.freeze must be one of none, backbone, backbone"):
        check_freeze("neck")


@pytest.mark.slow
def test_resume_keeps_the_checkpoint_freeze(tmp_path):
    path = tmp_path / "last.ckpt"
    net = build_model(load_model_config("yolox_nano"), 3)
    ms.save_checkpoint(net, str(path), append_dict={META_FREEZE: freeze_level_code("backbone")})
    assert resolve_freeze("none", str(path)) == "backbone"
    assert resolve_freeze("backbone+neck", str(path)) == "backbone"
    plain = tmp_path / "plain.ckpt"
    ms.save_checkpoint(net, str(plain))
    assert resolve_freeze("backbone+neck", str(plain)) == "backbone+neck"
    assert resolve_freeze("backbone", None) == "backbone"


@pytest.mark.slow
def test_prepare_fine_tuning_loads_then_freezes_and_logs_both(tmp_path, caplog):
    from msdet.engine.training.fine_tuning import prepare_fine_tuning

    source = build_model(load_model_config("yolox_nano"), 80)
    path = tmp_path / "coco80.ckpt"
    ms.save_checkpoint(source, str(path))
    nano = load_model_config("yolox_nano")
    net = build_model(nano, 3)
    tcfg = OmegaConf.create(
        {"pretrained": str(path), "pretrained_strict": True, "freeze": "backbone"}
    )
    with caplog.at_level("INFO"):
        done = prepare_fine_tuning(net, tcfg, ["person", "disc", "car"], nano)
    assert done.freeze == "backbone" and done.start.path == str(path)
    assert "re-initialised     0" in caplog.text and "by class name      6" in caplog.text
    assert "kept 2 of 3 classes by name: person, car; new: disc" in caplog.text
    assert "train.freeze=backbone: " in caplog.text
    stem = net.backbone.backbone.stem.conv.conv.weight
    assert not stem.requires_grad
    assert (
        stem.asnumpy().tobytes()
        == source.backbone.backbone.stem.conv.conv.weight.asnumpy().tobytes()
    )
    caplog.clear()
    with caplog.at_level("WARNING"):
        done = prepare_fine_tuning(
            build_model(nano, 3),
            OmegaConf.create({"pretrained": None, "freeze": "backbone"}),
            ["disc", "rectangle", "triangle"],
            nano,
        )
    assert "freezes random weights" in caplog.text and done.start.scratch


@pytest.fixture
def release_site(tmp_path, monkeypatch):
    """An empty cache and an empty local release site: every download is a 404."""
    from tests.support.web import FileServer

    monkeypatch.setenv("MSDET_CACHE_DIR", str(tmp_path / "cache"))
    with FileServer() as server:
        monkeypatch.setenv("MSDET_WEIGHTS_URL", server.url)
        yield server


def test_start_auto_takes_the_models_release_file(release_site):
    from msdet.engine.training.fine_tuning import resolve_start
    from msdet.models.release_weights import ReleaseWeightsError

    # yolox_darknet53's file is the original's yolox_darknet.pth.
    with pytest.raises(ReleaseWeightsError, match=r"/yolox_darknet\.pth \(HTTP 404"):
        resolve_start("auto", load_model_config("yolox_darknet53"))
    with pytest.raises(ReleaseWeightsError, match=r"/yolox_s\.pth \(HTTP 404"):
        resolve_start("yolox_s", load_model_config("yolox_s"))
    assert release_site.requests == ["/yolox_darknet.pth", "/yolox_s.pth"]


def test_start_without_fitting_official_weights(release_site):
    from msdet.engine.training.fine_tuning import resolve_start

    changed = OmegaConf.merge(load_model_config("yolox_s"), {"depth": 0.5})
    start = resolve_start("auto", changed)
    assert start.scratch
    assert start.what == (
        "from scratch: no official weights fit yolox_s (its architecture is changed from the "
        "released one)"
    )
    own = OmegaConf.merge(load_model_config("yolox_nano"), {"name": "my_nano"})
    assert "official weights exist for yolox_nano, yolox_tiny" in resolve_start("auto", own).what
    with pytest.raises(ValueError, match="train.pretrained=yolox_s is the official weights of"):
        resolve_start("yolox_s", load_model_config("yolox_nano"))
    with pytest.raises(ValueError, match=r"choose model=yolox_s, or train.pretrained=null"):
        resolve_start("yolox_s", changed)
    assert resolve_start(None, changed).what == "from scratch (train.pretrained=null)"
    with pytest.raises(ValueError, match=r"train.pretrained=yolox_sx: no such file\. A model name"):
        resolve_start("yolox_sx", changed)
    assert release_site.requests == []  # nothing was downloaded for any of these


def test_start_from_a_file(tmp_path):
    from msdet.engine.training.fine_tuning import resolve_start

    path = tmp_path / "mine.pth"
    path.write_bytes(b"read when loaded")
    start = resolve_start(str(path), load_model_config("yolox_nano"))
    assert (start.path, start.what) == (str(path), f"the weights of {path}")


@pytest.mark.slow
def test_a_resumed_run_loads_no_pretrained_weights(tmp_path, release_site):
    from msdet.engine.training.fine_tuning import prepare_fine_tuning

    nano = load_model_config("yolox_nano")
    path = tmp_path / "last.ckpt"
    ms.save_checkpoint(build_model(nano, 3), str(path))
    tcfg = OmegaConf.create({"pretrained": "auto", "pretrained_strict": True, "freeze": "none"})
    done = prepare_fine_tuning(build_model(nano, 3), tcfg, ["a", "b", "c"], nano, str(path))
    assert done.start.what == f"resumed from {path}" and release_site.requests == []


def test_the_own_data_default_starts_from_scratch_when_the_weights_are_not_at_hand(release_site):
    """Issue 65: a dataset of one's own defaults to the COCO weights when they can be had;
    without them (nothing cached, no download) the run starts from scratch and says why,
    where a typed train.pretrained still stops with the way to get the file."""
    from msdet.engine.training.fine_tuning import resolve_start
    from msdet.models.release_weights import ReleaseWeightsError

    nano = load_model_config("yolox_nano")
    start = resolve_start("auto", nano, optional=True)
    assert start.scratch
    assert start.what.startswith(
        "from scratch: the original's COCO weights of yolox_nano are not at hand (could not "
        f"download {release_site.url}/yolox_nano.pth (HTTP 404"
    )
    with pytest.raises(ReleaseWeightsError, match=r"/yolox_nano\.pth \(HTTP 404"):
        resolve_start("auto", nano)
