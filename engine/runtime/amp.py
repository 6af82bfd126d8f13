"""Mixed precision on the network (the loss computes in float32): MindSpore's AMP levels.

MindSpore is imported inside the functions: ``engine.training.run_folder`` reads
:data:`AMP_FOLDER` before the process environment is set (``engine.runtime.process``), and
MindSpore loads OpenMP, which reads its settings once, when it loads.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mindspore import nn

AMP_FOLDER = "amp"  # in the run folder: where MindSpore's O1 rewrite runs and logs


def apply_amp(net: nn.Cell, rt) -> nn.Cell:
    """Mixed precision at ``rt.amp_level`` (O0: ``net`` itself), run from the run folder.

    Returns the network to train: use it instead of ``net`` from then on (at O1 MindSpore
    rewrites the network into a new Cell; its parameters are ``net``'s, by name and object).
    """
    if rt.amp_level == "O0":
        return net
    if rt.amp_level != "O1":  # O2/O3 convert in place: no rewrite, no folder
        return mixed_precision(net, rt.amp_level)
    # O1's rewrite writes ./rewritten_network/ (its log), and it treats every module under the
    # working directory as user code to rewrite: run from the repository root, where a
    # .venv holds MindSpore itself, it descends into MindSpore's own functions and fails on
    # their C++ primitives. A folder of its own in the run folder holds neither.
    # (os.chdir by hand: contextlib.chdir is Python 3.11+.)
    folder = os.path.join(rt.run_dir, AMP_FOLDER)
    os.makedirs(folder, exist_ok=True)
    previous = os.getcwd()
    os.chdir(folder)
    try:
        return mixed_precision(net, rt.amp_level)
    finally:
        os.chdir(previous)


def mixed_precision(net: nn.Cell, level: str) -> nn.Cell:
    """MindSpore's AMP at ``level``, returning the network to use; at O2 SyncBatchNorm stays
    in float32 like BatchNorm.

    O1 (white list: convolutions, matmuls) rewrites the network and returns a new one
    (``train/amp.py``, ``_auto_mixed_precision_rewrite``: the original must not be used
    after); O2 and O3 convert in place but wrap the result in a float32 output cast that only
    the returned network has. Keeping the returned network is what makes each level real.

    MindSpore's O2 black list (``ms.amp.get_black_list()``) names BatchNorm1d/2d/3d and
    LayerNorm only, so the SyncBatchNorm layers of ``runtime.sync_bn`` would compute their
    statistics in float16. O2 is a black-list conversion; this is the same one with
    SyncBatchNorm added.
    """
    import mindspore as ms
    from mindspore import nn

    if level == "O2":
        black_list = ms.amp.get_black_list() + [nn.SyncBatchNorm]
        return ms.amp.custom_mixed_precision(net, black_list=black_list)
    return ms.amp.auto_mixed_precision(net, level)
