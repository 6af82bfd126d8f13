"""NMSWithMask's first-use check: with the evaluation's own settings and candidate count,
once per process, and the same answer on every rank."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest
from omegaconf import OmegaConf

from msdet.engine.runtime import ascend, distributed

EVAL = OmegaConf.create({"pre_nms_topk": 1000, "conf_thresh": 0.001, "nms_iou": 0.6,
                         "max_det": 300, "class_agnostic": False})  # fmt: skip


@pytest.fixture
def probes(monkeypatch):
    """device_nms_problem's calls, answering from ``answers`` (default: it agrees)."""
    calls, answers = [], {}

    def probe(max_boxes, num_classes=80, seed=0, settings=None):
        calls.append((max_boxes, num_classes, settings))
        return answers.get(max_boxes)

    monkeypatch.setattr(ascend, "device_nms_problem", probe)
    monkeypatch.setattr(ascend, "_NMS_PROBES", {})
    return calls, answers


def runtime(**kwargs):
    fields = {"device": "Ascend", "host_nms": False, "distributed": False, **kwargs}
    return SimpleNamespace(**fields)


def test_the_check_runs_once_per_process_with_the_evaluations_candidates(probes):
    calls, _ = probes
    rt = runtime()
    assert ascend.nms_on_host(rt, EVAL, 80, [320, 320]) is False
    assert ascend.nms_on_host(rt, EVAL, 80, [320, 320]) is False  # cached: no second run
    settings = {"conf_thresh": 0.001, "iou_thresh": 0.6, "max_det": 300, "class_agnostic": False}
    assert calls == [(1000, 80, settings)]  # eval.pre_nms_topk, not the chip's 2,048
    ascend.nms_on_host(rt, EVAL, 80, [128, 128])  # 336 anchors: fewer candidates than 1,000
    assert calls[-1][0] == 336 == ascend.evaluation_candidates(1000, [128, 128])


def test_a_failed_check_sends_nms_to_the_host_with_one_warning(probes, caplog):
    calls, answers = probes
    answers[1000] = "NMSWithMask kept 90 detections of 1000 candidates where the host keeps 91"
    with caplog.at_level(logging.WARNING, logger="msdet.engine.runtime.ascend"):
        assert ascend.nms_on_host(runtime(), EVAL, 80, [640, 640]) is True
        assert ascend.nms_on_host(runtime(), EVAL, 80, [640, 640]) is True
    assert len(calls) == 1 and caplog.text.count("NMS runs on the host") == 1


def test_every_rank_takes_the_host_when_one_rank_failed(probes, monkeypatch):
    calls, _ = probes
    seen = []
    monkeypatch.setattr(distributed, "any_rank", lambda flag: seen.append(flag) or True)
    assert ascend.nms_on_host(runtime(distributed=True), EVAL, 80, [320, 320]) is True
    assert seen == [False] and len(calls) == 1  # this rank passed; another one did not


def test_no_check_where_the_chip_or_the_device_decides(probes):
    calls, _ = probes
    assert ascend.nms_on_host(runtime(host_nms=True), EVAL, 80, [320, 320]) is True
    assert ascend.nms_on_host(runtime(device="CPU"), EVAL, 80, [320, 320]) is False
    assert calls == []
