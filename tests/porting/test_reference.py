"""The torchvision stand-in the PyTorch reference runs with (YOLOX's postprocess calls
``torchvision.ops.batched_nms``): it is part of the reference, so it is checked here
against an independent implementation, msdet's numpy greedy NMS, and against
torchvision's documented contract (kept indices in decreasing score order)."""

from __future__ import annotations

import sys
import types

import numpy as np
import pytest

from msdet.ops.nms import greedy_nms
from msdet.porting.reference import _batched_nms, _greedy_nms, install_torchvision_standin
from tests.support.torch_reference import require_yolox

pytestmark = pytest.mark.torch


@pytest.fixture(autouse=True)
def _reference():
    require_yolox()  # torch (and the original) or skip; CI requires it


def random_boxes(rng, n: int, tie_groups: int = 0) -> tuple[np.ndarray, np.ndarray]:
    xy = rng.uniform(0, 100, (n, 2))
    wh = rng.uniform(5, 40, (n, 2))
    boxes = np.concatenate((xy, xy + wh), 1).astype(np.float32)
    scores = rng.uniform(0, 1, n).astype(np.float32)
    if tie_groups:  # many equal scores: the order among them must be the input order
        scores = rng.integers(0, tie_groups, n).astype(np.float32) / tie_groups
    return boxes, scores


def standin_nms(boxes, scores, thr):
    import torch

    return _greedy_nms(torch.from_numpy(boxes), torch.from_numpy(scores), thr).numpy()


@pytest.mark.parametrize("seed,n,ties,thr", [(0, 200, 0, 0.5), (1, 300, 4, 0.45), (2, 50, 1, 0.3)])
def test_nms_equals_numpy_greedy(seed, n, ties, thr):
    rng = np.random.default_rng(seed)
    boxes, scores = random_boxes(rng, n, ties)
    boxes[5] = boxes[4]  # an exact duplicate: IoU 1
    ours = standin_nms(boxes, scores, thr)
    np.testing.assert_array_equal(ours, greedy_nms(boxes, scores, thr))
    assert (np.diff(scores[ours]) <= 0).all()  # torchvision: decreasing score order
    assert 0 < len(ours) < n


def test_nms_threshold_is_strict_and_empty_input_is_empty():
    import torch

    boxes = np.array([[0, 0, 10, 10], [0, 0, 10, 5]], np.float32)  # IoU exactly 0.5
    scores = np.array([0.9, 0.8], np.float32)
    assert standin_nms(boxes, scores, 0.5).tolist() == [0, 1]  # IoU > thr suppresses
    assert standin_nms(boxes, scores, 0.49).tolist() == [0]
    empty = _batched_nms(torch.zeros((0, 4)), torch.zeros(0), torch.zeros(0), 0.5)
    assert empty.shape == (0,) and empty.dtype == torch.int64


def test_batched_nms_is_per_class_nms():
    import torch

    rng = np.random.default_rng(3)
    boxes, scores = random_boxes(rng, 240, tie_groups=8)
    labels = rng.integers(0, 4, len(boxes))
    kept = _batched_nms(
        torch.from_numpy(boxes), torch.from_numpy(scores), torch.from_numpy(labels), 0.5
    ).numpy()
    expected = []
    for c in range(4):
        members = np.flatnonzero(labels == c)
        expected += members[greedy_nms(boxes[members], scores[members], 0.5)].tolist()
    assert sorted(kept.tolist()) == sorted(expected)
    assert (np.diff(scores[kept]) <= 0).all()
    # Overlapping boxes of different classes both survive.
    pair = np.array([[0, 0, 10, 10], [0, 0, 10, 10]], np.float32)
    out = _batched_nms(torch.from_numpy(pair), torch.tensor([0.9, 0.8]), torch.tensor([0, 1]), 0.5)
    assert out.tolist() == [0, 1]


def clear_torchvision(monkeypatch):
    for name in [m for m in sys.modules if m == "torchvision" or m.startswith("torchvision.")]:
        monkeypatch.delitem(sys.modules, name)


def test_a_real_torchvision_is_kept(monkeypatch, tmp_path):
    """An importable torchvision is used as it is: the stand-in only replaces a missing one."""
    clear_torchvision(monkeypatch)
    pkg = tmp_path / "torchvision"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("from . import ops\n")
    (pkg / "ops.py").write_text("def nms(*a):\n    return 'real'\n\nbatched_nms = nms\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert install_torchvision_standin() is False
    assert sys.modules["torchvision.ops"].nms() == "real"


def test_a_broken_torchvision_gets_the_standin(monkeypatch, tmp_path):
    """PyPI's CUDA torchvision beside CPU torch raises at import: the stand-in replaces it."""
    clear_torchvision(monkeypatch)
    pkg = tmp_path / "torchvision"
    pkg.mkdir()
    (pkg / "__init__.py").write_text(
        "raise RuntimeError('operator torchvision::nms does not exist')\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    assert install_torchvision_standin() is True
    assert sys.modules["torchvision.ops"].nms is _greedy_nms
    assert isinstance(sys.modules["torchvision"], types.ModuleType)
