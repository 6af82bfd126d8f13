"""predict.py's inputs: folders (recursive), globs, files, cameras, videos written and read."""

from __future__ import annotations

import os

import cv2
import numpy as np
import pytest

from msdet.data.media import Media, VideoReader, annotated_video_name, find_media
from tests.support.media import write_video


@pytest.fixture
def source(tmp_path):
    root = tmp_path / "src"
    for rel in ("a/x.jpg", "b/deep/x.jpg", "top.png", ".hidden/skip.jpg"):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        cv2.imwrite(str(root / rel), np.zeros((8, 8, 3), np.uint8))
    (root / "notes.txt").write_text("not an image")
    write_video(root / "clip.mp4", 3)
    return root


def test_a_folder_is_searched_recursively_and_keeps_relative_paths(source):
    found = find_media(str(source))
    assert [(m.kind, m.rel) for m in found] == [
        ("image", os.path.join("a", "x.jpg")),
        ("image", os.path.join("b", "deep", "x.jpg")),
        ("video", "clip.mp4"),
        ("image", "top.png"),
    ]
    assert found[0].path == str(source / "a" / "x.jpg")


def test_a_glob_mirrors_paths_below_its_fixed_part(source):
    found = find_media(f"{source}/**/x.jpg")
    assert [m.rel for m in found] == [
        os.path.join("a", "x.jpg"),
        os.path.join("b", "deep", "x.jpg"),
    ]
    assert [m.rel for m in find_media(f"{source}/*.png")] == ["top.png"]
    with pytest.raises(FileNotFoundError, match="no images or videos"):
        find_media(f"{source}/*.gif")


def test_a_file_a_camera_and_what_is_not_found(source):
    assert find_media(str(source / "clip.mp4")) == [
        Media("video", str(source / "clip.mp4"), "clip.mp4")
    ]
    assert find_media(0) == find_media("0") == [Media("camera", "0", "camera0")]
    with pytest.raises(FileNotFoundError, match="source not found"):
        find_media(str(source / "missing"))
    with pytest.raises(FileNotFoundError, match="neither an image"):
        find_media(str(source / "notes.txt"))


def test_video_reader_gives_every_frame_rate_and_count(tmp_path):
    for name in ("v.mp4", "v.avi"):
        write_video(tmp_path / name, 4, fps=12.0)
        reader = VideoReader(Media("video", str(tmp_path / name), name))
        frames = list(reader.frames())
        reader.release()
        assert (len(frames), reader.frame_count, reader.fps) == (4, 4, 12.0)
        assert frames[0].shape == (64, 96, 3) and frames[0].dtype == np.uint8
    (tmp_path / "bad.mp4").write_bytes(b"not a video" * 50)
    with pytest.raises(OSError, match="cannot open video"):
        VideoReader(Media("video", str(tmp_path / "bad.mp4"), "bad.mp4"))
    with pytest.raises(OSError, match="cannot open camera 99 .no camera"):
        VideoReader(Media("camera", "99", "camera99"))


def test_annotated_video_names():
    assert annotated_video_name("a/clip.avi") == "a/clip.avi"
    assert annotated_video_name("clip.MOV") == "clip.MOV"
    assert annotated_video_name("a/clip.webm") == "a/clip.mp4"


@pytest.mark.parametrize(
    "source, message",
    [
        # Issue: a URL was "not found".
        ("http://example.com/a.jpg", r"source=http://example.com/a.jpg: a URL; predict.py reads"),
        ("rtsp://camera/stream", r"not URLs: download it first"),
        ("C:\\photos\\a.jpg", r"source=C:\\photos\\a.jpg is a Windows path"),
    ],
)
def test_urls_and_windows_paths_are_named_for_what_they_are(source, message):
    with pytest.raises(FileNotFoundError, match=message):
        find_media(source)
