"""Multi-scale training: the size schedule, the in-graph resize and one graph per size."""

from __future__ import annotations

import json
import os

import mindspore as ms
import numpy as np
import pytest
from mindspore import nn

from msdet.engine.training import graphs
from msdet.engine.training.multiscale import MultiScaleResize
from msdet.engine.training.schedule import all_sizes, scheduled_size, sink_steps, size_range
from tests.support import run_python
from tests.support.multiscale import train_probe


def test_sizes_are_the_originals_range():
    assert size_range((640, 640), 5) == (15, 25)
    sizes = all_sizes((640, 640), 5)
    # YOLOX 0.3.0: 640 +- 5 * 32, 11 sizes (the comment in its yolox_base.py says so too)
    assert sizes[0] == (480, 480) and sizes[-1] == (800, 800) and len(sizes) == 11
    # Non-square: the width follows the base aspect as 32 * int(k * w / h).
    assert all_sizes((256, 320), 1) == [(224, 256), (256, 320), (288, 352)]


def test_schedule_is_deterministic_windowed_and_seeded():
    base, r = (320, 320), 5
    seq = [scheduled_size(base, r, 7, s, 10) for s in range(400)]
    assert seq[:10] == [base] * 10  # the first window runs at the base size, as the original
    for w in range(40):  # one size per window of 10 steps
        assert len(set(seq[10 * w : 10 * w + 10])) == 1
    assert set(seq) == set(all_sizes(base, r))  # 39 draws reach all 11 sizes
    assert seq == [scheduled_size(base, r, 7, s, 10) for s in range(400)]
    other = [scheduled_size(base, r, 8, s, 10) for s in range(400)]
    assert other != seq
    assert all(scheduled_size(base, 0, 7, s, 10) == base for s in range(0, 400, 10))
    assert scheduled_size(base, r, 7, 25, 5) == seq[50]  # window 5 of interval 5 = window 5


def test_bad_settings_are_named():
    with pytest.raises(ValueError, match="train.multiscale_range"):
        size_range((128, 128), 4)
    with pytest.raises(ValueError, match="train.multiscale_range"):
        size_range((320, 320), -1)
    with pytest.raises(ValueError, match="train.multiscale_interval"):
        scheduled_size((320, 320), 2, 0, 5, 0)
    with pytest.raises(ValueError, match="runtime.sink_size"):
        sink_steps(10, 100, 4)


def test_sink_size_stays_in_one_size_window():
    assert sink_steps(10, 1848, -1) == 2
    assert sink_steps(10, 100, -1) == 10
    assert sink_steps(10, 100, 5) == 5


class _Passthrough(nn.Cell):
    """Returns what the resize hands to the network-with-loss."""

    def construct(self, images, targets, mask):
        return images, targets, mask


def _resize(images, targets, base, size):
    cell = MultiScaleResize(_Passthrough(), base)
    cell.size = size
    out = cell(ms.Tensor(images), ms.Tensor(targets), ms.Tensor(np.ones(targets.shape[:2])))
    return out[0].asnumpy(), out[1].asnumpy()


def _batch(base, seed=0):
    rng = np.random.default_rng(seed)
    images = rng.uniform(0, 255, (2, 3, *base)).astype(np.float32)
    targets = np.concatenate(
        [rng.integers(0, 3, (2, 4, 1)), rng.uniform(4, 200, (2, 4, 4))], -1
    ).astype(np.float32)
    return images, targets


@pytest.mark.slow
def test_resize_at_base_size_is_identity_and_targets_scale():
    base = (128, 160)
    images, targets = _batch(base)
    same, t = _resize(images, targets, base, base)
    np.testing.assert_array_equal(same, images)
    np.testing.assert_array_equal(t, targets)
    resized, t = _resize(images, targets, base, (64, 224))
    assert resized.shape == (2, 3, 64, 224)
    np.testing.assert_allclose(t[..., 0], targets[..., 0])
    np.testing.assert_allclose(t[..., 1::2], targets[..., 1::2] * 224 / 160, rtol=1e-6)
    np.testing.assert_allclose(t[..., 2::2], targets[..., 2::2] * 64 / 128, rtol=1e-6)


@pytest.mark.slow
@pytest.mark.torch
@pytest.mark.parametrize("size", [(192, 224), (352, 416), (256, 320)])
def test_resize_matches_the_originals_preprocess(size):
    """Same batch through YOLOX's Exp.preprocess (F.interpolate bilinear,
    align_corners=False) and through msdet's in-graph resize."""
    from tests.support.torch_reference import require_yolox

    require_yolox()
    import torch
    from yolox.exp.yolox_base import Exp

    base = (256, 320)
    images, targets = _batch(base, seed=1)
    exp = Exp()
    exp.input_size = base
    ref_images, ref_targets = exp.preprocess(
        torch.from_numpy(images.copy()), torch.from_numpy(targets.copy()), size
    )
    ours, t = _resize(images, targets, base, size)
    assert ours.shape == tuple(ref_images.shape)
    # float32 rounding of the source coordinate (~3e-5 px near 300) times pixel steps of
    # up to 255: both sides are that far from the exact (float64) result. Measured 3.6e-3
    # with PyTorch's AVX2/AVX-512 kernels, 4.6e-5 with its scalar ones (ATEN_CPU_CAPABILITY
    # =default); 3 ulp of a coordinate below 512 px times 255 is 2.3e-2. align_corners or
    # a half-pixel shift would be off by tens.
    np.testing.assert_allclose(ours, ref_images.numpy(), rtol=0, atol=5e-2)
    np.testing.assert_allclose(t, ref_targets.numpy(), rtol=1e-6)


@pytest.mark.torch
def test_size_set_and_aspect_match_the_originals_random_resize():
    from tests.support.torch_reference import require_yolox

    require_yolox()
    import random

    from msdet.bench.torch_train import _multiscale_exp, _random_resize

    random.seed(0)
    exp = _multiscale_exp(320, 2)
    exp.input_size = (256, 352)  # non-square: the original keeps w/h as 32 * int(k * w/h)
    drawn = {tuple(_random_resize(exp)) for _ in range(100)}
    assert drawn == set(all_sizes((256, 352), 2))


@pytest.mark.slow
def test_schedule_drives_one_graph_per_size_and_resume_continues():
    base, seed, interval = (96, 128), 3, 1
    step, schedule, seen = train_probe(base, 4, 0, seed, interval)
    expected = [scheduled_size(base, 2, seed, s, interval) for s in range(12)]
    assert [(h, w) for h, w, _ in seen] == expected
    assert [cx for _, _, cx in seen] == pytest.approx([32.0 * w / 128 for _, w in expected])
    distinct = set(expected)
    assert len(distinct) >= 3 and len(expected) > len(distinct)  # sizes came back
    # Each size compiled once: one graph phase per size, reused when the size comes back.
    assert len(schedule.compiled) == len(distinct)
    assert len([p for p in step.compile_cache if p.startswith("train.")]) == len(distinct)
    # A resumed run (after epoch 2) continues the same sequence.
    _, _, resumed = train_probe(base, 4, 2, seed, interval)
    assert [(h, w) for h, w, _ in resumed] == expected[6:]


@pytest.mark.slow
def test_compile_cache_gets_each_size_its_own_graph(tmp_path):
    """MindSpore's persistent cache finds graphs by compile order: two runs that meet the
    sizes in different orders must still each run every size at its own size."""
    env = dict(os.environ, MS_COMPILER_CACHE_ENABLE="1", MS_COMPILER_CACHE_PATH=str(tmp_path))
    for seed in (3, 5):  # different first-use orders (checked below)
        stdout = run_python(["-m", "tests.engine.training.multiscale_probe", str(seed)], env=env)
        seen = json.loads(stdout.strip().splitlines()[-1])
        expected = [list(scheduled_size((96, 128), 2, seed, s, 1)) for s in range(12)]
        assert [s[:2] for s in seen] == expected
    assert os.listdir(tmp_path / "rank_0" / "graph_cache")
    first_use = [
        list(dict.fromkeys(tuple(scheduled_size((96, 128), 2, seed, s, 1)) for s in range(12)))
        for seed in (3, 5)
    ]
    assert first_use[0] != first_use[1]


def test_with_target_buckets_each_size_has_a_graph_per_bucket(monkeypatch):
    """Sizes x buckets graphs: compiled first in (size, bucket) order when asked (the
    compile cache's order), each once, and a step finds its own compiled."""
    from msdet.engine.training.multiscale import MultiScaleSchedule
    from tests.support.training import RecordingNetwork, RunContext, training_batch

    monkeypatch.setattr(graphs, "release_free_heap", lambda: None)

    class Network(RecordingNetwork):
        phase = "train"

        def compile(self, *inputs):
            self.compiled.append((self.phase, inputs[1].shape[1]))

    base = (96, 128)
    resize = MultiScaleResize(nn.Cell(), base)
    schedule = MultiScaleSchedule(
        resize, 1, 0, steps_per_sink=30, interval=1, compile_all_first=True, buckets=(8, 50)
    )
    net = Network()
    for rows in (8, 50, 8):
        ctx = RunContext(train_network=net, train_dataset_element=training_batch(rows))
        schedule.on_train_step_begin(ctx)
    phases = [f"train.{h}x{w}" for h, w in all_sizes(base, 1)]
    assert net.compiled == [(p, rows) for p in phases for rows in (8, 50)]
    assert len(schedule.compiled) == 6
