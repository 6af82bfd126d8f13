"""Data settings as users type them: workers auto or clamped. (Sizes: tests/common.)"""

from __future__ import annotations

import logging

import pytest

from msdet.common.host import LOCAL_RANKS_VAR, available_cores, ranks_on_this_host
from msdet.data.config import resolve_num_workers


def test_auto_workers_take_half_the_cores_of_a_rank(monkeypatch):
    monkeypatch.delenv(LOCAL_RANKS_VAR, raising=False)
    assert resolve_num_workers("auto", cores=2) == 1
    assert resolve_num_workers("auto", cores=1) == 1
    assert resolve_num_workers("auto", cores=8) == 4
    assert resolve_num_workers("auto", cores=192) == 8  # capped
    # Eight ranks on one 192-core host: 24 cores each, 8 workers (the cap); on 16 cores, 1.
    assert resolve_num_workers("auto", world_size=8, cores=192) == 8
    assert resolve_num_workers("auto", world_size=8, cores=16) == 1


def test_explicit_workers_are_clamped_with_one_log_line(monkeypatch, caplog):
    monkeypatch.delenv(LOCAL_RANKS_VAR, raising=False)
    with caplog.at_level(logging.INFO, logger="msdet.data.config"):
        assert resolve_num_workers(4, cores=2) == 2
        assert resolve_num_workers(4, cores=2) == 2
    lines = [r.getMessage() for r in caplog.records]
    assert lines == ["data.num_workers=4: only 2 CPU cores per rank here, using 2 workers"]
    assert resolve_num_workers(2, cores=2) == 2
    assert resolve_num_workers(3, world_size=2, cores=4) == 2  # two ranks share the 4 cores


def test_ranks_per_host_come_from_the_launcher(monkeypatch):
    monkeypatch.delenv(LOCAL_RANKS_VAR, raising=False)
    assert ranks_on_this_host(8) == 8  # unknown: assume every rank is here
    monkeypatch.setenv(LOCAL_RANKS_VAR, "4")  # 8 ranks over two hosts
    assert ranks_on_this_host(8) == 4
    assert resolve_num_workers("auto", world_size=8, cores=16) == 2


@pytest.mark.parametrize("value", [0, -1, "many", 1.5])
def test_bad_worker_counts_name_the_key(value):
    with pytest.raises(ValueError, match=r"data\.num_workers"):
        resolve_num_workers(value, cores=4)


def test_available_cores_is_what_the_process_may_use():
    import os

    assert 1 <= available_cores() <= (os.cpu_count() or 1)
