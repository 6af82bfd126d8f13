"""The detections row: msdet's ``BatchedNMS`` against YOLOX's ``postprocess``."""

from __future__ import annotations

import numpy as np

from msdet.porting.forward import to_numpy
from msdet.porting.report import ModuleDiff, diff

# Post-processing as msdet's eval defaults (configs/config.yaml) and YOLOX's evaluation.
NMS_CONF, NMS_IOU, NMS_MAX_DET = 0.01, 0.65, 100


def _canonical(rows: np.ndarray) -> np.ndarray:
    """Detections in a fixed order (score descending, then class and box): NMS outputs of
    equal sets then compare row by row, whatever order ties come out in."""
    keys = [rows[:, i] for i in (3, 2, 1, 0, 5)] + [-rows[:, 4]]
    return rows[np.lexsort(keys)]


def yolox_detections(decoded: np.ndarray, num_classes: int, conf: float, iou: float):
    """YOLOX's ``postprocess`` per image as ``[n, 6]`` (x1, y1, x2, y2, score, class)."""
    import torch
    from yolox.utils import postprocess

    # postprocess rewrites its input in place (centre boxes -> corners): give it a copy.
    outs = postprocess(torch.from_numpy(decoded.copy()), num_classes, conf, iou)
    result = []
    for out in outs:
        if out is None:
            result.append(np.zeros((0, 6), np.float32))
            continue
        o = to_numpy(out)
        result.append(np.concatenate((o[:, :4], o[:, 4:5] * o[:, 5:6], o[:, 6:7]), 1))
    return result


def compare_detections(
    decoded: np.ndarray,
    num_classes: int,
    atol: float,
    rtol: float,
    label: str,
    conf: float = NMS_CONF,
    iou: float = NMS_IOU,
    max_det: int = NMS_MAX_DET,
) -> ModuleDiff:
    """msdet's ``BatchedNMS`` against YOLOX's ``postprocess`` on the same decoded predictions.

    Both keep the ``max_det`` best detections per image (YOLOX keeps all; its list is cut to
    the same length). ``BatchedNMS`` takes the ``pre_nms_topk`` best candidates, set to the
    most one Ascend NMS call allows: greedy NMS keeps the same boxes among them.
    """
    import mindspore as ms

    from msdet.ops.nms import ASCEND_MAX_NMS_BOXES, BatchedNMS

    topk = min(decoded.shape[1], ASCEND_MAX_NMS_BOXES)
    nms = BatchedNMS(num_classes, conf, iou, pre_nms_topk=topk, max_det=max_det)
    dets, counts = (t.asnumpy() for t in nms(ms.Tensor(decoded)))
    ref = yolox_detections(decoded, num_classes, conf, iou)
    ours_all, ref_all, notes = [], [], []
    for b, r in enumerate(ref):
        r = r[np.argsort(-r[:, 4], kind="stable")][:max_det]
        ours_all.append(_canonical(dets[b, : counts[b]]))
        ref_all.append(_canonical(r))
        notes.append(f"{int(counts[b])}/{len(r)}")
    row = diff(label, np.concatenate(ours_all), np.concatenate(ref_all), atol, rtol)
    row.note = f"detections per image msdet/original: {' '.join(notes)} (conf {conf}, iou {iou})"
    return row
