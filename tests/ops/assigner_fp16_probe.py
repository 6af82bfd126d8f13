"""SimOTA's assignment on real batches in float32 and with its cost TopK and ArgMin in float16
(the 910A, whose TopK kernels take float16 only, runs it so under allow_fp32_to_fp16), printed
as JSON: per batch the anchors matched in either run and those matched to the same ground
truth in both (``python -m tests.ops.assigner_fp16_probe DATA_DIR [BATCHES]``).

Real batches: msdet's shapes set at 320 px through the training pipeline (mosaic and all), and
YOLOX-nano's raw outputs for them at random initialisation."""

from __future__ import annotations

import hashlib
import json
import sys

import mindspore as ms
import numpy as np


def assign(assigner_module, raw, grids, strides, targets, mask, num_classes, float16_topk):
    """fg [B, A] and matched ground truth [B, A] of SimOTA on MindSpore's operators, in
    PyNative mode, its TopK and ArgMin given float16 inputs where ``float16_topk``."""
    from msdet.ops.boxes import decode_boxes

    ops = assigner_module.ops
    real_topk, real_argmin = ops.topk, ops.argmin

    def narrowed_topk(x, k, dim=-1, *args, **kwargs):
        values, index = real_topk(x.astype(ms.float16), k, dim, *args, **kwargs)
        return values.astype(ms.float32), index

    def narrowed_argmin(x, *args, **kwargs):
        return real_argmin(x.astype(ms.float16), *args, **kwargs)

    ops.topk = narrowed_topk if float16_topk else real_topk
    ops.argmin = narrowed_argmin if float16_topk else real_argmin
    try:
        boxes = decode_boxes(ms.Tensor(raw[..., :4]), ms.Tensor(grids), ms.Tensor(strides))
        fg, matched_gt, _, _ = assigner_module.SimOTAAssigner(num_classes)(
            boxes, ms.Tensor(raw[..., 4]), ms.Tensor(raw[..., 5:]), ms.Tensor(grids),
            ms.Tensor(strides), ms.Tensor(targets[..., 1:]), ms.Tensor(targets[..., 0]),
            ms.Tensor(mask),
        )  # fmt: skip
    finally:
        ops.topk, ops.argmin = real_topk, real_argmin
    return fg.asnumpy() > 0.5, matched_gt.asnumpy()


def main(data_dir: str, batches: int) -> list[dict]:
    from msdet.common.config import load_config
    from msdet.engine.runtime.process import setup_runtime

    img, batch = 320, 8
    cfg = load_config("tool", ["runtime=cpu", "runtime.cpu_kernels=native", f"data.img_size=[{img},{img}]",
                               f"data.num_train={batch * batches}", "data.num_val=2",
                               f"data.cache_dir={data_dir}"])  # fmt: skip
    setup_runtime(cfg.runtime, data_dir)
    from msdet.data.build import build_sources
    from msdet.data.pipeline import AugmentParams, TrainSamples
    from msdet.models.yolox import build_model
    from msdet.ops import assigner

    train, _ = build_sources(cfg.data)
    samples = TrainSamples(train, (img, img), int(cfg.data.max_objects),
                           AugmentParams.from_config(cfg.data.aug), 0, 5, 1)  # fmt: skip
    ms.set_seed(0)
    net = build_model(cfg.model, train.num_classes)
    net.set_train(True)
    out = []
    for b in range(batches):
        items = [samples[b * batch + i] for i in range(batch)]
        images, targets, mask = (np.stack(parts) for parts in zip(*items))
        chw = ms.Tensor(images.transpose(0, 3, 1, 2).astype(np.float32))
        raw, grids, strides = (t.asnumpy() for t in net(chw))
        ms.set_context(mode=ms.PYNATIVE_MODE)
        runs = [assign(assigner, raw, grids, strides, targets, mask, train.num_classes, f16)
                for f16 in (False, True)]  # fmt: skip
        ms.set_context(mode=ms.GRAPH_MODE)
        (fg32, gt32), (fg16, gt16) = runs
        either = fg32 | fg16
        same = fg32 & fg16 & (gt32 == gt16)
        digest = hashlib.sha1(fg32.tobytes() + np.where(fg32, gt32, -1).tobytes()).hexdigest()
        out.append({"either": int(either.sum()), "same": int(same.sum()), "fg32": int(fg32.sum()),
                    "objects": int(mask.sum()), "float32": digest[:12]})  # fmt: skip
    return out


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 4)))
