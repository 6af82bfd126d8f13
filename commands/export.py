"""Export a trained detector to MINDIR (or ONNX), with or without in-graph NMS, and check it.

    msdet export ckpt=PATH [export.format=MINDIR|ONNX] [export.with_nms=true|false]
                 [export.batch_size=1] [eval.img_size=[416,416]] [export.out=FOLDER]

(``python export.py ...`` from a clone.) The network and its input size come from the
checkpoint's description (a checkpoint written before msdet described them also needs
``model=...`` and ``eval.img_size``).
The file lands beside the checkpoint (or in ``export.out``) as
``<checkpoint stem>_<model>_<h>x<w>_b<batch>[_nms].mindir|.onnx``, with its report
``<file>.json``: input/output layout, NMS settings, the max difference between the file's
outputs and the network's on sample images, and the val split's mAP of the file beside the
checkpoint's (``export.val``: the val split of the dataset the checkpoint trained on, or
of ``data=...``). A file that scores differently from its checkpoint is an error. The file
carries its own description: eval.py and predict.py take it as ``ckpt=``. The run folder
(``runs/export/exp*``) holds the log and both evaluations. ``--help`` lists the main
settings, ``--help all`` every one.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence

from omegaconf import OmegaConf

from msdet.engine.cli import Run, run_command

log = logging.getLogger("export")


def export(run: Run) -> None:
    cfg = run.cfg
    if not cfg.ckpt:
        raise ValueError("export.py needs a checkpoint: python export.py ckpt=PATH")
    from msdet.engine.runtime.process import setup_runtime

    # The exported network is built on MindSpore's operators, so msdet's CPU kernels are
    # neither built nor measured here.
    OmegaConf.update(cfg, "runtime.cpu_kernels", "native")
    rt = setup_runtime(cfg.runtime, run.dir)
    # Imports MindSpore, which must load after setup_runtime prepared the environment.
    from msdet.engine.inference.export import ExportError, export_checkpoint, report_path

    try:
        report = export_checkpoint(cfg, run.typed, run.dir, rt)
    except ExportError as err:
        raise ValueError(str(err)) from err
    log.info(
        "exported %s (%s, input %s, outputs %s); max abs diff vs the network: %.3g",
        report["file"],
        report["format"],
        report["input_shape"],
        ", ".join(f"{n} {s}" for n, s in zip(report["outputs"], report["output_shapes"])),
        report["max_abs_diff"],
    )
    log.info("report: %s", report_path(report["file"]))


def main(argv: Sequence[str] | None = None) -> int:
    """``msdet export`` with ``argv`` (default: the process's arguments); 0 when the export
    finished. A bad command line exits 2, a user's error exits 1."""
    run_command("export", export, argv)
    return 0


if __name__ == "__main__":
    sys.exit(main())
