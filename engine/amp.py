"""Mixed precision on the network (the loss computes in float32): MindSpore's AMP levels."""

from __future__ import annotations

import os

import mindspore as ms
from mindspore import nn


def apply_amp(net: nn.Cell, rt) -> None:
    """Mixed precision at ``rt.amp_level`` (O0: nothing), run from the run folder."""
    if rt.amp_level == "O0":
        return
    # auto_mixed_precision writes ./rewritten_network/ (its rewrite log): keep it in the run.
    # (os.chdir by hand: contextlib.chdir is Python 3.11+.)
    previous = os.getcwd()
    os.chdir(rt.run_dir)
    try:
        mixed_precision(net, rt.amp_level)
    finally:
        os.chdir(previous)


def mixed_precision(net: nn.Cell, level: str) -> None:
    """MindSpore's AMP at ``level``; at O2 SyncBatchNorm stays in float32 like BatchNorm.

    MindSpore's O2 black list (``ms.amp.get_black_list()``) names BatchNorm1d/2d/3d and
    LayerNorm only, so the SyncBatchNorm layers of ``runtime.sync_bn`` would compute their
    statistics in float16. O2 is a black-list conversion; this is the same one with
    SyncBatchNorm added.
    """
    if level == "O2":
        black_list = ms.amp.get_black_list() + [nn.SyncBatchNorm]
        ms.amp.custom_mixed_precision(net, black_list=black_list)
    else:
        ms.amp.auto_mixed_precision(net, level)
