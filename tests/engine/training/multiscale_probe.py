"""``python -m tests.engine.training.multiscale_probe SEED``: trains the multi-scale probe of
tests/support/multiscale.py in this fresh process (graph mode) and prints the size each
step ran at, as JSON."""

from __future__ import annotations

import json
import sys

import mindspore as ms

from tests.support.multiscale import train_probe

if __name__ == "__main__":
    ms.set_context(mode=ms.GRAPH_MODE)
    _, _, seen = train_probe((96, 128), 4, 0, int(sys.argv[1]), 1)
    print(json.dumps(seen))
