"""The self-test's checks on several ranks, one process per rank (``python -m
msdet.tools.selftest --cards N`` starts it through ``scripts/run_distributed_train.sh
N`` after its single-card process has exited, so that rank 0 is the only process on card 0).

Every rank

- all-reduces ``rank + 1`` (the sum must be ``N (N + 1) / 2``);
- runs msdet's training step (the gradient reducer, the all-reduced overflow flag, the
  BatchNorms synced over the ranks where MindSpore has SyncBatchNorm: Ascend) from the CPU
  reference's weights on the reference batch, so that the global batch is N copies of it:
  YOLOX normalises each rank's loss by that rank's own foreground count, and only equal
  shares make N cards' step the same as one card's on the global batch. The loss terms, the
  foreground count and the update must equal the host's one-card step (what the single-card
  check compares with) and every rank must hold the same weights after it. Then rank 1
  alone overflows (a loss scale of 2^127): every rank must skip that step and keep its
  weights. That SyncBatchNorm averages *different* shares is not shown (equal shares);
- evaluates its shard of a small generated val set with YOLOX-nano's seeded initial weights;
  rank 0 also evaluates the whole set alone: the gathered detections must be its own.

Rank 0 writes the report lines to ``<run dir>/selftest_ranks.json``.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict

import numpy as np

from msdet.engine.cli import Run, run_command
from msdet.engine.runtime.mindspore_compat import write_parameter
from msdet.tools.selftest.cases import (
    EVAL_DATA,
    WEIGHTS_FILE,
    Check,
    load_reference,
    one_step,
    set_up_device,
    train_step_cell,
)
from msdet.tools.selftest.device import RANKS_RESULT, WORK_VAR

OVERFLOW_SCALE = 2.0**127  # loss x scale is inf in float32 for any loss above 2


def flat_weights(step) -> np.ndarray:
    return np.concatenate([p.asnumpy().ravel() for p in step.optimizer.parameters])


def distributed_step(cfg, rt, ref: dict, weights: str, gather) -> tuple[Check, Check]:
    """The N-rank training step against one card's, and the overflow of one rank."""
    import mindspore as ms

    from msdet.tools.selftest.checks import compare_step

    step = train_step_cell(cfg, rt, weights, rt.amp_level, sync_bn=rt.sync_bn,
                           skip_nonfinite=True)  # fmt: skip
    write_parameter(step.scale, 1.0)
    terms, norm = one_step(step, ref)
    after = flat_weights(step)
    batch = [ms.Tensor(ref[k]) for k in ("images", "targets", "mask")]
    write_parameter(step.scale, OVERFLOW_SCALE if rt.rank == 1 else 1.0)
    out = step(*batch)
    skipped = bool(out[8].asnumpy())
    moved = not np.array_equal(flat_weights(step), after)
    mine = np.array([norm, float(after.astype(np.float64).sum()), skipped, moved], np.float32)
    every = gather(mine[None])[0]  # [ranks, 4]
    same_weights = bool((every[:, :2] == every[0, :2]).all())
    check = compare_step(f"{rt.world_size} ranks: training step vs one card's", terms, norm,
                         rt, ref)  # fmt: skip
    check.figures.update(
        ranks_update_norms=every[:, 0].tolist(),
        ranks_equal_weights=same_weights,
        sync_bn=rt.sync_bn,
        graphs=1,
    )
    if not same_weights:
        check.status = "failed"
        check.note = "the ranks hold different weights after the step"
    elif not rt.sync_bn:
        check.note = "BatchNorm per rank: MindSpore has SyncBatchNorm on Ascend only"
    overflow_ok = bool(every[:, 2].all()) and not bool(every[:, 3].any())
    overflow = Check(
        f"{rt.world_size} ranks: one rank overflows, every rank skips",
        "passed" if overflow_ok else "failed",
        {
            "ranks_skipped": every[:, 2].astype(bool).tolist(),
            "ranks_weights_moved": every[:, 3].astype(bool).tolist(),
            "float_status_register": rt.float_status,
        },
    )
    return check, overflow


def main(run: Run) -> None:
    cfg = run.cfg
    from omegaconf import open_dict

    with open_dict(cfg):
        for item in EVAL_DATA:
            key, value = item.split("=", 1)
            group, name = key.split(".")
            cfg[group][name] = json.loads(value)
        cfg.eval.conf_thresh = 0.0  # untrained weights: keep every candidate, so there is output
        cfg.eval.batch_size = 2
    rt = set_up_device(cfg.runtime, run.dir)  # the loop's mode and data-parallel context too
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

    lines: list[Check] = []
    total = float(Sum()(ms.Tensor(np.float32(rt.rank + 1))).asnumpy())
    expected = rt.world_size * (rt.world_size + 1) / 2
    lines.append(Check(f"{rt.world_size} ranks: all-reduce", "passed" if total == expected else "failed",
                       {"allreduce": total, "expected": expected, "graphs": 1}))  # fmt: skip

    gather = RankGather()
    work = os.environ[WORK_VAR]
    lines += distributed_step(cfg, rt, load_reference(work), os.path.join(work, WEIGHTS_FILE),
                              gather)  # fmt: skip

    _, val = build_sources(cfg.data)
    net = build_model(cfg.model, val.num_classes, rt.kernels)
    net.set_train(False)
    detector = InferenceNet(net)
    nms = build_nms(cfg.eval, val.num_classes, on_host=rt.host_nms, kernels=rt.kernels,
                    max_boxes=rt.nms_max_boxes)  # fmt: skip
    out_dir = rt.run_dir if rt.is_main else None
    shard = build_eval_dataset(cfg.data, val, cfg.eval.img_size, 2, rt.rank, rt.world_size)
    sharded, _ = evaluate_on_dataset(
        detector, nms, shard, val, out_dir, gather=gather, verbose=False
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
    same = gathered == alone and len(alone) > 0
    lines.append(Check(f"{rt.world_size} ranks: sharded evaluation vs one rank's",
                       "passed" if same else "failed",
                       {"detections": len(alone), "gathered": len(gathered),
                        "images": [sharded["images"], single["images"]], "graphs": 3}))  # fmt: skip
    with open(os.path.join(rt.run_dir, RANKS_RESULT), "w", encoding="utf-8") as f:
        json.dump([asdict(c) for c in lines], f, indent=2, default=str)


if __name__ == "__main__":
    run_command("selftest", main)
