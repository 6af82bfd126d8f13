"""How long evaluation spends per image in each stage, as YOLOX and Ultralytics report it:
inference and NMS, and the time the loop waited for its next batch.

Pre-processing (reading, letterboxing) runs in the data pipeline's workers while the network
runs, so its own time is not on the evaluation's clock: what is measured is how long the
loop waited for a batch, the part of it that inference did not hide.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Mapping

SPEED_STAGES = ("data_wait", "inference", "nms")
# A wait for data below this (ms per image) is the pipeline keeping up: not shown.
SHOWN_WAIT_MS = 0.05


class SpeedMeter:
    """Wall time per stage (waiting for data, inference, NMS), reported in ms per image.

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

    def ms_per_image(self) -> dict[str, float] | None:
        """Milliseconds per image for each stage; None when no image was timed (a val split
        of one batch: that batch is the warm-up)."""
        if self.images == 0:
            return None
        return {stage: 1000.0 * s / self.images for stage, s in self.seconds.items()}


def format_speed(ms_per_image: Mapping[str, float] | None) -> str:
    """One line: ``Speed: 20.5 ms inference, 3.1 ms NMS per image``, with the wait for data
    when there was one (``..., 1.2 ms waiting for data per image``)."""
    if ms_per_image is None:
        return "Speed: not measured (the val split is one batch, which warms the graphs up)"
    names = {"inference": "inference", "nms": "NMS", "data_wait": "waiting for data"}
    shown = [
        k
        for k in ("inference", "nms", "data_wait")
        if k in ms_per_image and (k != "data_wait" or ms_per_image[k] >= SHOWN_WAIT_MS)
    ]
    return (
        "Speed: " + ", ".join(f"{ms_per_image[k]:.1f} ms {names[k]}" for k in shown) + " per image"
    )
