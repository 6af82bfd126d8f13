"""ops.ema: the model EMA's update in one operator, writing the flat buffer in place,
against ModelEMA on MindSpore's operators (Reshape, Concat, Lerp, Assign)."""

from __future__ import annotations

import mindspore as ms
import numpy as np
import pytest
from mindspore import Parameter, nn

from msdet.engine.training.ema import ModelEMA
from tests.support.modes import execution_mode

SHAPES = ((4, 3, 3, 3), (7,), (5, 2), ())


class Weights(nn.Cell):
    def __init__(self):
        super().__init__()
        rng = np.random.default_rng(0)
        for i, shape in enumerate(SHAPES):
            value = rng.standard_normal(shape).astype(np.float32)
            setattr(self, f"p{i}", Parameter(ms.Tensor(value), name=f"p{i}.weight"))


def _averages(library, mode):
    with execution_mode(mode):
        net = Weights()
        ema = ModelEMA(net, decay=0.9, library=library, eager=mode == ms.PYNATIVE_MODE)
        rng = np.random.default_rng(1)
        for _ in range(4):
            for param in net.get_parameters():
                # values over 2^-8 .. 2^8 of their scale: a fused multiply-add would show
                scale = np.exp2(rng.uniform(-8, 8, param.shape))
                value = rng.standard_normal(param.shape) * scale
                param.set_data(ms.Tensor(value.astype(np.float32)))
            ema()
        return ema, ema.buffer.asnumpy().copy(), float(ema.updates.asnumpy())


@pytest.mark.slow
@pytest.mark.parametrize("mode", [ms.GRAPH_MODE, ms.PYNATIVE_MODE])
def test_one_operator_gives_the_lerps_bits(library, mode):
    flat, got, got_updates = _averages(library, mode)
    ops_ema, expected, updates = _averages(None, mode)
    assert flat.flat is not None and ops_ema.flat is None
    assert got.shape == expected.shape == (sum(int(np.prod(s)) for s in SHAPES),)
    assert np.abs(expected).max() > 1.0  # the averages moved from the start
    np.testing.assert_array_equal(got, expected)
    assert got_updates == updates == 4.0
