"""Single-image inference for predict.py: letterbox, detect, NMS, draw, records."""

from __future__ import annotations

import logging
import os
from typing import Any

import cv2
import mindspore as ms
import numpy as np

from data.image_io import ImageReadError, read_image
from data.transforms import letterbox
from data.visualize import draw_boxes
from engine.evaluator import detections_in_image, prediction_records
from models.inference import InferenceNet, build_nms, load_detector

log = logging.getLogger("predict")


class Predictor:
    """A checkpoint ready to detect: ``predict_file(path, out_dir)`` -> records or None."""

    def __init__(self, cfg: Any, host_nms: bool = False):
        self.img_size = tuple(int(v) for v in cfg.eval.img_size)
        detector, used_ema = load_detector(cfg.model, cfg.ckpt)
        self.num_classes = detector.num_classes
        self.net = InferenceNet(detector)
        self.nms = build_nms(cfg.eval, self.num_classes, on_host=host_nms)
        self.category_ids, self.class_names = self._classes(cfg)
        log.info(
            "%s: %s weights, %d classes", cfg.ckpt, "EMA" if used_ema else "raw", self.num_classes
        )

    def _classes(self, cfg: Any) -> tuple[list[int], list[str]]:
        """Names and ids of the dataset in the config when it matches the checkpoint."""
        try:
            from data.build import build_sources

            train, _ = build_sources(cfg.data)
            if train.num_classes == self.num_classes:
                return train.category_ids, train.class_names
            log.warning(
                "data=%s has %d classes, the checkpoint %d: classes are numbered",
                cfg.data.name,
                train.num_classes,
                self.num_classes,
            )
        except (OSError, ValueError) as err:
            log.warning("no class names (%s): classes are numbered", err)
        return list(range(self.num_classes)), [f"class{i}" for i in range(self.num_classes)]

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
