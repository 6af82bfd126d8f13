"""Fine-tuning as a user does it: an 80-class checkpoint onto the 3-class shapes set, frozen
backbone, stopped and resumed; the frozen tensors never move."""

from __future__ import annotations

import json
import os
from pathlib import Path

import mindspore as ms
import numpy as np
import pytest

from msdet.models.yolox import build_model, load_model_config
from tests.support.tiny_run import run_entry

pytestmark = pytest.mark.slow


def _last(run_dir) -> dict[str, np.ndarray]:
    params = ms.load_checkpoint(os.path.join(run_dir, "checkpoints", "last.ckpt"))
    return {k: v.asnumpy() for k, v in params.items() if not k.startswith("msdet_")}


def test_80_class_checkpoint_fine_tunes_with_frozen_backbone_and_resume_keeps_it(
    tmp_path, cache_dir
):
    net = build_model(load_model_config("yolox_nano"), 80)
    pretrained = tmp_path / "coco80.ckpt"
    ms.save_checkpoint(net, str(pretrained))
    start = {p.name: p.asnumpy().copy() for p in net.get_parameters()}
    frozen = [k for k in start if k.startswith("backbone.backbone.")]

    run_dir = tmp_path / "finetune"
    common = [
        "train.epochs=2",
        "train.no_aug_epochs=1",
        "train.max_steps_per_epoch=3",
        "train.tensorboard=false",
        f"train.pretrained={pretrained}",
    ]
    out = run_entry(
        "train.py", run_dir, cache_dir, *common, "train.freeze=backbone", "train.stop_at_epoch=1"
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    log = Path(run_dir, "train.log").read_text()
    assert "re-initialised     6  head.cls_preds.0.weight" in log
    assert f"loaded           {len(start) - 6}  backbone." in log
    assert "train.freeze=backbone: " in log and "parameters frozen" in log
    first = _last(run_dir)
    assert int(ms.load_checkpoint(str(run_dir / "checkpoints" / "last.ckpt"))["msdet_freeze"]) == 1

    # Resumed without repeating train.freeze: the checkpoint's freeze is kept.
    out = run_entry("train.py", run_dir, cache_dir, *common, "train.resume=auto")
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "resuming keeps backbone" in Path(run_dir, "train.log").read_text()
    final = _last(run_dir)
    for name in frozen:  # raw weights, BN statistics and their EMA: bit for bit
        assert final[name].tobytes() == start[name].tobytes(), name
        assert final["ema." + name].tobytes() == start[name].tobytes(), name
        assert f"moments.{name}" not in final and f"accum.{name}" not in final
    trained = [k for k in start if k.startswith("head.") and ".cls_preds." not in k]
    assert any(not np.array_equal(final[k], first[k]) for k in trained)  # epoch 2 trained
    assert final["head.cls_preds.0.weight"].shape[0] == 3

    metrics = json.loads((run_dir / "metrics.json").read_text())
    # Every class has val ground truth (no -1), and pycocotools' mAP is the mean over them.
    for key, mean_key in (("per_class_AP50", "mAP50"), ("per_class", "mAP")):
        per_class = metrics[key]
        assert set(per_class) == {"disc", "rectangle", "triangle"}
        assert all(v >= 0.0 for v in per_class.values()), per_class
        assert sum(per_class.values()) / 3 == pytest.approx(metrics[mean_key], abs=1e-12)
