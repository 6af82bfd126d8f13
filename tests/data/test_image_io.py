"""Image reading: colour conversions, truncation detection, shared unreadable counts."""

from __future__ import annotations

import multiprocessing
import pickle

import cv2
import numpy as np
import pytest

from msdet.data.image_io import ImageReadError, UnreadableImageStats, find_truncation, read_image


def gradient_bgr(h: int = 48, w: int = 64) -> np.ndarray:
    yy, xx = np.mgrid[0:h, 0:w]
    return np.dstack([xx * 3 % 256, yy * 5 % 256, (xx + yy) % 256]).astype(np.uint8)


def write_bytes(path, data: bytes) -> str:
    path.write_bytes(data)
    return str(path)


def encode(img: np.ndarray, ext: str, params: list[int] | None = None) -> bytes:
    ok, buf = cv2.imencode(ext, img, params or [])
    assert ok
    return buf.tobytes()


def test_colour_png_is_returned_unchanged(tmp_path):
    img = gradient_bgr()
    out = read_image(write_bytes(tmp_path / "a.png", encode(img, ".png")))
    assert out.dtype == np.uint8 and out.shape == (48, 64, 3)
    np.testing.assert_array_equal(out, img)


def test_jpeg_reads_close_to_the_original(tmp_path):
    img = gradient_bgr()
    out = read_image(
        write_bytes(tmp_path / "a.jpg", encode(img, ".jpg", [cv2.IMWRITE_JPEG_QUALITY, 95]))
    )
    assert out.shape == (48, 64, 3)
    assert np.abs(out.astype(int) - img).mean() < 4  # 0.52: integer DCT, same on every CPU


def test_grayscale_becomes_three_equal_channels(tmp_path):
    gray = gradient_bgr()[..., 0]
    out = read_image(write_bytes(tmp_path / "g.png", encode(gray, ".png")))
    assert out.shape == (48, 64, 3)
    for c in range(3):
        np.testing.assert_array_equal(out[..., c], gray)


def test_16bit_is_scaled_not_wrapped(tmp_path):
    values = np.array([0, 257, 257 * 100, 65535], dtype=np.uint16)
    img16 = np.repeat(values[None, :, None], 3, axis=2)  # [1, 4, 3]
    out = read_image(write_bytes(tmp_path / "d.png", encode(img16, ".png")))
    np.testing.assert_array_equal(out[0, :, 0], [0, 1, 100, 255])


def test_rgba_drops_alpha_and_keeps_colour(tmp_path):
    bgra = np.zeros((8, 8, 4), dtype=np.uint8)
    bgra[..., :3] = (10, 20, 30)
    bgra[..., 3] = 0  # fully transparent: colours must still be kept, not blacked out
    out = read_image(write_bytes(tmp_path / "r.png", encode(bgra, ".png")))
    assert out.shape == (8, 8, 3)
    np.testing.assert_array_equal(out[3, 3], [10, 20, 30])


def test_truncated_jpeg_raises_naming_the_file(tmp_path):
    data = encode(gradient_bgr(240, 320), ".jpg")
    path = write_bytes(tmp_path / "cut.jpg", data[: len(data) * 2 // 3])
    with pytest.raises(ImageReadError, match="cut.jpg") as err:
        read_image(path)
    assert "FFD9" in str(err.value)


def test_truncated_png_raises(tmp_path):
    data = encode(gradient_bgr(), ".png")
    path = write_bytes(tmp_path / "cut.png", data[: len(data) - 20])
    with pytest.raises(ImageReadError, match="IEND"):
        read_image(path)


def test_jpeg_with_padding_after_the_end_marker_is_complete(tmp_path):
    data = encode(gradient_bgr(), ".jpg") + b"\x00" * 100
    assert find_truncation(data) is None
    assert read_image(write_bytes(tmp_path / "pad.jpg", data)).shape == (48, 64, 3)


@pytest.mark.parametrize(
    "name, content, message",
    [
        ("missing.jpg", None, "missing.jpg"),
        ("empty.jpg", b"", "empty"),
        ("text.jpg", b"this is not an image at all", "cannot decode"),
    ],
)
def test_unreadable_files_raise(tmp_path, name, content, message):
    path = tmp_path / name
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(ImageReadError, match=message):
        read_image(str(path))


def test_unreadable_stats_count_per_epoch_and_reset():
    stats = UnreadableImageStats()
    stats.count(0)
    stats.count(0)
    stats.count(1025)  # epochs share slots modulo 1024, each cleared when taken
    assert stats.take_epoch_count(0) == 2
    assert stats.take_epoch_count(0) == 0
    assert stats.take_epoch_count(1) == 1


def test_unreadable_stats_warn_once_per_file():
    stats = UnreadableImageStats()
    assert stats.first_failure("/d/a.jpg") is True
    assert stats.first_failure("/d/a.jpg") is False
    assert stats.first_failure("/d/b.jpg") is True


def _count_in_child(stats: UnreadableImageStats) -> None:
    stats.count(3)
    stats.count(3)


def test_unreadable_stats_see_forked_worker_counts():
    stats = UnreadableImageStats()
    child = multiprocessing.get_context("fork").Process(target=_count_in_child, args=(stats,))
    child.start()
    child.join(10)
    assert child.exitcode == 0
    assert stats.take_epoch_count(3) == 2


def test_pickled_unreadable_stats_count_privately():
    stats = UnreadableImageStats()
    copy = pickle.loads(pickle.dumps(stats))  # what a spawn-started worker receives
    copy.count(0)
    assert copy.take_epoch_count(0) == 1
    assert stats.take_epoch_count(0) == 0
