"""A tiny MLP trained data parallel (tests/e2e/dp_tiny.py runs its ranks): the fixed
regression problem, its initial weights and the training both the ranks and the one-process
reference run. With equal shards and a mean-reduced loss, N ranks must end exactly where one
process training on the whole batch ends."""

from __future__ import annotations

import numpy as np

SAMPLES, FEATURES, HIDDEN = 64, 8, 16
STEPS, LR = 20, 0.05
RESULT_FILE = "tiny_rank{rank}.npz"
FAIL_RANK_VAR, FAIL_CODE = "TINY_FAIL_RANK", 3  # this rank exits with FAIL_CODE after init
FAIL_SCHEDULER_VAR = "TINY_FAIL_SCHEDULER"  # msrun's scheduler exits before init
FOREVER_VAR = "TINY_FOREVER"  # the ranks step until they are killed, printing each step


def tiny_problem() -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]:
    """The fixed data (x, y) and initial weights every rank and the reference use."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(SAMPLES, FEATURES)).astype(np.float32)
    y = (np.sin(x[:, :1]) + 0.5 * x[:, 1:2] ** 2).astype(np.float32)
    weights = {
        "0.weight": rng.normal(0, 0.5, (HIDDEN, FEATURES)).astype(np.float32),
        "0.bias": np.zeros(HIDDEN, np.float32),
        "2.weight": rng.normal(0, 0.5, (1, HIDDEN)).astype(np.float32),
        "2.bias": np.zeros(1, np.float32),
    }
    return x, y, weights


def mlp_step(weights: dict):
    """(the MLP from ``weights``, its SGD training step)."""
    import mindspore as ms
    from mindspore import nn

    net = nn.SequentialCell(nn.Dense(FEATURES, HIDDEN), nn.ReLU(), nn.Dense(HIDDEN, 1))
    for name, param in net.parameters_and_names():
        param.set_data(ms.Tensor(weights[name]))
    step = nn.TrainOneStepCell(
        nn.WithLossCell(net, nn.MSELoss()), nn.SGD(net.trainable_params(), learning_rate=LR)
    )
    step.set_train(True)
    return net, step


def train_tiny(x: np.ndarray, y: np.ndarray, weights: dict) -> tuple[dict, list[float]]:
    """``STEPS`` SGD steps of the MLP on (x, y); returns the final weights and the losses."""
    import mindspore as ms

    net, step = mlp_step(weights)
    xt, yt = ms.Tensor(x), ms.Tensor(y)
    losses = [float(step(xt, yt).asnumpy()) for _ in range(STEPS)]
    return {name: p.asnumpy() for name, p in net.parameters_and_names()}, losses
