"""msdet's own training step on 2 ranks (tests/e2e/dp_step.py runs them): each rank's fixed
batches and network, and :func:`reference`, the same thing computed in one process: the same
initial weights, for each step the gradient of each rank's batch on its own (so BatchNorm
statistics and the loss's normalisation by foreground anchors are per rank, as on the
ranks), their mean, and one update by the same optimizer. A reducer that summed instead of
averaging, or that reduced nothing, ends elsewhere."""

from __future__ import annotations

import os

import numpy as np

from msdet.bench.common import synthetic_batch

RANKS, STEPS, LR = 2, 2, 0.02
BATCH, SIZE, NUM_CLASSES, MAX_OBJECTS, OBJECTS = 2, 64, 3, 8, 3
RESULT_FILE, INITIAL_FILE = "step_rank{rank}.npz", "initial_weights.npz"


# Both sides on MindSpore's operators: the kernel choice is measured per thread count, and
# the ranks run one thread each where the reference would run two; one thread on both
# sides also keeps the summation order of every kernel the same.
OVERRIDES = (
    "runtime=cpu",
    "runtime.cpu_kernels=native",
    "runtime.threads=1",
    "model.depthwise=false",
)


def rank_batch(rank: int, step: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The fixed batch rank ``rank`` trains on at step ``step``."""
    return synthetic_batch(BATCH, SIZE, NUM_CLASSES, MAX_OBJECTS, OBJECTS, seed=100 * step + rank)


def _mean_of_two(a, b):
    return (a + b) / 2.0


def network(cfg):
    from msdet.models.loss import YOLOXLoss
    from msdet.models.yolox import build_model

    return build_model(cfg.model, NUM_CLASSES), YOLOXLoss(NUM_CLASSES)


def reference(cfg, run_dir: str) -> dict[str, np.ndarray]:
    """The 2-rank step computed in this process (``cfg``: the same composed config, set up
    for one process); returns the final trainable weights and the losses [step, rank]."""
    import mindspore as ms
    from mindspore import nn, ops

    from msdet.engine.training.optim import build_optimizer
    from msdet.models.loss import DetectorWithLoss

    net, loss = network(cfg)
    initial = np.load(os.path.join(run_dir, INITIAL_FILE))
    # Names now: wrapping the optimizer in a Cell below renames its parameters in place.
    params = [(p.name, p) for p in net.trainable_params()]
    for name, p in params:
        p.set_data(ms.Tensor(initial[name]))
    optimizer = build_optimizer(net, np.full(STEPS, LR, np.float32), cfg.train)
    with_loss = DetectorWithLoss(net, loss)

    class Gradients(nn.Cell):
        def __init__(self):
            super().__init__()
            self.with_loss = with_loss  # a sub-Cell: set_train reaches the network
            self.grad_fn = ms.value_and_grad(self.total, None, optimizer.parameters)

        def total(self, images, targets, mask):
            return self.with_loss(images, targets, mask)[0]

        def construct(self, images, targets, mask):
            return self.grad_fn(images, targets, mask)

    class Update(nn.Cell):
        def __init__(self):
            super().__init__()
            self.optimizer = optimizer
            self.hyper_map = ops.HyperMap()

        def construct(self, first, second):
            # What the ranks' AllReduce(sum) / 2 computes.
            return self.optimizer(self.hyper_map(_mean_of_two, first, second))

    gradients, update = Gradients(), Update()
    gradients.set_train(True)
    losses = np.zeros((STEPS, RANKS), np.float32)
    for i in range(STEPS):
        per_rank = []
        for r in range(RANKS):
            value, grads = gradients(*(ms.Tensor(a) for a in rank_batch(r, i)))
            losses[i, r] = float(value.asnumpy())
            per_rank.append(grads)
        update(*per_rank)
    return {name: p.asnumpy() for name, p in params}, losses
