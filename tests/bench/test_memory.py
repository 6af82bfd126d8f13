"""msdet.bench.memory's reading of this process's memory: resident, peak, anonymous and file pages."""

from __future__ import annotations

import mmap
import sys

import numpy as np
import pytest

from msdet.bench.memory import _status_mb

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="reads /proc/self/status")


def test_resident_memory_splits_into_anonymous_and_file_pages_and_follows_an_allocation():
    before = _status_mb()
    assert before["anon"] > 0 and before["file"] > 0  # a Python process has both
    # VmRSS = RssAnon + RssFile + RssShmem: the two parts never exceed the whole
    assert before["anon"] + before["file"] <= before["rss"] + 1.0
    assert before["peak"] >= before["rss"] - 1.0

    # 64 MiB of fresh anonymous pages, each written so that it is resident. mmap, not
    # malloc: a long-lived process (a test worker) can hand malloc pages it already holds.
    size = 64 * 1024 * 1024
    block = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    try:
        view = np.frombuffer(block, dtype=np.uint8)
        view[::4096] = 1
        after = _status_mb()
        del view
    finally:
        block.close()
    assert after["anon"] - before["anon"] >= 60.0
    assert after["peak"] >= after["rss"] - 1.0
