"""The deployable detector: YOLOX in inference mode plus optional in-graph NMS.

eval.py, predict.py and export.py share it: :class:`InferenceNet` puts
:class:`~msdet.ops.nms.BatchedNMS` (built from the ``eval`` config by :func:`build_nms`)
after the network.
"""

from __future__ import annotations

import logging
from typing import Any

from mindspore import nn

from msdet.ops.cpu_kernels import NATIVE, CpuKernels
from msdet.ops.nms import BatchedNMS, HostNMS

log = logging.getLogger(__name__)


def build_nms(
    eval_cfg: Any,
    num_classes: int,
    on_host: bool = False,
    conf_thresh: float | None = None,
    kernels: CpuKernels = NATIVE,
    max_boxes: int | None = None,
) -> BatchedNMS | HostNMS:
    """:class:`BatchedNMS` from the ``eval`` config group (conf_thresh, nms_iou, ...), or
    with ``on_host`` (``Runtime.host_nms``: the chip's NMSWithMask is float16 only) the
    same post-processing with the suppression on the host (:class:`ops.nms.HostNMS`).
    ``conf_thresh`` replaces ``eval.conf_thresh`` (predict.py: ``predict.conf``);
    ``kernels`` says whether the suppression runs on msdet's CPU kernel; ``max_boxes``
    (``Runtime.nms_max_boxes``) is how many candidates the device's ``NMSWithMask`` takes
    exactly: ``eval.pre_nms_topk`` above it is an error naming both."""
    if not on_host and max_boxes is not None and int(eval_cfg.pre_nms_topk) > max_boxes:
        raise ValueError(
            f"eval.pre_nms_topk={int(eval_cfg.pre_nms_topk)} is more candidates than this "
            f"device's NMSWithMask computes exactly ({max_boxes}): set eval.pre_nms_topk<={max_boxes}"
        )
    settings = {
        "conf_thresh": float(eval_cfg.conf_thresh if conf_thresh is None else conf_thresh),
        "iou_thresh": float(eval_cfg.nms_iou),
        "pre_nms_topk": int(eval_cfg.pre_nms_topk),
        "max_det": int(eval_cfg.max_det),
        "class_agnostic": bool(eval_cfg.class_agnostic),
    }
    if on_host:
        return HostNMS(num_classes, **settings)
    return BatchedNMS(num_classes, **settings, library=kernels.library_for("nms"))


class InferenceNet(nn.Cell):
    """A detector in inference mode, optionally followed by NMS.

    ``construct(images [B, 3, H, W])`` returns ``(dets [B, max_det, 6], counts [B])`` with
    ``nms`` (see :class:`ops.nms.BatchedNMS`), else the decoded predictions
    ``[B, A, 5 + C]`` (cx, cy, w, h, objectness, class probabilities).
    """

    def __init__(self, detector: nn.Cell, nms: BatchedNMS | None = None):
        # No prefix: wrapping must not rename the detector's parameters ("detector.")
        # so that weights can still be loaded into it by name afterwards.
        super().__init__(auto_prefix=False)
        self.detector = detector
        self.with_nms = nms is not None
        # A Cell in both cases keeps the attribute's type fixed for the graph compiler;
        # ``with_nms`` is a constant there, so the unused branch is compiled away.
        self.nms = nms if nms is not None else nn.Identity()
        self.set_train(False)

    def construct(self, images):
        preds = self.detector(images)
        if self.with_nms:
            return self.nms(preds)
        return preds
