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


@pytest.fixture(scope="module")
def nano3():
    """A 3-class nano that the refused loads below leave untouched."""
    return build_model(NANO, 3)


def _torch_file(path, entries: bytes) -> None:
    """A torch.save-layout zip whose data.pkl is a dict of ``entries`` (pickle opcodes for
    key-value pairs), with one storage of 4 floats, key "0"."""
    import zipfile

    pkl = b"\x80\x02}(" + entries + b"u."
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("w/data.pkl", pkl)
        z.writestr("w/data/0", np.arange(4, dtype=np.float32).tobytes())


def _key(name: str) -> bytes:
    return b"X" + len(name).to_bytes(4, "little") + name.encode()


STORAGE = b"(" + _key("storage") + b"ctorch\nFloatStorage\n" + _key("0") + _key("cpu") + b"K\x04tQ"
TENSOR = (
    b"ctorch._utils\n_rebuild_tensor_v2\n(" + STORAGE + b"K\x00K\x04\x85K\x01\x85\x89"
    b"ccollections\nOrderedDict\n)RtR"
)


@pytest.mark.parametrize(
    "entries, message",
    [
        # Issue: strict, a 34,867-character error blaming the architecture; not strict,
        # "loaded 0" and then a header claiming its weights.
        (_key("fc.weight") + TENSOR + _key("fc.bias") + TENSOR,
         r"holds none of the model's \d+ parameters: its 2 tensors are named fc.bias, fc.weight"),
        (_key("epoch") + b"K\x03" + _key("optimizer") + b"}",
         r"holds no tensor: 2 entries: epoch \(int\), optimizer \(dict\)"),
        # Issue: values that are bare storages: an IndexError traceback.
        (_key("head.cls_preds.0.weight") + STORAGE + _key("head.cls_preds.0.bias") + STORAGE,
         r"2 of its 2 values are bare storages \(head.cls_preds.0.weight, head.cls_preds.0.bias\)"),
    ],
)  # fmt: skip
def test_a_pth_without_network_weights_is_a_short_error_saying_what_it_holds(
    tmp_path, nano3, entries, message
):
    path = tmp_path / "other.pth"
    _torch_file(path, entries)
    for strict in (True, False):
        with pytest.raises(CheckpointError, match=message) as err:
            load_pretrained(nano3, str(path), SHAPES, strict=strict)
        assert len(str(err.value)) < 400


def test_non_finite_pretrained_weights_are_refused_naming_the_parameters(tmp_path, nano3):
    """Issue: NaN weights were loaded; the first step's stop blamed the rate."""
    net = nano3
    weights = _random_weights(net, 3)
    weights["head.stems.0.conv.weight"][0, 0] = np.nan
    weights["backbone.backbone.stem.conv.conv.weight"][:] = np.inf
    path = tmp_path / "diverged.ckpt"
    ms.save_checkpoint([{"name": k, "data": ms.Tensor(v)} for k, v in weights.items()], str(path))
    fresh = _values(net)
    with pytest.raises(CheckpointError, match=r"2 parameters hold NaN or infinite values \("):
        load_pretrained(net, str(path), SHAPES)
    assert all(v.tobytes() == fresh[k].tobytes() for k, v in _values(net).items())  # nothing loaded


def test_an_exported_model_given_as_weights_is_named_for_what_it_is(tmp_path):
    """Issue: an exported .mindir given as train.pretrained was called corrupt."""
    path = tmp_path / "best.mindir"
    path.write_bytes(b"\x0a\x05hello")
    with pytest.raises(
        CheckpointError, match=r"best.mindir is an exported MINDIR model, for infer"
    ):
        load_pretrained(build_model(NANO, 3), str(path), SHAPES)
