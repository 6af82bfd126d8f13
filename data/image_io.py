"""Reading images from disk as the uint8 BGR arrays every transform expects.

OpenCV is lenient in ways that hurt training silently: a truncated JPEG decodes into an
image whose lower part is flat grey, and a 16-bit PNG cast to uint8 wraps around. This
module turns those cases into either a correct conversion or an :class:`ImageReadError`.
"""

from __future__ import annotations

import multiprocessing

import cv2
import numpy as np

JPEG_SOI = b"\xff\xd8"
JPEG_EOI = b"\xff\xd9"
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
PNG_IEND = b"IEND\xaeB`\x82"
# Some writers append padding or metadata after the end marker, so it is searched for
# near the end rather than required as the last bytes. Inside JPEG entropy-coded data
# 0xFF is always byte-stuffed, so an EOI found there really is the end of the scan.
END_MARKER_WINDOW = 1024

# Raw pixel orientation, as pycocotools/PIL-based annotation tools see the image: applying
# the EXIF rotation (OpenCV's default) would move the pixels away from their boxes.
_DECODE_FLAGS = cv2.IMREAD_UNCHANGED | cv2.IMREAD_IGNORE_ORIENTATION


class ImageReadError(OSError):
    """An image file is missing, unreadable, truncated or of an unsupported kind."""


def read_image(path: str) -> np.ndarray:
    """Read ``path`` as a uint8 BGR array of shape [H, W, 3].

    Grayscale, 16-bit, float and RGBA/BGRA files are converted (see :func:`to_bgr_uint8`).
    Raises :class:`ImageReadError`, naming the file, for a missing, empty, truncated or
    undecodable file.
    """
    try:
        with open(path, "rb") as f:
            encoded = f.read()
    except OSError as err:
        raise ImageReadError(f"cannot read image {path}: {err.strerror or err}") from err
    if not encoded:
        raise ImageReadError(f"image file is empty: {path}")
    problem = find_truncation(encoded)
    if problem:
        raise ImageReadError(f"truncated image {path}: {problem}")
    img = cv2.imdecode(np.frombuffer(encoded, np.uint8), _DECODE_FLAGS)
    if img is None or img.size == 0:
        raise ImageReadError(f"cannot decode image {path} (not an image OpenCV can read)")
    try:
        return to_bgr_uint8(img)
    except ValueError as err:
        raise ImageReadError(f"unsupported image {path}: {err}") from err


def find_truncation(encoded: bytes) -> str | None:
    """Why a JPEG or PNG byte string looks cut off, or None if it looks complete.

    Only JPEG (end-of-image marker) and PNG (IEND chunk) are checked; other formats are
    left to the decoder.
    """
    tail = encoded[-END_MARKER_WINDOW:]
    if encoded.startswith(JPEG_SOI) and JPEG_EOI not in tail:
        return "JPEG end-of-image marker (FFD9) missing"
    if encoded.startswith(PNG_SIGNATURE) and PNG_IEND not in tail:
        return "PNG IEND chunk missing"
    return None


def to_bgr_uint8(img: np.ndarray) -> np.ndarray:
    """Convert a decoded image (OpenCV channel order) to contiguous uint8 BGR [H, W, 3].

    uint16 is scaled by 1/257 (65535 -> 255) rather than cast, which would wrap around;
    float images are taken as 0..1 when their maximum is <= 1, else as 0..255. An alpha
    channel is dropped (the colour values are kept as stored).
    """
    if img.size == 0:
        raise ValueError(f"an image of no pixels (shape {img.shape})")
    if img.ndim not in (2, 3):
        raise ValueError(f"expected 2 or 3 dimensions, got {img.ndim} dimensions {img.shape}")
    if img.dtype == np.uint16:
        img = (img.astype(np.float32) / 257.0 + 0.5).astype(np.uint8)
    elif img.dtype in (np.float32, np.float64):
        scale = 255.0 if float(np.nanmax(img)) <= 1.0 else 1.0
        img = np.clip(np.nan_to_num(img) * scale + 0.5, 0, 255).astype(np.uint8)
    elif img.dtype != np.uint8:
        raise ValueError(f"pixel type {img.dtype} is not supported")

    if img.ndim == 2:
        return cv2.cvtColor(img, cv2.COLOR_GRAY2BGR)
    channels = img.shape[2]
    if channels == 3:
        return np.ascontiguousarray(img)
    if channels == 1:
        return cv2.cvtColor(img, cv2.COLOR_GRAY2BGR)
    if channels == 4:
        return cv2.cvtColor(img, cv2.COLOR_BGRA2BGR)
    raise ValueError(f"{channels} channels are not supported")


class UnreadableImageStats:
    """Counts of unreadable images met per epoch, shared with data worker processes.

    The training pipeline replaces an image that fails to load, counts it here once per
    epoch (when it is the sample's own image, not a mosaic or mixup partner), and warns
    once per file; the engine reports ``take_epoch_count(epoch)`` at the end of an epoch.
    The counters live in shared memory created here, so worker *threads* and worker
    *processes started by fork* (MindSpore's default) update the same numbers. Under the
    ``spawn`` start method workers receive pickled copies whose counts the main process
    cannot see (and each process warns once per file on its own).
    """

    # Epochs are counted modulo this many slots; a slot is cleared when it is taken.
    SLOTS = 1024

    def __init__(self) -> None:
        self._counts = multiprocessing.Array("q", self.SLOTS)  # int64, with a lock
        self._local = [0] * self.SLOTS  # used instead in a pickled copy
        self._warned: set[str] = set()

    def __getstate__(self) -> dict:
        # A shared Array can only be inherited, not pickled: a pickled copy counts privately.
        state = self.__dict__.copy()
        state["_counts"] = None
        return state

    def count(self, epoch: int) -> None:
        """Count one unreadable image in ``epoch``."""
        slot = epoch % self.SLOTS
        if self._counts is None:
            self._local[slot] += 1
            return
        with self._counts.get_lock():
            self._counts[slot] += 1

    def first_failure(self, path: str) -> bool:
        """True the first time ``path`` fails in this process: the caller warns then."""
        new = path not in self._warned
        self._warned.add(path)
        return new

    def take_epoch_count(self, epoch: int) -> int:
        """Unreadable images replaced in ``epoch`` (0-based, as the sampler counts), and
        reset that count. Counts from spawn-started worker processes are not included."""
        slot = epoch % self.SLOTS
        if self._counts is None:
            count, self._local[slot] = self._local[slot], 0
            return count
        with self._counts.get_lock():
            count = int(self._counts[slot])
            self._counts[slot] = 0
        return count
