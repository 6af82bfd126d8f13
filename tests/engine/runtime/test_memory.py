"""engine.runtime.memory: the C heap handed back to the operating system."""

from __future__ import annotations

import os

import pytest

from msdet.engine.runtime.memory import release_free_heap


def _resident_mib() -> float:
    with open("/proc/self/status", encoding="utf-8") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS in /proc/self/status")


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="Linux only")
def test_release_free_heap_returns_freed_heap_to_the_os():
    chunks = [bytearray(64 * 1024) for _ in range(4000)]  # 250 MiB on the C heap
    pin = bytearray(64 * 1024)  # above them: glibc cannot trim the top by itself
    filled = _resident_mib()
    del chunks
    assert _resident_mib() > filled - 50  # freed, but still resident
    assert release_free_heap()
    assert _resident_mib() < filled - 200
    del pin
