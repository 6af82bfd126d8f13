"""The self-test's reference side: YOLOX-nano's weights, the fixed inputs and every
reference figure, computed on the host CPU in PyNative mode by the child process that
``python -m msdet.tools.selftest --reference DIR`` starts."""

from __future__ import annotations

import os

import numpy as np

from msdet.engine.runtime.mindspore_compat import write_parameter
from msdet.tools.selftest.cases import (
    NMS_CANDIDATES,
    NMS_CLASSES,
    REFERENCE_FILE,
    WEIGHTS_FILE,
    compose_config,
    inputs,
    nano,
    one_step,
    train_step_cell,
)
from msdet.tools.selftest.evaluation import host_evaluation


def make_reference(out_dir: str, size: int) -> None:
    """Weights, inputs and every reference figure, computed on the CPU in PyNative mode."""
    from msdet.engine.runtime.process import setup_runtime

    cfg = compose_config(
        ["runtime.device=CPU", "runtime.mode=pynative", "runtime.cpu_kernels=native"]
    )
    setup_runtime(cfg.runtime, out_dir)
    import mindspore as ms

    batch = inputs(size)
    net = nano(cfg)
    # BatchNorm statistics of one real batch (momentum 0: the batch's own), so that the
    # inference outputs differ from anchor to anchor.
    bns = [c for _, c in net.cells_and_names() if isinstance(c, ms.nn.BatchNorm2d)]
    for bn in bns:
        bn.momentum = 0.0
    net.set_train(True)
    net(ms.Tensor(batch["images"]))
    for bn in bns:
        bn.momentum = 0.97
    # Class and objectness biases at 0 instead of YOLOX's prior (probabilities ~0.01): scores
    # spread over (0, 1), so that probabilities are compared where they are not all alike
    # and the evaluation keeps detections above eval.conf_thresh.
    for param in net.trainable_params():
        if param.name.startswith(("head.cls_preds.", "head.obj_preds.")) and "bias" in param.name:
            param.set_data(ms.Tensor(np.zeros(param.shape, np.float32)))
    weights = os.path.join(out_dir, WEIGHTS_FILE)
    ms.save_checkpoint(net, weights)
    net.set_train(False)
    from msdet.engine.runtime.amp import mixed_precision
    from msdet.engine.runtime.process import Runtime

    figures = {}
    cpu = Runtime(device="CPU", mode="pynative", amp_level="O0", sink=False, sink_size=-1)
    for amp in ("O0", "O2"):  # the device's side is compared with the same AMP level here
        infer = nano(cfg, weights)
        infer.set_train(False)
        if amp != "O0":
            infer = mixed_precision(infer, amp)
            infer.set_train(False)
        figures[f"forward_{amp}"] = infer(ms.Tensor(batch["images"])).asnumpy().astype(np.float32)
        step = train_step_cell(cfg, cpu, weights, amp)
        write_parameter(step.scale, 1.0)  # as check_train_step does
        figures[f"loss_terms_{amp}"], figures[f"update_norm_{amp}"] = one_step(step, batch)
    from msdet.ops.nms import HostNMS

    dets, counts = HostNMS(
        NMS_CLASSES, conf_thresh=0.0, pre_nms_topk=NMS_CANDIDATES, max_det=NMS_CANDIDATES
    )(ms.Tensor(batch["nms_predictions"]))
    figures.update(host_evaluation(weights, out_dir))
    np.savez(
        os.path.join(out_dir, REFERENCE_FILE),
        **figures,
        nms_dets=dets,
        nms_counts=counts,
        **batch,
    )
