"""Media for the predict and data tests: a small generated video; a folder that keeps a
file name that is not UTF-8."""

from __future__ import annotations

import errno
import os

import cv2
import numpy as np
import pytest

from msdet.data.media import open_video_writer


def write_video(path, frames: int, size_hw=(64, 96), fps=10.0) -> None:
    """A small generated video (mp4v; MJPG for .avi: both encode in opencv-python-headless)."""
    writer = open_video_writer(str(path), fps, size_hw)
    for k in range(frames):
        frame = np.full((*size_hw, 3), 20 * k, np.uint8)
        cv2.rectangle(frame, (5 + k, 5), (40 + k, 30), (0, 0, 255), -1)
        writer.write(frame)
    writer.release()


def require_non_utf8_names(folder) -> None:
    """Skip unless the filesystem under ``folder`` keeps a name that is not UTF-8 as written.

    Some filesystems refuse such a name (EILSEQ) or store another one in its place; there, no
    user can hold such a file either, and a test of msdet reading one has nothing to read."""
    folder = os.fsencode(folder)
    os.makedirs(folder, exist_ok=True)
    probe = b"probe-\xe9"
    try:
        with open(os.path.join(folder, probe), "wb"):
            pass
        kept = probe in os.listdir(folder)
        os.remove(os.path.join(folder, probe))
    except OSError as err:
        if err.errno not in (errno.EILSEQ, errno.EINVAL, errno.ENOENT):
            raise
        kept = False
    if not kept:
        pytest.skip(
            f"the filesystem under {os.fsdecode(folder)!a} does not keep a name that is not UTF-8"
        )
