"""Detect objects in images: ``python predict.py ckpt=PATH source=IMAGE_OR_FOLDER``.

Writes annotated images and ``predictions.json`` (per image: ``bbox`` [x, y, w, h] in
original pixels, ``score``, ``category_id``, ``category_name``) into the run folder.
The network and its class names come from the checkpoint (a checkpoint written before
msdet described them also needs ``model=...``, and ``data=...`` for its class names).
Unreadable images are reported and skipped.
"""

from __future__ import annotations

import json
import logging
import os

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from engine.cli import prepare_config, typed_overrides, user_errors
from engine.runtime import setup_runtime

log = logging.getLogger("predict")
IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".tif", ".tiff", ".webp")


def list_images(source: str) -> list[str]:
    """An image file, or the image files of a folder (sorted)."""
    if os.path.isdir(source):
        names = sorted(n for n in os.listdir(source) if n.lower().endswith(IMAGE_SUFFIXES))
        return [os.path.join(source, n) for n in names]
    if os.path.isfile(source):
        return [source]
    raise SystemExit(f"source not found: {source}")


@hydra.main(config_path="configs", config_name="config", version_base="1.3")
def main(cfg: DictConfig) -> None:
    with user_errors():
        prepare_config(cfg)
        if not cfg.ckpt or not cfg.source:
            raise SystemExit("usage: python predict.py ckpt=PATH source=IMAGE_OR_FOLDER")
        rt = setup_runtime(cfg.runtime, HydraConfig.get().runtime.output_dir)
        # These import MindSpore, which must load after setup_runtime prepared the environment.
        from engine.predictor import Predictor

        predictor = Predictor(cfg, host_nms=rt.host_nms, typed=typed_overrides())
        results, skipped = {}, []
        for path in list_images(str(cfg.source)):
            records = predictor.predict_file(path, rt.run_dir)
            if records is None:
                skipped.append(path)
            else:
                results[os.path.basename(path)] = records
        with open(os.path.join(rt.run_dir, "predictions.json"), "w", encoding="utf-8") as f:
            json.dump(results, f, indent=2)
        log.info(
            "%d images, %d detections -> %s%s",
            len(results),
            sum(map(len, results.values())),
            rt.run_dir,
            f"; {len(skipped)} unreadable skipped" if skipped else "",
        )


if __name__ == "__main__":
    main()
