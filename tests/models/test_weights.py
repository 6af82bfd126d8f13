"""Loading weights for users: clear errors for wrong or broken checkpoints."""

from __future__ import annotations

import mindspore as ms
import numpy as np
import pytest

from msdet.models.weights import CheckpointError, checkpoint_num_classes, load_weights
from msdet.models.yolox import build_model, load_model_config

# Every test here takes seconds: it compiles, trains or starts a process.
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def nano3_ckpt(tmp_path_factory):
    path = tmp_path_factory.mktemp("ckpt") / "nano3.ckpt"
    ms.save_checkpoint(build_model(load_model_config("yolox_nano"), 3), str(path))
    return path


def test_class_count_mismatch_names_parameter_and_shapes(nano3_ckpt):
    net = build_model(load_model_config("yolox_nano"), 80)
    with pytest.raises(CheckpointError) as err:
        load_weights(net, str(nano3_ckpt))
    msg = str(err.value)
    assert "head.cls_preds.0.weight" in msg and "(3, 64, 1, 1)" in msg and "(80, 64, 1, 1)" in msg
    assert "3 classes" in msg
    assert checkpoint_num_classes(str(nano3_ckpt)) == 3


def test_architecture_mismatch_names_first_parameter(nano3_ckpt):
    net = build_model(load_model_config("yolox_tiny"), 3)
    with pytest.raises(CheckpointError, match="backbone.backbone.stem.conv.conv.weight"):
        load_weights(net, str(nano3_ckpt))


@pytest.mark.parametrize("damage", ["truncate", "empty", "garbage", "missing"])
def test_broken_files_give_clear_errors(tmp_path, nano3_ckpt, damage):
    path = tmp_path / "broken.ckpt"
    data = nano3_ckpt.read_bytes()
    if damage == "truncate":
        path.write_bytes(data[: len(data) // 2])
    elif damage == "empty":
        path.write_bytes(b"")
    elif damage == "garbage":
        path.write_bytes(b"not a checkpoint at all" * 100)
    net = build_model(load_model_config("yolox_nano"), 3)
    with pytest.raises(CheckpointError, match=str(path)):
        load_weights(net, str(path))


def test_ema_weights_are_preferred(tmp_path):
    net = build_model(load_model_config("yolox_nano"), 3)
    params = [{"name": n, "data": p} for n, p in net.parameters_and_names()]
    ema = [
        {"name": "ema." + n, "data": ms.Tensor(np.full(p.shape, 0.5, np.float32))}
        for n, p in net.parameters_and_names()
    ]
    path = tmp_path / "with_ema.ckpt"
    ms.save_checkpoint(params + ema, str(path))
    fresh = build_model(load_model_config("yolox_nano"), 3)
    assert load_weights(fresh, str(path)) is True
    assert np.all(fresh.head.cls_preds[0].weight.asnumpy() == 0.5)
    assert load_weights(fresh, str(path), use_ema=False) is False
    np.testing.assert_array_equal(
        fresh.head.cls_preds[0].weight.asnumpy(), net.head.cls_preds[0].weight.asnumpy()
    )
