"""predict.py's outputs (engine.inference.sources.predict_source) with a stand-in for the network:
the run folder's layout, YOLO labels read back against the json, videos frame by frame."""

from __future__ import annotations

import json
import logging
import os

import cv2
import numpy as np
import pytest

from msdet.data.media import Media, VideoReader
from msdet.engine.inference import sources as sources_module
from msdet.engine.inference.predictor import Detections
from msdet.engine.inference.sources import predict_source
from tests.support.media import require_non_utf8_names, write_video

CLASS_NAMES, CATEGORY_IDS = ["disc", "rectangle", "triangle"], [1, 3, 7]


class StandIn:
    """Predictor's interface: two boxes per image, the second's score set by the image."""

    class_names, category_ids = CLASS_NAMES, CATEGORY_IDS

    def __init__(self):
        self.calls = 0
        self.events: list[str] = []

    def warm_up(self) -> None:
        self.events.append("compile")

    def predict(self, img: np.ndarray) -> Detections:
        self.calls += 1
        h, w = img.shape[:2]
        boxes = np.array([[1.5, 2.25, w * 0.5, h * 0.75], [0, 0, w, h]], np.float32)
        scores = np.array([0.9, 0.3 + float(img.mean()) / 1000], np.float32)
        labels = np.array([2, 0], np.int64)
        return Detections(
            boxes,
            scores,
            labels,
            [CLASS_NAMES[k] for k in labels],
            [CATEGORY_IDS[k] for k in labels],
            (h, w),
            list(CLASS_NAMES),
        )

    def draw(self, img, detections):
        return cv2.rectangle(img.copy(), (0, 0), (4, 4), (0, 255, 0), -1)


@pytest.fixture
def source(tmp_path):
    root = tmp_path / "src"
    images = {"a/x.jpg": (40, 60), "b/x.jpg": (30, 50), "top.png": (32, 32)}
    for rel, hw in images.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        cv2.imwrite(str(root / rel), np.full((*hw, 3), 128, np.uint8))
    (root / "broken.jpg").write_bytes(b"\xff\xd8" + b"\x00" * 100)  # truncated JPEG
    write_video(root / "clip.mp4", 5)
    write_video(root / "b" / "old.avi", 3)
    return root


def read_labels(path) -> list[list[float]]:
    return [[float(v) for v in line.split()] for line in path.read_text().splitlines()]


def frames_in(path) -> int:
    reader = VideoReader(Media("video", str(path), path.name))
    count = len(list(reader.frames()))
    reader.release()
    return count


def test_a_folder_mirrors_its_paths_with_json_labels_and_videos(source, tmp_path):
    out = tmp_path / "run"
    done = predict_source(StandIn(), str(source), str(out), save_txt=True, save_conf=True)
    assert done["images"] == 3 and done["skipped"] == [str(source / "broken.jpg")]
    assert done["videos"] == {os.path.join("b", "old.avi"): 3, "clip.mp4": 5}
    assert done["detections"] == 2 * (3 + 3 + 5)

    # Same-named images in two folders keep apart, annotated at their relative paths.
    preds = json.loads((out / "predictions.json").read_text())
    assert sorted(preds) == ["a/x.jpg", "b/x.jpg", "top.png"]
    assert cv2.imread(str(out / "a" / "x.jpg")).shape == (40, 60, 3)
    assert cv2.imread(str(out / "b" / "x.jpg")).shape == (30, 50, 3)
    assert not (out / "broken.jpg").exists()

    # YOLO labels, parsed back: the json's boxes, classes and scores.
    for rel, records in preds.items():
        h, w = cv2.imread(str(source / rel)).shape[:2]
        lines = read_labels(out / "labels" / (os.path.splitext(rel)[0] + ".txt"))
        assert len(lines) == len(records) == 2
        for (label, cx, cy, bw, bh, score), rec in zip(lines, records):
            xywh = [(cx - bw / 2) * w, (cy - bh / 2) * h, bw * w, bh * h]
            np.testing.assert_allclose(xywh, rec["bbox"], atol=0.01)
            assert CATEGORY_IDS[int(label)] == rec["category_id"]
            assert CLASS_NAMES[int(label)] == rec["category_name"]
            assert score == pytest.approx(rec["score"], abs=1e-5)

    # A video: its annotated copy (same container) and its records per frame.
    for rel, count in (("clip.mp4", 5), ("b/old.avi", 3)):
        assert frames_in(out / rel) == count
        record = json.loads((out / (os.path.splitext(rel)[0] + ".frames.json")).read_text())
        assert (record["video"], record["fps"], record["width"], record["height"]) == (
            rel,
            10.0,
            96,
            64,
        )
        assert [f["frame"] for f in record["frames"]] == list(range(count))
        assert [f["time_s"] for f in record["frames"]][:2] == [0.0, 0.1]
        assert all(len(f["detections"]) == 2 for f in record["frames"])
        stem = os.path.splitext(rel)[0]
        labels = sorted(p.name for p in (out / "labels" / os.path.dirname(rel)).glob("*_*.txt"))
        assert labels == [f"{os.path.basename(stem)}_{k:06d}.txt" for k in range(count)]
        last = read_labels(out / "labels" / f"{stem}_{count - 1:06d}.txt")
        assert last[0][0] == 2 and len(last) == 2


def test_a_glob_and_the_frame_limit(source, tmp_path):
    out = tmp_path / "run"
    stand_in = StandIn()
    done = predict_source(stand_in, f"{source}/**/x.jpg", str(out), max_frames=2)
    assert done["images"] == 2 and not (out / "labels").exists()  # save_txt is off
    assert sorted(json.loads((out / "predictions.json").read_text())) == ["a/x.jpg", "b/x.jpg"]
    done = predict_source(stand_in, str(source / "clip.mp4"), str(out), max_frames=2)
    assert done["videos"] == {"clip.mp4": 2} and frames_in(out / "clip.mp4") == 2
    frames = json.loads((out / "clip.frames.json").read_text())["frames"]
    assert len(frames) == 2 and stand_in.calls == 2 + 2


def test_a_camera_stopped_with_ctrl_c_keeps_its_video_and_frames(source, tmp_path, monkeypatch):
    """No camera here: a video stands in for camera 0, and Ctrl+C comes after 3 frames."""

    class Camera(VideoReader):
        def __init__(self, media):
            assert media == Media("camera", "0", "camera0")
            super().__init__(Media("video", str(source / "clip.mp4"), "clip.mp4"))
            self.frame_count = None  # a camera has none

        def frames(self):
            for k, frame in enumerate(super().frames()):
                if k == 3:
                    raise KeyboardInterrupt
                yield frame

    monkeypatch.setattr(sources_module, "VideoReader", Camera)
    out = tmp_path / "run"
    done = predict_source(StandIn(), 0, str(out))
    assert done["videos"] == {"camera0": 3}
    assert frames_in(out / "camera0.mp4") == 3
    frames = json.loads((out / "camera0.frames.json").read_text())["frames"]
    assert len(frames) == 3 and not (out / "predictions.json").exists()


def test_yolo_lines_without_score_and_empty_files(tmp_path):
    dets = StandIn().predict(np.zeros((50, 100, 3), np.uint8))
    assert dets.yolo_lines() == ["2 0.2575 0.3975 0.485 0.705", "0 0.5 0.5 1 1"]
    empty = Detections(
        np.zeros((0, 4), np.float32), np.zeros(0, np.float32), np.zeros(0, np.int64), [], [],
        (5, 5), list(CLASS_NAMES),
    )  # fmt: skip
    assert empty.yolo_lines() == [] and empty.records() == []


def test_same_stem_in_one_folder_is_named_in_a_warning(tmp_path, caplog):
    for name in ("x.jpg", "x.png", "y.jpg"):
        cv2.imwrite(str(tmp_path / name), np.zeros((8, 8, 3), np.uint8))
    predict_source(StandIn(), str(tmp_path), str(tmp_path / "run"), save_txt=True)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == [
        "x.jpg and x.png share their output names (labels/*.txt, *.frames.json): the last "
        "one's are kept"
    ]


def test_names_are_the_models_classes_and_label_names_each_detections():
    """Ultralytics' meaning: ``result.names`` is the model's class list, indexed by label."""
    dets = StandIn().predict(np.zeros((50, 100, 3), np.uint8))
    assert dets.names == ["disc", "rectangle", "triangle"]
    assert dets.labels.tolist() == [2, 0]
    assert dets.label_names == ["triangle", "disc"]
    assert [dets.names[k] for k in dets.labels] == dets.label_names
    assert [r["category_name"] for r in dets.records()] == ["triangle", "disc"]
    assert [r["category_id"] for r in dets.records()] == [7, 1]


def test_nothing_readable_is_a_failure_not_an_empty_success(tmp_path):
    """Issue: predict.py exited 0 when every input video was unreadable."""
    from msdet.engine.inference.sources import check_something_was_read

    (tmp_path / "in").mkdir()
    for name in ("a.mp4", "b.avi"):
        (tmp_path / "in" / name).write_bytes(b"not a video")
    (tmp_path / "out").mkdir()
    done = predict_source(None, str(tmp_path / "in"), str(tmp_path / "out"))  # never predicts
    assert (done["images"], done["videos"], len(done["skipped"])) == (0, {}, 2)
    with pytest.raises(OSError, match=r"none of the 2 inputs of source=.* could be read"):
        check_something_was_read(done, str(tmp_path / "in"))
    check_something_was_read({"images": 1, "videos": {}, "skipped": ["x.jpg"]}, "photos")


def test_an_empty_array_or_no_image_is_a_clear_error():
    """Issue: predict(np.zeros((0, 0, 3))) raised ZeroDivisionError, draw(None, ...)
    AttributeError."""
    from msdet.engine.inference.predictor import Predictor

    predictor = Predictor.__new__(Predictor)  # the checks come before the network
    predictor.img_size, predictor.class_names = (64, 64), list(CLASS_NAMES)
    for empty in (np.zeros((0, 0, 3), np.uint8), np.zeros((0, 10, 3), np.uint8), np.zeros(0)):
        with pytest.raises(ValueError, match=r"Predictor.predict: .*no pixels"):
            predictor.predict(empty)
    with pytest.raises(ValueError, match=r"Predictor.predict: .*4 dimensions"):
        predictor.predict(np.zeros((1, 8, 8, 3), np.uint8))
    with pytest.raises(ValueError, match=r"Predictor.predict takes an image file's path or"):
        predictor.predict(None)
    dets = StandIn().predict(np.zeros((50, 100, 3), np.uint8))
    with pytest.raises(ValueError, match=r"Predictor.draw takes the image .* got None"):
        predictor.draw(None, dets)
    with pytest.raises(ValueError, match=r"Predictor.draw takes .*Detections.* got list"):
        predictor.draw(np.zeros((50, 100, 3), np.uint8), [])
    drawn = predictor.draw(np.zeros((50, 100, 3), np.uint8), dets)
    assert drawn.shape == (50, 100, 3) and drawn.any()


def test_the_compile_is_done_before_the_progress_counts_images(source, tmp_path, monkeypatch):
    """Issue: the first image's time held the network's compile, and the bar's rate with it."""
    stand_in = StandIn()
    original_predict, original_progress = stand_in.predict, sources_module.progress

    def predict(img):
        stand_in.events.append("image")
        return original_predict(img)

    def progress(items, *args, **kwargs):
        stand_in.events.append("bar")
        return original_progress(items, *args, **kwargs)

    stand_in.predict = predict
    monkeypatch.setattr(sources_module, "progress", progress)
    predict_source(stand_in, str(source / "a"), str(tmp_path / "run"))
    assert stand_in.events == ["compile", "bar", "image"]


def test_a_file_name_that_is_not_utf8_is_read_and_written_as_it_is(tmp_path):
    """Issue: predict.py on such a name crashed inside OpenCV (exit 139)."""
    folder = os.fsencode(tmp_path / "in")
    require_non_utf8_names(folder)
    ok, jpeg = cv2.imencode(".jpg", np.full((20, 30, 3), 90, np.uint8))
    with open(folder + b"/caf\xe9.jpg", "wb") as f:
        f.write(jpeg.tobytes())
    write_video(tmp_path / "clip.mp4", 3)
    os.rename(tmp_path / "clip.mp4", folder + b"/cl\xefp.mp4")
    out = tmp_path / "run"
    done = predict_source(StandIn(), str(tmp_path / "in"), str(out), save_txt=True)
    name, video = os.fsdecode(b"caf\xe9.jpg"), os.fsdecode(b"cl\xefp.mp4")
    assert done["images"] == 1 and done["videos"] == {video: 3} and done["skipped"] == []
    assert cv2.imdecode(np.fromfile(os.path.join(out, name), np.uint8), 1).shape == (20, 30, 3)
    assert frames_in(out / video) == 3
    assert os.path.isfile(os.path.join(out, "labels", os.fsdecode(b"caf\xe9.txt")))
    assert list(json.loads((out / "predictions.json").read_text())) == [name]
