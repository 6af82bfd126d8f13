"""engine.runtime.kernel_benchmarks: the benchmarks behind runtime.cpu_kernels=auto, at YOLOX-nano's shapes."""

from __future__ import annotations

from collections import Counter

import numpy as np

from msdet.engine.runtime import kernel_benchmarks as bench
from msdet.engine.runtime import kernel_benchmarks_training as training_bench


def test_the_sgd_benchmark_updates_yolox_nanos_parameters():
    from msdet.engine.training.optim import split_decay_params
    from msdet.models.yolox import build_model, load_model_config

    decay, no_decay = split_decay_params(build_model(load_model_config("yolox_nano"), 80))
    shapes = training_bench.nano_parameter_shapes()
    assert sum(int(np.prod(s)) for s in shapes) == 912_159
    # The benchmark decays what has more than one dimension: the optimizer's own split.
    assert Counter(s for s in shapes if len(s) > 1) == Counter(tuple(p.shape) for p in decay)
    assert Counter(s for s in shapes if len(s) == 1) == Counter(tuple(p.shape) for p in no_decay)


def test_the_inputs_are_at_the_training_steps_shapes():
    rng = np.random.default_rng(0)
    (x,) = bench.blocks_inputs(rng, {})
    assert x.shape == (8, 16, 160, 160)
    assert bench.focus_inputs(rng, {})[0].shape == (8, 3, 320, 320)
    assert [t.shape for t in bench.pointwise_inputs(rng, {})] == [
        (8, cin, side, side) for cin, _, side in bench.POINTWISE
    ]
    assert [t.shape for t in bench.upsample_inputs(rng, {})] == [(8, 128, 10, 10), (8, 64, 20, 20)]
    assert bench.transpose_inputs(rng, {})[0].shape == (8, 85, 2100)
    pred, obj, cls, grid, stride, boxes, classes, mask = training_bench.assigner_inputs(rng, {})
    assert pred.shape == (8, 2100, 4) and cls.shape == (8, 2100, 80) and boxes.shape == (8, 50, 4)
    assert mask.asnumpy().sum(1).tolist() == [5.0] * 8  # 5 real boxes among 50 rows
    (preds,) = training_bench.nms_inputs(rng, {})
    assert preds.shape == (8, 3549, 85)


def test_the_focus_benchmark_has_yolox_nanos_stem():
    from msdet.models.yolox import build_model, load_model_config

    stem = build_model(load_model_config("yolox_nano"), 80).backbone.backbone.stem
    channels, width, _ = bench.FOCUS
    assert tuple(stem.conv.conv.weight.shape) == (width, 4 * channels, 3, 3)


def test_the_pointwise_benchmark_has_yolox_nanos_commonest_1x1_convolutions():
    from mindspore import nn

    from msdet.models.yolox import build_model, load_model_config

    model = build_model(load_model_config("yolox_nano"), 80)
    found = Counter(
        (cell.in_channels, cell.out_channels)
        for _, cell in model.cells_and_names()
        if isinstance(cell, nn.Conv2d) and cell.kernel_size == (1, 1) and not cell.has_bias
    )
    assert sum(found.values()) == 73
    for cin, cout, _ in bench.POINTWISE:
        assert found[(cin, cout)] >= 5
