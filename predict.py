"""Detect objects: ``python predict.py ckpt=PATH source=IMAGE|VIDEO|FOLDER|'GLOB'|CAMERA``.

A source is an image or video file, a folder (searched recursively), a quoted glob
(``'photos/**/*.jpg'``) or a camera index (``source=0``). Into the run folder go the
annotated images and videos under the source's relative paths, ``predictions.json``
(per image: ``bbox`` [x, y, w, h] in original pixels, ``score``, ``category_id``,
``category_name``), ``<video>.frames.json`` (the same records per frame) and, with
``predict.save_txt=true``, YOLO labels in ``labels/``. Boxes scoring under
``predict.conf`` (0.25) are dropped. The network and its class names come from the
checkpoint (one written before msdet described them also needs ``model=...``, and
``data=...`` for its class names). Unreadable images and videos are reported and skipped.
"""

from __future__ import annotations

import logging

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from msdet.engine.cli import prepare_config, typed_overrides, user_errors
from msdet.engine.runtime.process import setup_runtime

log = logging.getLogger("predict")


@hydra.main(config_path="configs", config_name="config", version_base="1.3")
def main(cfg: DictConfig) -> None:
    with user_errors((OSError,)):
        prepare_config(cfg)
        if not cfg.ckpt or cfg.source is None or str(cfg.source) == "":
            raise SystemExit("usage: python predict.py ckpt=PATH source=IMAGE|VIDEO|FOLDER|GLOB|0")
        rt = setup_runtime(cfg.runtime, HydraConfig.get().runtime.output_dir)
        # Predictor loads MindSpore, which must load after setup_runtime prepared the process.
        from msdet.engine.inference.predictor import Predictor
        from msdet.engine.inference.sources import predict_source

        predictor = Predictor(cfg, rt, typed=typed_overrides())
        done = predict_source(
            predictor,
            cfg.source,
            rt.run_dir,
            save_txt=bool(cfg.predict.save_txt),
            save_conf=bool(cfg.predict.save_conf),
            max_frames=cfg.predict.max_frames,
        )
        videos = done["videos"]
        log.info(
            "%d images, %d videos (%d frames), %d detections -> %s%s",
            done["images"],
            len(videos),
            sum(videos.values()),
            done["detections"],
            rt.run_dir,
            f"; {len(done['skipped'])} unreadable skipped" if done["skipped"] else "",
        )


if __name__ == "__main__":
    main()
