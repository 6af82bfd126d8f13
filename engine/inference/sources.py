"""predict.py's run over a source: images, folders, globs, videos and a camera
(:mod:`msdet.data.media`), each annotated and recorded into the run folder.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from typing import Any

from msdet.common.progress import Progress, progress
from msdet.data.image_io import ImageReadError, read_image
from msdet.data.media import (
    Media,
    VideoReader,
    annotated_video_name,
    find_media,
    open_video_writer,
    write_image,
)
from msdet.engine.inference.predictor import Detections, Predictor, log

PREDICTIONS_FILE = "predictions.json"
LABELS_DIR = "labels"
FRAMES_SUFFIX = ".frames.json"


def predict_source(
    predictor: Predictor,
    source: str | int,
    out_dir: str,
    save_txt: bool = False,
    save_conf: bool = False,
    max_frames: int | None = None,
) -> dict[str, Any]:
    """predict.py's run: detect in every input of ``source`` (``data.media.find_media``)
    and write into ``out_dir``, mirroring the source's relative paths:

    - each image annotated under its relative path; all images' records in
      ``predictions.json`` (``{relative path: [records]}``); unreadable images are
      reported and skipped;
    - each video (and a camera, ``camera<i>``) annotated as a video of that name (mp4v;
      MJPG for .avi) and its records per frame in ``<name>.frames.json``;
    - with ``save_txt``, YOLO labels ``labels/<relative path>.txt`` (a video's frame k:
      ``labels/<name>_<k>.txt``, k from 0, six digits), empty for nothing found, the score
      appended with ``save_conf``.

    ``max_frames`` stops each video and the camera after that many frames; Ctrl+C stops
    the run, keeping what was done (a camera's usual end). Returns counts for the log.
    """
    media = find_media(source)
    _warn_shared_names(media, save_txt)
    labels = os.path.join(out_dir, LABELS_DIR) if save_txt else None
    summary: dict[str, Any] = {"images": 0, "skipped": [], "videos": {}, "detections": 0}
    images = [m for m in media if m.kind == "image"]
    streams = [m for m in media if m.kind != "image"]
    results: dict[str, list[dict[str, Any]]] = {}
    try:
        if images:  # the compile is not an image: done before the bar starts timing
            predictor.warm_up()
        for item in progress(images, len(images), "predict", "img", logger=log):
            try:
                img = read_image(item.path)
            except ImageReadError as err:
                log.warning("skipped: %s", err)
                summary["skipped"].append(item.path)
                continue
            dets = predictor.predict(img)
            write_image(os.path.join(out_dir, item.rel), predictor.draw(img, dets))
            if labels:
                _write_labels(os.path.join(labels, _stem(item.rel) + ".txt"), dets, save_conf)
            results[item.rel] = dets.records()
            summary["detections"] += len(dets)
        for item in streams:
            frames = _predict_stream(predictor, item, out_dir, labels, save_conf, max_frames)
            if frames is None:
                summary["skipped"].append(item.path)
                continue
            summary["videos"][item.rel] = len(frames)
            summary["detections"] += sum(len(f["detections"]) for f in frames)
    except KeyboardInterrupt:
        log.warning("interrupted: keeping what was done")
    if images:
        with open(os.path.join(out_dir, PREDICTIONS_FILE), "w", encoding="utf-8") as f:
            json.dump(results, f, indent=2)
    summary["images"] = len(results)
    return summary


def check_something_was_read(summary: dict[str, Any], source: Any) -> None:
    """Raise ``OSError`` when every input of ``source`` was unreadable: a failure, not an
    empty success (a script calling predict.py must see it)."""
    if summary["skipped"] and not summary["images"] and not summary["videos"]:
        raise OSError(
            f"none of the {len(summary['skipped'])} inputs of source={source} could be read "
            f"(the first: {summary['skipped'][0]})"
        )


def _predict_stream(
    predictor: Predictor,
    item: Media,
    out_dir: str,
    labels: str | None,
    save_conf: bool,
    max_frames: int | None,
) -> list[dict[str, Any]] | None:
    """One video or camera: the annotated video, ``<name>.frames.json``, labels per frame.
    Returns the frames' records, or None for a video that cannot be read (a camera that
    cannot be opened is an error)."""
    try:
        reader = VideoReader(item)
    except OSError as err:
        if item.kind == "camera":
            raise
        log.warning("skipped: %s", err)
        return None
    predictor.warm_up()
    total = reader.frame_count
    if max_frames is not None:
        total = min(total, int(max_frames)) if total else int(max_frames)
    name = annotated_video_name(item.rel)
    frames: list[dict[str, Any]] = []
    writer, hw = None, (0, 0)
    bar = Progress(total, item.rel, "frame", logger=log)
    try:
        for k, frame in enumerate(reader.frames()):
            if max_frames is not None and k >= int(max_frames):
                break
            dets = predictor.predict(frame)
            if writer is None:
                hw = frame.shape[:2]
                writer = open_video_writer(os.path.join(out_dir, name), reader.fps, hw)
            writer.write(predictor.draw(frame, dets))
            if labels:
                path = os.path.join(labels, f"{_stem(item.rel)}_{k:06d}.txt")
                _write_labels(path, dets, save_conf)
            frames.append(
                {"frame": k, "time_s": round(k / reader.fps, 3), "detections": dets.records()}
            )
            bar.update()
    except KeyboardInterrupt:
        if item.kind != "camera":
            raise
        log.info("camera %s stopped after %d frames", item.path, len(frames))
    finally:
        bar.close()
        reader.release()
        if writer is not None:
            writer.release()
        if frames:
            _write_frames(out_dir, item, name, reader.fps, hw, frames)
    if not frames:
        log.warning("skipped: no frame could be read from %s", item.path)
        return None
    return frames


def _write_frames(
    out_dir: str, item: Media, name: str, fps: float, hw: Sequence[int], frames: list
) -> None:
    record = {"source": item.path, "video": name, "fps": fps, "width": hw[1], "height": hw[0]}
    record["frames"] = frames
    path = os.path.join(out_dir, _stem(item.rel) + FRAMES_SUFFIX)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(record, f, indent=1)


def _warn_shared_names(media: Sequence[Media], save_txt: bool) -> None:
    """x.jpg and x.png of one folder share labels/x.txt; x.mp4 and x.avi x.frames.json."""
    by_stem: dict[tuple[str, str], list[str]] = {}
    for item in media:
        if save_txt or item.kind != "image":
            by_stem.setdefault((item.kind == "image", _stem(item.rel)), []).append(item.rel)
    for names in by_stem.values():
        if len(names) > 1:
            log.warning("%s share their output names (labels/*.txt, *.frames.json): the last "
                        "one's are kept", " and ".join(names))  # fmt: skip


def _stem(rel: str) -> str:
    return os.path.splitext(rel)[0]


def _write_labels(path: str, detections: Detections, with_score: bool) -> None:
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    lines = detections.yolo_lines(with_score)
    with open(path, "w", encoding="utf-8") as f:
        f.write("".join(line + "\n" for line in lines))
