"""How long evaluation spends per image in each stage (preprocess, inference, NMS), as
YOLOX and Ultralytics report it."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Mapping

SPEED_STAGES = ("preprocess", "inference", "nms")


class SpeedMeter:
    """Wall time per stage (pre-process, inference, NMS), reported in ms per image.

    Stop a stage's clock only after its outputs are on the host (``.asnumpy()``): device
    execution is asynchronous. Call :meth:`reset` after a warm-up batch so that graph
    compilation does not count.
    """

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        """Forget all timings and images."""
        self.seconds = dict.fromkeys(SPEED_STAGES, 0.0)
        self.images = 0

    @contextlib.contextmanager
    def measure(self, stage: str) -> Iterator[None]:
        """Add the time spent in the ``with`` block to ``stage``."""
        if stage not in self.seconds:
            raise ValueError(f"unknown stage {stage!r}; use one of {SPEED_STAGES}")
        start = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[stage] += time.perf_counter() - start

    def add_images(self, n: int) -> None:
        """Count ``n`` more images towards the per-image averages."""
        self.images += int(n)

    def ms_per_image(self) -> dict[str, float]:
        """Milliseconds per image for each stage (0 before any image was counted)."""
        n = max(self.images, 1)
        return {stage: 1000.0 * s / n for stage, s in self.seconds.items()}


def format_speed(ms_per_image: Mapping[str, float]) -> str:
    """One line: ``Speed: 1.2 ms pre-process, 20.5 ms inference, 3.1 ms NMS per image``."""
    names = {"preprocess": "pre-process", "inference": "inference", "nms": "NMS"}
    parts = [f"{ms_per_image[k]:.1f} ms {names[k]}" for k in SPEED_STAGES if k in ms_per_image]
    return "Speed: " + ", ".join(parts) + " per image"
