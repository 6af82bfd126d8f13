"""What predict.py reads: image and video files, folders, globs and cameras.

:func:`find_media` turns a ``source`` into :class:`Media` items, each with the path
relative to the source that its outputs mirror (``a/x.jpg`` and ``b/x.jpg`` of a folder
stay apart). :class:`VideoReader` reads a video file or a camera frame by frame;
:func:`open_video_writer` writes the annotated copy.

OpenCV takes file names as UTF-8 and crashes the process (a segmentation fault) on a name
that is not (a Latin-1 name from an old disk). :func:`write_image` writes through Python's
own file calls, which take any name; videos are opened and written under a UTF-8 name that
stands for theirs (a link; a temporary name renamed at the end).
"""

from __future__ import annotations

import glob
import os
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass

import cv2
import numpy as np

from msdet.common.paths import is_url, windows_path_hint

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".tif", ".tiff", ".webp")
VIDEO_SUFFIXES = (".mp4", ".m4v", ".mov", ".avi", ".mkv", ".webm", ".mpg", ".mpeg", ".wmv",
                  ".flv", ".ts")  # fmt: skip
# Containers the annotated copy keeps (tested with opencv-python-headless: mp4v and MJPG
# encode, H.264 'avc1' has no encoder in that wheel); any other is written as .mp4.
WRITABLE_VIDEO = {".mp4": "mp4v", ".m4v": "mp4v", ".mov": "mp4v", ".mkv": "mp4v", ".avi": "MJPG"}
DEFAULT_FPS = 30.0  # when a camera or file does not say
_GLOB_CHARS = ("*", "?", "[")


@dataclass(frozen=True)
class Media:
    """One input: ``kind`` is ``image``, ``video`` or ``camera``; ``path`` the file (the
    camera index for a camera); ``rel`` the name its outputs take in the run folder."""

    kind: str
    path: str
    rel: str

    @property
    def camera_index(self) -> int:
        """The OpenCV device index of a camera."""
        return int(self.path)


def media_kind(path: str) -> str | None:
    """``image`` or ``video`` by the file name's suffix, else None."""
    suffix = os.path.splitext(path)[1].lower()
    if suffix in IMAGE_SUFFIXES:
        return "image"
    if suffix in VIDEO_SUFFIXES:
        return "video"
    return None


def find_media(source: str | int) -> list[Media]:
    """The inputs of ``source``: a camera index (``0``), an image or video file, a folder
    (searched recursively) or a glob (``'dir/**/*.jpg'``, ``**`` spans folders), sorted by
    relative path. Raises ``FileNotFoundError`` naming ``source`` when nothing matches."""
    text = str(source).strip()
    if text.isdigit():
        return [Media("camera", text, f"camera{int(text)}")]
    if is_url(text):
        raise FileNotFoundError(
            f"source={text}: a URL; predict.py reads files, folders, globs and cameras, not "
            "URLs: download it first (e.g. curl -O URL) and pass the file"
        )
    if os.path.isfile(text):
        kind = media_kind(text)
        if kind is None:
            raise FileNotFoundError(
                f"source {text} is neither an image ({', '.join(IMAGE_SUFFIXES)}) nor a "
                f"video ({', '.join(VIDEO_SUFFIXES)})"
            )
        return [Media(kind, text, os.path.basename(text))]
    if os.path.isdir(text):
        files = [os.path.join(folder, name) for folder, _, names in os.walk(text) for name in names]
        root = text
    elif any(c in text for c in _GLOB_CHARS):
        files = [p for p in glob.glob(text, recursive=True) if os.path.isfile(p)]
        root = _glob_root(text)
    else:
        hint = windows_path_hint(text, "source")
        raise FileNotFoundError(f"source not found: {text}" + (f" ({hint})" if hint else ""))
    found = sorted(
        (os.path.relpath(p, root), p) for p in files if media_kind(p) and not _hidden(p, root)
    )
    if not found:
        raise FileNotFoundError(f"no images or videos in source {text}")
    return [Media(media_kind(p), p, rel) for rel, p in found]


def _glob_root(pattern: str) -> str:
    """The folder before a glob's first wildcard: outputs mirror paths below it."""
    parts = pattern.split(os.sep)
    fixed = []
    for part in parts[:-1]:
        if any(c in part for c in _GLOB_CHARS):
            break
        fixed.append(part)
    return os.sep.join(fixed) or ("/" if pattern.startswith(os.sep) else ".")


def _hidden(path: str, root: str) -> bool:
    return any(part.startswith(".") for part in os.path.relpath(path, root).split(os.sep))


def annotated_video_name(rel: str) -> str:
    """The annotated copy's name: ``rel`` when OpenCV can write its container, else .mp4."""
    stem, suffix = os.path.splitext(rel)
    return rel if suffix.lower() in WRITABLE_VIDEO else stem + ".mp4"


class VideoReader:
    """Frames of a video file or camera (uint8 BGR), with its frame rate and frame count.

    Raises ``OSError`` naming the file (or camera) when OpenCV cannot open it.
    """

    def __init__(self, media: Media):
        self.media = media
        self._link_dir = None
        target = media.camera_index if media.kind == "camera" else media.path
        if media.kind != "camera" and not is_utf8(media.path):
            self._link_dir = tempfile.mkdtemp(prefix="msdet-video-")
            target = os.path.join(self._link_dir, "video" + os.path.splitext(media.path)[1])
            os.symlink(os.path.abspath(media.path), target)
        self.capture = cv2.VideoCapture(target)
        if not self.capture.isOpened():
            what = f"camera {target}" if media.kind == "camera" else f"video {media.path}"
            hint = " (no camera with that index on this machine?)" if media.kind == "camera" else ""
            raise OSError(f"cannot open {what}{hint}")
        fps = float(self.capture.get(cv2.CAP_PROP_FPS) or 0.0)
        self.fps = fps if 0.0 < fps < 1000.0 else DEFAULT_FPS
        count = int(self.capture.get(cv2.CAP_PROP_FRAME_COUNT) or 0)
        # A camera has no count; a file's is read from its header and may be approximate.
        self.frame_count = count if media.kind == "video" and count > 0 else None

    def frames(self) -> Iterator[np.ndarray]:
        """Each frame in order, until the stream ends (a read fails)."""
        while True:
            ok, frame = self.capture.read()
            if not ok or frame is None:
                return
            yield frame

    def release(self) -> None:
        """Close the file or camera."""
        self.capture.release()
        if self._link_dir is not None:
            shutil.rmtree(self._link_dir, ignore_errors=True)
            self._link_dir = None


def is_utf8(path: str) -> bool:
    """Whether OpenCV can be given ``path``: a name that is valid UTF-8 (Python holds the
    bytes of one that is not as surrogates)."""
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def write_image(path: str, img: np.ndarray) -> None:
    """Write ``img`` to ``path`` (its format by the suffix; folders created), whatever the
    name's bytes; ``OSError`` naming the file if it cannot be."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    ok, encoded = cv2.imencode(os.path.splitext(path)[1] or ".jpg", img)
    if not ok:
        raise OSError(f"cannot encode {path!r} as {os.path.splitext(path)[1]}")
    with open(path, "wb") as f:
        f.write(encoded.tobytes())


class VideoWriter:
    """An OpenCV video writer for ``path``; a name that is not UTF-8 is written under a
    temporary one beside it and renamed by :meth:`release`."""

    def __init__(self, path: str, fps: float, size_hw: tuple[int, int]):
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        codec = WRITABLE_VIDEO.get(os.path.splitext(path)[1].lower(), "mp4v")
        self.path, self._target = path, path
        if not is_utf8(path):
            fd, self._target = tempfile.mkstemp(
                suffix=os.path.splitext(path)[1], dir=os.path.dirname(os.path.abspath(path))
            )
            os.close(fd)
        h, w = size_hw
        self._writer = cv2.VideoWriter(
            self._target, cv2.VideoWriter_fourcc(*codec), float(fps), (int(w), int(h))
        )
        if not self._writer.isOpened():
            raise OSError(f"cannot write video {path!r} ({codec}, {w}x{h})")

    def write(self, frame: np.ndarray) -> None:
        """Append one frame (uint8 BGR of the writer's size)."""
        self._writer.write(frame)

    def release(self) -> None:
        """Finish the file (under its own name)."""
        self._writer.release()
        if self._target != self.path:
            os.replace(self._target, self.path)
            self._target = self.path


def open_video_writer(path: str, fps: float, size_hw: tuple[int, int]) -> VideoWriter:
    """A writer for ``path`` (mp4v, MJPG for .avi); ``OSError`` if it cannot open."""
    return VideoWriter(path, fps, size_hw)
