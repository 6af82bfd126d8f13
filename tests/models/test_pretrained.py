"""train.pretrained: a checkpoint of another class count (msdet .ckpt or PyTorch .pth)."""

from __future__ import annotations

import mindspore as ms
import numpy as np
import pytest

from msdet.models.description import COCO_NAMES
from msdet.models.head import prior_bias
from msdet.models.pretrained import load_pretrained
from msdet.models.weights import CheckpointError
from msdet.models.yolox import build_model, load_model_config

NANO = load_model_config("yolox_nano")
CLS = [f"head.cls_preds.{k}.{leaf}" for k in range(3) for leaf in ("weight", "bias")]
SHAPES = ["disc", "rectangle", "triangle"]


def _values(net) -> dict[str, np.ndarray]:
    return {p.name: p.asnumpy().copy() for p in net.get_parameters()}


def _random_weights(net, seed: int) -> dict[str, np.ndarray]:
    """Distinct, recognisable values for every parameter of ``net``."""
    rng = np.random.default_rng(seed)
    return {p.name: rng.standard_normal(p.shape).astype(np.float32) for p in net.get_parameters()}


@pytest.fixture(scope="module")
def coco80(tmp_path_factory):
    """An 80-class nano checkpoint with raw and (different) EMA weights, as training saves."""
    net = build_model(NANO, 80)
    raw, ema = _random_weights(net, 1), _random_weights(net, 2)
    entries = [{"name": k, "data": ms.Tensor(v)} for k, v in raw.items()]
    entries += [{"name": "ema." + k, "data": ms.Tensor(v)} for k, v in ema.items()]
    entries.append({"name": "moments.head.stems.0.conv.weight", "data": ms.Tensor(np.ones(2))})
    path = tmp_path_factory.mktemp("pre") / "coco80.ckpt"
    ms.save_checkpoint(entries, str(path))
    return path, raw, ema


def test_other_class_count_loads_all_but_class_head_which_stays_fresh(coco80):
    path, _, ema = coco80
    net = build_model(NANO, 3)
    fresh = _values(net)
    report = load_pretrained(net, str(path), SHAPES)
    after = _values(net)
    assert report.used_ema
    assert sorted(report.reinitialised) == sorted(CLS)
    assert report.skipped == [] and report.unused == []
    assert len(report.loaded) == len(after) - 6
    for name in report.loaded:  # the EMA weights, bit for bit
        assert after[name].tobytes() == ema[name].tobytes(), name
    for name in CLS:  # untouched: exactly the fresh model's initialisation
        assert after[name].tobytes() == fresh[name].tobytes(), name
        if name.endswith("bias"):
            np.testing.assert_array_equal(after[name], np.float32(prior_bias(0.01)))
    table = report.table()
    assert "(EMA)" in table and "re-initialised     6  head.cls_preds.0.weight" in table
    assert f"loaded           {len(report.loaded)}" in table
    assert report.classes_line() == (
        "kept 0 of 3 classes by name: -; new: disc, rectangle, triangle (the checkpoint's "
        "classes: the 80 COCO classes (an 80-class file without names))"
    )


def test_ema_of_the_new_run_starts_from_the_loaded_weights(coco80):
    from msdet.engine.training.ema import ModelEMA

    path, _, ema = coco80
    net = build_model(NANO, 3)
    load_pretrained(net, str(path), SHAPES)
    averages = ModelEMA(net).named_averages()
    assert averages["head.stems.0.conv.weight"].tobytes() == (
        ema["head.stems.0.conv.weight"].tobytes()
    )
    assert all(averages[k].tobytes() == v.tobytes() for k, v in _values(net).items())


def test_same_classes_load_everything(coco80):
    path, _, ema = coco80
    net = build_model(NANO, 80)
    report = load_pretrained(net, str(path), COCO_NAMES)
    assert report.reinitialised == [] and sorted(report.by_class_name) == sorted(CLS)
    assert len(report.loaded) == len(ema) - 6 and report.new_classes == []
    assert net.head.cls_preds[1].weight.asnumpy().tobytes() == (
        ema["head.cls_preds.1.weight"].tobytes()
    )


def test_other_architecture_is_an_error_naming_the_parameter_unless_not_strict(coco80):
    path, _, ema = coco80
    tiny = build_model(load_model_config("yolox_tiny"), 3)
    before = _values(tiny)
    with pytest.raises(CheckpointError) as err:
        load_pretrained(tiny, str(path), SHAPES)
    msg = str(err.value)
    assert "backbone.backbone.stem.conv.conv.weight: shape (16, 12, 3, 3) in the checkpoint" in msg
    assert "train.pretrained_strict=false" in msg and str(path) in msg
    assert all(v.tobytes() == before[k].tobytes() for k, v in _values(tiny).items())

    report = load_pretrained(tiny, str(path), SHAPES, strict=False)
    after = _values(tiny)
    assert report.skipped and "backbone.backbone.stem.conv.conv.weight" in report.skipped[0]
    for name in report.loaded:
        assert after[name].tobytes() == ema[name].tobytes(), name
    for entry in report.skipped:
        name = entry.split(" ")[0]
        assert after[name].tobytes() == before[name].tobytes(), name


def test_missing_file_names_it(tmp_path):
    with pytest.raises(CheckpointError, match="not found: .*nope.ckpt"):
        load_pretrained(build_model(NANO, 3), str(tmp_path / "nope.ckpt"), SHAPES)


@pytest.mark.torch
def test_pytorch_pth_of_80_classes_loads_directly(tmp_path):
    from tests.support.torch_reference import require_torch, require_yolox

    torch = require_torch()

    require_yolox()
    from msdet.porting.reference import build_torch_yolox

    model = build_torch_yolox(NANO, 80)
    src = tmp_path / "yolox_nano.pth"
    torch.save({"model": model.state_dict(), "start_epoch": 300}, src)
    net = build_model(NANO, 3)
    report = load_pretrained(net, str(src), SHAPES)
    assert not report.used_ema and sorted(report.reinitialised) == sorted(CLS)
    sd = model.state_dict()
    np.testing.assert_array_equal(
        net.backbone.backbone.stem.conv.bn.moving_variance.asnumpy(),
        sd["backbone.backbone.stem.conv.bn.running_var"].numpy(),
    )
    np.testing.assert_array_equal(
        net.head.reg_preds[2].weight.asnumpy(), sd["head.reg_preds.2.weight"].numpy()
    )
    assert len(report.loaded) == len(list(net.get_parameters())) - 6


def _described_checkpoint(path, names: list[str], seed: int) -> dict[str, np.ndarray]:
    """A nano checkpoint of ``names`` whose description carries them, as training writes."""
    from msdet.models.description import DESCRIPTION_KEY, describe

    net = build_model(NANO, len(names))
    weights = _random_weights(net, seed)
    description = describe(NANO, len(names), names, list(range(len(names))), [320, 320], "train")
    entries = [{"name": k, "data": ms.Tensor(v)} for k, v in weights.items()]
    ms.save_checkpoint(entries, str(path), append_dict={DESCRIPTION_KEY: description.to_json()})
    return weights


def test_class_rows_are_copied_by_name_and_the_others_start_fresh(tmp_path):
    path = tmp_path / "pets.ckpt"
    source = _described_checkpoint(path, ["cat", "dog", "bird", "traffic light"], seed=3)
    names = ["Dog", "fish", "cat", "traffic_light"]  # case and "_" do not matter
    net = build_model(NANO, len(names))
    fresh = _values(net)
    report = load_pretrained(net, str(path), names)
    after = _values(net)
    assert report.kept_classes == ["Dog", "cat", "traffic_light"]
    assert report.new_classes == ["fish"]
    assert sorted(report.by_class_name) == sorted(CLS) and report.reinitialised == []
    assert report.classes_line() == (
        "kept 3 of 4 classes by name: Dog, cat, traffic_light; new: fish "
        "(the checkpoint's classes: its description)"
    )
    for name in CLS:
        for row, source_row in ((0, 1), (2, 0), (3, 3)):
            np.testing.assert_array_equal(after[name][row], source[name][source_row])
        np.testing.assert_array_equal(after[name][1], fresh[name][1])  # fish: as built
        assert not np.array_equal(after[name][1], source[name][1])
    np.testing.assert_array_equal(after["head.cls_preds.2.bias"][1], np.float32(prior_bias(0.01)))
    for name in report.loaded:
        np.testing.assert_array_equal(after[name], source[name])


def test_same_class_count_with_other_names_keeps_no_row_by_position(tmp_path):
    path = tmp_path / "abc.ckpt"
    _described_checkpoint(path, ["a", "b", "c"], seed=4)
    net = build_model(NANO, 3)
    fresh = _values(net)
    report = load_pretrained(net, str(path), SHAPES)
    assert report.kept_classes == [] and report.new_classes == SHAPES
    assert sorted(report.reinitialised) == sorted(CLS)
    after = _values(net)
    for name in CLS:
        assert after[name].tobytes() == fresh[name].tobytes(), name
    assert "kept 0 of 3 classes by name: -; new: disc, rectangle, triangle" in (
        report.classes_line()
    )
