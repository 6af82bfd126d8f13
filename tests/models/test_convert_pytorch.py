"""The PyTorch -> MindSpore weight converter (python -m msdet.models.convert_pytorch)."""

from __future__ import annotations

import mindspore as ms
import numpy as np
import pytest

from msdet.models.convert_pytorch import (
    ConversionError,
    convert_state_dict,
    extract_state_dict,
    main,
)
from msdet.models.weights import load_weights
from msdet.models.yolox import build_model, load_model_config
from msdet.porting.forward import compare_modules
from msdet.porting.reference import build_torch_yolox, calibrate
from msdet.porting.report import first_failure
from tests.support.torch_reference import require_yolox

pytestmark = pytest.mark.torch


@pytest.fixture(scope="module")
def torch_nano():
    require_yolox()
    return calibrate(build_torch_yolox(load_model_config("yolox_nano"), 3), img_size=128)


@pytest.mark.slow
def test_cli_converts_release_checkpoint(tmp_path, torch_nano, capsys):
    import torch

    src, dst = tmp_path / "nano.pth", tmp_path / "out" / "nano.ckpt"
    torch.save({"model": torch_nano.state_dict(), "start_epoch": 300}, src)
    assert main(["--model", "yolox_nano", "--src", str(src), "--dst", str(dst)]) == 0
    assert "538 tensors" in capsys.readouterr().out
    net = build_model(load_model_config("yolox_nano"), 3)  # 3 classes inferred from the head
    load_weights(net, str(dst))
    net.set_train(False)
    ms.set_context(mode=ms.PYNATIVE_MODE)
    try:
        x = np.random.default_rng(1).uniform(0, 255, (1, 3, 128, 128)).astype(np.float32)
        assert first_failure(compare_modules(torch_nano, net, x)) is None
    finally:
        ms.set_context(mode=ms.GRAPH_MODE)


@pytest.mark.slow  # a 255 MB checkpoint written, read and converted
def test_cli_converts_darknet53_release_checkpoint(tmp_path, capsys):
    """YOLOX-Darknet53 (exp/default/yolov3.py) converts 1:1: every PyTorch key has its
    parameter, and the converted network computes what the original does, module by module."""
    require_yolox()
    import torch

    cfg = load_model_config("yolox_darknet53")
    original = calibrate(build_torch_yolox(cfg, 3), img_size=64)
    src, dst = tmp_path / "darknet53.pth", tmp_path / "darknet53.ckpt"
    torch.save({"model": original.state_dict(), "start_epoch": 300}, src)
    assert main(["--model", "yolox_darknet53", "--src", str(src), "--dst", str(dst)]) == 0
    # 528 state_dict entries less the 85 num_batches_tracked counters.
    assert "443 tensors" in capsys.readouterr().out
    net = build_model(cfg, 3)
    load_weights(net, str(dst))
    net.set_train(False)
    ms.set_context(mode=ms.PYNATIVE_MODE)
    try:
        x = np.random.default_rng(1).uniform(0, 255, (1, 3, 64, 64)).astype(np.float32)
        rows = compare_modules(original, net, x)
    finally:
        ms.set_context(mode=ms.GRAPH_MODE)
    assert first_failure(rows) is None and len(rows) == 5 + 4 + 18 + 1


def test_bare_and_data_parallel_state_dicts_are_accepted(torch_nano):
    sd = torch_nano.state_dict()
    assert extract_state_dict(sd) is sd
    ddp = {f"module.{k}": v for k, v in sd.items()}
    assert set(extract_state_dict({"model": ddp})) == set(sd)


def test_mismatches_are_named_and_nothing_is_written(tmp_path, torch_nano, capsys):
    import torch

    sd = dict(torch_nano.state_dict())
    sd["head.extra_conv.weight"] = torch.zeros(3)
    sd["head.stems.0.conv.weight"] = torch.zeros(64, 1, 1, 1)
    del sd["head.obj_preds.2.bias"]
    src, dst = tmp_path / "bad.pth", tmp_path / "bad.ckpt"
    torch.save(sd, src)
    assert main(["--model", "yolox_nano", "--src", str(src), "--dst", str(dst)]) == 1
    err = capsys.readouterr().err
    assert "head.extra_conv.weight" in err
    assert "head.stems.0.conv.weight: (64, 1, 1, 1) vs (64, 64, 1, 1)" in err
    assert "head.obj_preds.2.bias" in err
    assert not dst.exists() and not (tmp_path / "bad.partial.ckpt").exists()


def test_wrong_architecture_is_refused(torch_nano):
    net = build_model(load_model_config("yolox_tiny"), 3)
    expected = {k: tuple(p.shape) for k, p in net.parameters_and_names()}
    with pytest.raises(ConversionError, match="shape mismatches"):
        convert_state_dict(torch_nano.state_dict(), expected)


def test_cspdarknet_weights_are_refused_by_darknet53(torch_nano):
    """A nano checkpoint given --model yolox_darknet53: the keys of each network that the
    other lacks are named (PAFPN's and YOLOFPN's blocks)."""
    net = build_model(load_model_config("yolox_darknet53"), 3)
    expected = {k: tuple(p.shape) for k, p in net.parameters_and_names()}
    with pytest.raises(ConversionError) as err:
        convert_state_dict(torch_nano.state_dict(), expected)
    message = str(err.value)
    assert "backbone.C3_p4.conv1.conv.weight" in message  # nano's, no Darknet53 parameter
    assert "backbone.out1.0.conv.weight" in message  # Darknet53's, missing from nano


# A checkpoint that would run code is refused before anything runs: the payload's side
# effect is checked absent in tests/models/test_torch_pickle.py (the reader's own tests).


def test_class_names_from_a_file_a_list_or_cocos_by_default(tmp_path):
    from msdet.models.convert_pytorch import ConversionError, read_class_names
    from msdet.models.description import COCO_CATEGORY_IDS, COCO_NAMES

    names, ids, origin = read_class_names(None, 80)
    assert names == list(COCO_NAMES) and ids == list(COCO_CATEGORY_IDS) and "COCO" in origin
    assert names[:3] == ["person", "bicycle", "car"] and ids[-1] == 90 and len(set(ids)) == 80
    assert read_class_names(None, 3)[0] == ["class0", "class1", "class2"]
    listing = tmp_path / "names.txt"
    listing.write_text("cat\ndog\n\n")
    assert read_class_names(str(listing), 2)[:2] == (["cat", "dog"], [0, 1])
    assert read_class_names("cat, dog,bird", 3)[0] == ["cat", "dog", "bird"]
    with pytest.raises(ConversionError, match="2 class names for a 3-class checkpoint"):
        read_class_names(str(listing), 3)


def test_an_existing_dst_is_replaced_only_with_force(tmp_path, capsys):
    """Issue: the converter overwrote an existing --dst without a word."""
    from msdet.models.convert_pytorch import main

    dst = tmp_path / "mine.ckpt"
    dst.write_bytes(b"a checkpoint of its own")
    args = ["--model", "yolox_nano", "--src", str(tmp_path / "none.pth"), "--dst", str(dst)]
    assert main(args) == 1
    assert f"--dst {dst} exists: pass --force to replace it" in capsys.readouterr().err
    assert main([*args, "--force"]) == 1  # past the check: the missing .pth stops it
    assert "PyTorch checkpoint not found" in capsys.readouterr().err
    assert dst.read_bytes() == b"a checkpoint of its own"
