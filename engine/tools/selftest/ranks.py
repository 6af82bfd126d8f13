"""The self-test's collective checks, one process per rank (``python -m engine.selftest
--cards N`` starts it through ``scripts/run_distributed_train.sh N``).

Every rank all-reduces ``rank + 1`` (the sum must be ``N (N + 1) / 2``) and evaluates its
shard of a small synthetic val set with YOLOX-nano's seeded initial weights; rank 0 also
evaluates the whole set alone and checks that the gathered detections are its own, then
writes ``<run dir>/selftest_ranks.json``.
"""

from __future__ import annotations

import json
import os
import sys

import numpy as np

from msdet.common.config import ROOT
from msdet.engine.cli import Run, run_command

if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

# A small val set: 7 images (an odd count, so one rank's shard is padded), 64 px.
DATA = ("data.num_train=4", "data.num_val=7", "data.img_size=[64,64]", "eval.img_size=[64,64]")
RESULT = "selftest_ranks.json"


def main(run: Run) -> None:
    cfg = run.cfg
    from omegaconf import open_dict

    from msdet.engine.runtime.process import setup_runtime

    with open_dict(cfg):
        for item in DATA:
            key, value = item.split("=", 1)
            group, name = key.split(".")
            cfg[group][name] = json.loads(value)
        cfg.eval.conf_thresh = 0.0  # untrained weights: keep every candidate, so there is output
        cfg.eval.batch_size = 2
    rt = setup_runtime(cfg.runtime, run.dir)
    import mindspore as ms
    from mindspore import nn, ops

    from msdet.data.build import build_sources
    from msdet.data.pipeline import build_eval_dataset
    from msdet.engine.evaluation.loop import RankGather, evaluate_on_dataset
    from msdet.models.inference import InferenceNet, build_nms
    from msdet.models.yolox import build_model

    class Sum(nn.Cell):
        def __init__(self):
            super().__init__()
            self.allreduce = ops.AllReduce()

        def construct(self, x):
            return self.allreduce(x)

    total = float(Sum()(ms.Tensor(np.float32(rt.rank + 1))).asnumpy())
    expected = rt.world_size * (rt.world_size + 1) / 2

    _, val = build_sources(cfg.data)
    net = build_model(cfg.model, val.num_classes, rt.kernels)
    net.set_train(False)
    detector, nms = (
        InferenceNet(net),
        build_nms(cfg.eval, val.num_classes, on_host=rt.host_nms, kernels=rt.kernels),
    )
    out_dir = rt.run_dir if rt.is_main else None
    shard = build_eval_dataset(cfg.data, val, cfg.eval.img_size, 2, rt.rank, rt.world_size)
    sharded, _ = evaluate_on_dataset(
        detector, nms, shard, val, out_dir, gather=RankGather(), verbose=False
    )
    if not rt.is_main:
        return
    with open(os.path.join(rt.run_dir, "detections.json"), encoding="utf-8") as f:
        gathered = json.load(f)
    whole = build_eval_dataset(cfg.data, val, cfg.eval.img_size, 2)
    single_dir = os.path.join(rt.run_dir, "single")
    os.makedirs(single_dir, exist_ok=True)
    single, _ = evaluate_on_dataset(detector, nms, whole, val, single_dir, verbose=False)
    with open(os.path.join(single_dir, "detections.json"), encoding="utf-8") as f:
        alone = json.load(f)
    figures = {
        "ranks": rt.world_size,
        "allreduce": total,
        "allreduce_expected": expected,
        "allreduce_ok": total == expected,
        "detections": len(alone),
        "sharded_equals_single": gathered == alone and len(alone) > 0,
        "images": [sharded["images"], single["images"]],
    }
    with open(os.path.join(rt.run_dir, RESULT), "w", encoding="utf-8") as f:
        json.dump(figures, f, indent=2)


if __name__ == "__main__":
    run_command("selftest", main)
