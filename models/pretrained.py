"""Starting weights for fine-tuning: a msdet ``.ckpt`` or a PyTorch ``.pth``, any class count.

:func:`load_pretrained` copies every tensor whose name and shape fit the model. The
classification convolutions (``head.cls_preds.*``) are the only parameters whose shape
depends on the class count: when only they differ they keep the initialisation the
model was built with (PyTorch-style weights, YOLOX's prior bias), exactly as a fresh
model has them. Any other mismatch means a different architecture and is an error naming
the parameter, unless ``strict=False``, which keeps the fresh values and reports them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import mindspore as ms
import numpy as np
from mindspore import nn

from msdet.models.convert_pytorch import ConversionError, load_torch_checkpoint, mindspore_name
from msdet.models.weights import EMA_PREFIX, CheckpointError, network_weights, read_checkpoint

TORCH_SUFFIXES = (".pth", ".pt", ".pth.tar")
CLASS_HEAD = "head.cls_preds."
NETWORK_PREFIXES = ("backbone.", "head.")


@dataclass
class PretrainedReport:
    """What :func:`load_pretrained` did with each model parameter."""

    path: str
    used_ema: bool = False
    loaded: list[str] = field(default_factory=list)
    reinitialised: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # "name: why"
    unused: list[str] = field(default_factory=list)  # checkpoint tensors no parameter took

    def table(self, max_names: int = 6) -> str:
        """A short table: count and (the first) names of loaded/re-initialised/skipped."""
        rows = [
            ("loaded", self.loaded),
            ("re-initialised", self.reinitialised),
            ("skipped", self.skipped),
            ("unused in file", self.unused),
        ]
        lines = [f"pretrained weights from {self.path}{' (EMA)' if self.used_ema else ''}:"]
        for label, names in rows:
            shown = ", ".join(names[:max_names])
            more = f", ... (+{len(names) - max_names})" if len(names) > max_names else ""
            lines.append(f"  {label:<15}{len(names):>5}  {shown}{more}")
        return "\n".join(lines)


def read_pretrained(path: str, use_ema: bool = True) -> tuple[dict[str, np.ndarray], bool]:
    """Network weights (MindSpore names -> arrays) of a ``.ckpt`` or PyTorch ``.pth`` file.

    Returns the weights and whether they are a msdet checkpoint's EMA weights.
    """
    if path.endswith(TORCH_SUFFIXES):
        try:
            state = load_torch_checkpoint(path)
        except ConversionError as err:
            raise CheckpointError(f"train.pretrained: {err}") from err
        weights = {}
        for key, value in state.items():
            name = mindspore_name(key)
            if name is not None:
                weights[name] = np.asarray(value)
        return weights, False
    params = read_checkpoint(path)
    used_ema = use_ema and any(k.startswith(EMA_PREFIX) for k in params)
    # Metadata may be stored as plain strings: only tensors are weights.
    weights = {
        k: v.asnumpy() for k, v in network_weights(params, use_ema).items() if hasattr(v, "asnumpy")
    }
    return weights, used_ema


def load_pretrained(net: nn.Cell, path: str, strict: bool = True) -> PretrainedReport:
    """Load the fitting tensors of ``path`` into ``net``; see the module docstring.

    Raises :class:`CheckpointError` naming every non-class-head parameter that is missing
    or mis-shaped when ``strict`` (nothing is loaded then).
    """
    weights, used_ema = read_pretrained(path)
    report = PretrainedReport(path=path, used_ema=used_ema)
    updates: list[tuple[ms.Parameter, np.ndarray]] = []
    problems = []
    taken = set()
    for param in net.get_parameters():
        name, want = param.name, tuple(param.shape)
        if name not in weights:
            problems.append(f"{name}: not in the checkpoint")
            report.skipped.append(f"{name} (not in the checkpoint)")
            continue
        taken.add(name)
        have = tuple(weights[name].shape)
        if have == want:
            updates.append((param, weights[name]))
            report.loaded.append(name)
        elif name.startswith(CLASS_HEAD) and have[1:] == want[1:]:
            report.reinitialised.append(name)
        else:
            problems.append(f"{name}: shape {have} in the checkpoint, {want} in the model")
            report.skipped.append(f"{name} ({have} vs {want})")
    # Only network tensors count (a training .ckpt also holds optimizer state).
    report.unused = sorted(n for n in set(weights) - taken if n.startswith(NETWORK_PREFIXES))
    if problems and strict:
        raise CheckpointError(
            f"train.pretrained={path} does not fit the model (a different architecture? "
            "check model=...; train.pretrained_strict=false loads what fits):\n  "
            + "\n  ".join(problems)
        )
    for param, value in updates:
        param.set_data(ms.Tensor(value, dtype=param.dtype))
    return report
