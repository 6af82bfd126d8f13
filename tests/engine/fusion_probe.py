"""YOLOX-nano's training step at 64 px under a ``runtime.fusion`` setting: run as
``python -m tests.engine.fusion_probe FUSION`` (from any working folder) it prints the
losses of three steps on a fixed synthetic batch as JSON (shared by
tests/engine/test_fusion.py)."""

from __future__ import annotations

import json
import os
import sys

from hydra import compose, initialize_config_dir

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main(fusion: str) -> None:
    from bench.common import synthetic_batch
    from engine.cli import prepare_config
    from engine.runtime import setup_runtime

    with initialize_config_dir(config_dir=os.path.join(ROOT, "configs"), version_base="1.3"):
        cfg = prepare_config(
            compose(
                "config",
                overrides=[
                    "runtime=cpu",
                    f"runtime.fusion={fusion}",
                    "data.img_size=64",
                    "data.max_objects=8",
                    "train.batch_size=2",
                ],
            )
        )
    rt = setup_runtime(cfg.runtime, ".")
    import mindspore as ms

    from engine.optim import yolox_lr_schedule
    from engine.trainer import build_train_step
    from models.loss import YOLOXLoss
    from models.yolox import build_model

    ms.set_seed(0)
    net = build_model(cfg.model, 3)
    step = build_train_step(net, YOLOXLoss(3), yolox_lr_schedule(0.01, 10, 1, 0, 0), cfg.train, rt)
    images, targets, mask = (ms.Tensor(a) for a in synthetic_batch(2, 64, 3, 8, 3))
    losses = [float(step(images, targets, mask)[0].asnumpy()) for _ in range(3)]
    print(json.dumps({"losses": losses, "flags": os.environ.get("MS_DEV_GRAPH_KERNEL_FLAGS")}))


if __name__ == "__main__":
    main(sys.argv[1])
