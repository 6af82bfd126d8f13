"""Media for the predict tests: a small generated video."""

from __future__ import annotations

import cv2
import numpy as np

from msdet.data.media import open_video_writer


def write_video(path, frames: int, size_hw=(64, 96), fps=10.0) -> None:
    """A small generated video (mp4v; MJPG for .avi: both encode in opencv-python-headless)."""
    writer = open_video_writer(str(path), fps, size_hw)
    for k in range(frames):
        frame = np.full((*size_hw, 3), 20 * k, np.uint8)
        cv2.rectangle(frame, (5 + k, 5), (40 + k, 30), (0, 0, 255), -1)
        writer.write(frame)
    writer.release()
