"""Detect objects: ``msdet predict ckpt=PATH source=IMAGE|VIDEO|FOLDER|GLOB|CAMERA``
(``python predict.py ...`` from a clone).

A source is an image or video file, a folder (searched recursively), a glob
(``photos/**/*.jpg``) or a camera index (``source=0``). Into the run folder
(``runs/predict/exp*``) go the annotated images and videos under the source's relative
paths, ``predictions.json`` (per image: ``bbox`` [x, y, w, h] in original pixels,
``score``, ``category_id``, ``category_name``), ``<video>.frames.json`` (the same records
per frame) and, with ``predict.save_txt=true``, YOLO labels in ``labels/``. Boxes scoring
under ``predict.conf`` (0.25) are dropped. The network and its class names come from the
checkpoint, or from a file export.py wrote (``ckpt=model.mindir``, ``ckpt=model.onnx``: the
same detections). ``--help`` lists the main settings, ``--help all`` every one.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence

from msdet.engine.cli import Run, run_command

log = logging.getLogger("predict")


def predict(run: Run) -> None:
    cfg = run.cfg
    if not cfg.ckpt or cfg.source is None or str(cfg.source) == "":
        raise ValueError("usage: python predict.py ckpt=PATH source=IMAGE|VIDEO|FOLDER|GLOB|0")
    from msdet.engine.runtime.process import setup_runtime

    rt = setup_runtime(cfg.runtime, run.dir)
    # Predictor loads MindSpore, which must load after setup_runtime prepared the process.
    from msdet.engine.inference.predictor import Predictor
    from msdet.engine.inference.sources import check_something_was_read, predict_source

    predictor = Predictor(cfg, rt, typed=run.typed)
    done = predict_source(
        predictor,
        cfg.source,
        run.dir,
        save_txt=bool(cfg.predict.save_txt),
        save_conf=bool(cfg.predict.save_conf),
        max_frames=cfg.predict.max_frames,
    )
    check_something_was_read(done, cfg.source)
    videos = done["videos"]
    log.info(
        "%d images, %d videos (%d frames), %d detections -> %s%s",
        done["images"],
        len(videos),
        sum(videos.values()),
        done["detections"],
        run.dir,
        f"; {len(done['skipped'])} unreadable skipped" if done["skipped"] else "",
    )


def main(argv: Sequence[str] | None = None) -> int:
    """``msdet predict`` with ``argv`` (default: the process's arguments); 0 when the detections
    finished. A bad command line exits 2, a user's error exits 1."""
    run_command("predict", predict, argv)
    return 0


if __name__ == "__main__":
    sys.exit(main())
