"""Single-image inference for predict.py: letterbox, detect, NMS, draw, records."""

from __future__ import annotations

import logging
import os
from typing import Any

import cv2
import mindspore as ms
import numpy as np

from data.build import dataset_classes
from data.image_io import ImageReadError, read_image
from data.transforms import letterbox
from data.visualize import draw_boxes
from engine.cli import apply_described_size
from engine.evaluator import detections_in_image, prediction_records
from models.inference import InferenceNet, build_nms, load_described_detector

log = logging.getLogger("predict")


class Predictor:
    """A checkpoint ready to detect: ``predict_file(path, out_dir)`` -> records or None.

    The network and its class names come from the checkpoint's description. A checkpoint
    written before descriptions existed is built from ``cfg.model``; its class names come
    from a dataset named on the command line (``data=``, ``data.root=``, ``data.classes=``:
    read from its config or annotation file, never built), else they are numbered.
    """

    def __init__(self, cfg: Any, host_nms: bool = False, typed: dict[str, str] | None = None):
        typed = typed or {}
        detector, used_ema, description = load_described_detector(cfg.ckpt, cfg.model, typed)
        apply_described_size(cfg, description, typed)
        self.img_size = tuple(int(v) for v in cfg.eval.img_size)
        self.num_classes = detector.num_classes
        self.net = InferenceNet(detector)
        self.nms = build_nms(cfg.eval, self.num_classes, on_host=host_nms)
        if description is not None:
            self.class_names, self.category_ids = description.class_names, description.category_ids
        else:
            self.class_names, self.category_ids = self._classes_without_description(cfg, typed)
        log.info(
            "%s: %s%s weights, %d classes (%s)",
            cfg.ckpt,
            description.model["name"] + " " if description else "",
            "EMA" if used_ema else "raw",
            self.num_classes,
            ", ".join(self.class_names[:5]) + (", ..." if self.num_classes > 5 else ""),
        )

    def _classes_without_description(self, cfg: Any, typed: dict) -> tuple[list[str], list[int]]:
        numbered = [f"class{i}" for i in range(self.num_classes)], list(range(self.num_classes))
        if not any(k in ("data", "data.root", "data.classes") for k in typed):
            log.warning(
                "%s has no description (written before msdet described its checkpoints): "
                "classes are numbered; name a dataset (data=...) for its class names",
                cfg.ckpt,
            )
            return numbered
        try:
            names, ids = dataset_classes(cfg.data)
        except ValueError as err:
            log.warning("no class names (%s): classes are numbered", err)
            return numbered
        if len(names) != self.num_classes:
            log.warning(
                "data=%s has %d classes, the checkpoint %d: classes are numbered",
                cfg.data.name,
                len(names),
                self.num_classes,
            )
            return numbered
        return names, ids

    def predict_file(self, path: str, out_dir: str) -> list[dict[str, Any]] | None:
        """Detect in one image; writes the annotated copy into ``out_dir``.

        Returns the prediction records, or None (with a warning) for an unreadable image.
        """
        try:
            img = read_image(path)
        except ImageReadError as err:
            log.warning("skipped: %s", err)
            return None
        boxed, scale = letterbox(img, self.img_size)
        batch = np.ascontiguousarray(boxed.transpose(2, 0, 1)[None], dtype=np.float32)
        dets, counts = self.nms(self.net(ms.Tensor(batch)))
        dets, counts = (d.asnumpy() if hasattr(d, "asnumpy") else d for d in (dets, counts))
        hw = img.shape[:2]
        records = prediction_records(
            dets[0], counts[0], scale, hw, self.category_ids, self.class_names
        )
        xyxy, scores, labels = detections_in_image(dets[0], counts[0], scale, hw)
        drawn = draw_boxes(img, xyxy, labels, self.class_names, scores)
        cv2.imwrite(os.path.join(out_dir, os.path.basename(path)), drawn)
        return records
