"""``train.py`` with a test's file published as yolox_nano's official weights:
``python tests/e2e/published_entry.py SHA256|- [train.py settings ...]`` (``-``: as
published).

A test serves its own weights on 127.0.0.1 (``$MSDET_WEIGHTS_URL``) and can only get them
accepted as the release file by publishing their sha256; the rest is train.py itself. Runs
that share compiled graphs (runtime.compile_cache) start the same way: MindSpore's compile
cache missed between a run started here and one started as ``python train.py``.
"""

from __future__ import annotations

import os
import runpy
import sys

from msdet.common.config import ROOT
from msdet.engine.runtime.cpu import configure_process_env

if __name__ == "__main__":
    # release_weights loads MindSpore: first the environment train.py would set (runtime=cpu).
    configure_process_env("CPU")
    from msdet.models.release_weights import RELEASE_FILES, ReleaseFile

    digest, settings = sys.argv[1], sys.argv[2:]
    if digest != "-":
        RELEASE_FILES["yolox_nano"] = ReleaseFile(RELEASE_FILES["yolox_nano"].filename, digest)
    script = os.path.join(ROOT, "train.py")
    sys.argv = [script, *settings]
    runpy.run_path(script, run_name="__main__")
