"""Model surgery for data parallelism: BatchNorm layers whose statistics span every rank."""

from __future__ import annotations

from mindspore import nn


def convert_sync_batchnorm(network: nn.Cell) -> int:
    """Replace every ``nn.BatchNorm2d`` in ``network`` by an ``nn.SyncBatchNorm`` (all ranks).

    Keeps eps, momentum and the current values of gamma/beta/moving statistics, and the
    parameter names (checkpoints stay interchangeable with plain BatchNorm). Call after the
    runtime initialised the ranks and before building the optimizer/EMA. Returns how many
    layers were replaced.
    """
    replaced = 0
    for _, cell in list(network.cells_and_names()):
        for child_name, child in list(cell.name_cells().items()):
            if type(child) is not nn.BatchNorm2d:
                continue
            sync = nn.SyncBatchNorm(
                child.num_features,
                eps=child.eps,
                momentum=1.0 - child.momentum,  # _BatchNorm stores 1 - momentum
                affine=child.gamma.requires_grad,
            )
            setattr(cell, child_name, sync)
            # Attaching a Cell names its parameters relative to the parent only ("bn.gamma"):
            # give them back the full names checkpoints and the optimizer groups rely on.
            for attr in ("gamma", "beta", "moving_mean", "moving_variance"):
                src, dst = getattr(child, attr), getattr(sync, attr)
                dst.set_data(src.data.copy())
                dst.name = src.name
            replaced += 1
    return replaced
