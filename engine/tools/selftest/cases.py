"""On-device self-test: does msdet work on this machine, path by path?

    python -m engine.selftest                       # the device here (Ascend if present)
    python -m engine.selftest --size 64             # the tiny variant (CI runs it on CPU)
    python -m engine.selftest --cards 8             # also the collectives, on 8 cards
    python -m engine.selftest runtime.device=CPU    # key=value: Hydra overrides

Every device-only path msdet takes is run on the device and compared with the same
computation on the host CPU, from the same weights and inputs: a child process (``--reference
DIR``) builds YOLOX-nano, calibrates its BatchNorm statistics on a random batch (a fresh
network's outputs are all alike), saves the weights and computes every reference in PyNative
mode on the CPU. On a CPU-only machine the device side is the CPU in graph mode, so each
comparison is graph mode against PyNative; checks that need an Ascend card say "skipped:
needs Ascend", never "passed". A table is printed and a JSON report written (``--report``,
default ``selftest.json``): versions, chip, each check's figures, tolerance and seconds.
The exit code is 1 when any check failed. Attach the report to a bug report.

Checks: the chip profile and precision mode; YOLOX-nano's forward at O0 and at O2; one
training step (loss terms, gradient norm); an injected fp16 overflow (the step is skipped,
the loss scale halves, no weight moves); data sinking with several steps per sink (the same
statistics as without); NMSWithMask at 80 classes x 2,864 candidates against the host NMS;
a MINDIR export, reloaded and compared; with ``--cards N``, an all-reduce and sharded
evaluation against one rank's. Tolerances are measured figures, stated beside each check.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from msdet.common.config import load_config

log = logging.getLogger("selftest")

NUM_CLASSES, BATCH, TARGETS, MAX_OBJECTS = 80, 2, 4, 16
NMS_CLASSES, NMS_CANDIDATES, NMS_ANCHORS = 80, 2864, 3500
# Each side is compared with the host at the same AMP level: an fp16 network against the
# fp32 one differs by far more than any defect would show (measured on the CPU, 64 px: O2
# against O0 moved the loss terms by 1.1e-2 and the update by 19%). Tolerances, relative to
# the largest reference value. Measured on the CPU (AMD EPYC, MindSpore 2.10, 64 px), graph
# mode against PyNative: at O0 0 (bit-identical) for the forward pass, the loss terms and
# the update; at O2 2.8e-4 (forward), 3.3e-6 (loss terms), 2.9e-4 (update): the modes cast
# in different places. Between a card and the CPU the kernels differ: float32 sums round
# differently (1e-6-level: TOL_FP32 leaves 100x), and fp16 networks differ in how the cube
# accumulates (not measured on a card: TOL_FP16 is fp16's resolution, 2^-10, times ~50).
TOL_FP32 = 1e-4  # float32 on both sides, different kernels
TOL_FP16 = 5e-2  # float16 networks on both sides, different kernels
STATUS_ORDER = ("passed", "failed", "skipped", "info")


@dataclass
class Check:
    """One line of the report."""

    name: str
    status: str  # passed | failed | skipped | info
    figures: dict[str, Any] = field(default_factory=dict)
    tolerance: float | None = None
    seconds: float = 0.0
    note: str = ""


def relative_error(got: np.ndarray, ref: np.ndarray) -> float:
    """max |got - ref| / max(|ref|, 1e-12), over float64 copies; inf for other shapes."""
    got, ref = np.asarray(got, np.float64), np.asarray(ref, np.float64)
    if got.shape != ref.shape or not np.isfinite(got).all():
        return float("inf")
    return float(np.abs(got - ref).max(initial=0.0) / max(np.abs(ref).max(initial=0.0), 1e-12))


def compare(name: str, got: np.ndarray, ref: np.ndarray, tol: float, **figures) -> Check:
    """A passed/failed check of ``got`` against ``ref`` within ``tol`` (relative)."""
    err = relative_error(got, ref)
    status = "passed" if err <= tol else "failed"
    return Check(name, status, {"max_rel_error": err, **figures}, tol)


def skipped(name: str, reason: str) -> Check:
    return Check(name, "skipped", note=reason)


def inputs(size: int, seed: int = 0) -> dict[str, np.ndarray]:
    """The fixed batch every side uses: images, YOLOX targets and their mask, and decoded
    predictions for the NMS check (80 classes, overlapping boxes)."""
    rng = np.random.default_rng(seed)
    images = rng.uniform(0, 255, (BATCH, 3, size, size)).astype(np.float32)
    targets = np.zeros((BATCH, MAX_OBJECTS, 5), np.float32)
    mask = np.zeros((BATCH, MAX_OBJECTS), np.float32)
    for b in range(BATCH):
        wh = rng.uniform(size / 8, size / 2, (TARGETS, 2))
        centers = rng.uniform(wh / 2, size - wh / 2)
        labels = rng.integers(0, NUM_CLASSES, (TARGETS, 1))
        targets[b, :TARGETS] = np.concatenate((labels, centers, wh), 1)
        mask[b, :TARGETS] = 1.0
    preds = np.empty((1, NMS_ANCHORS, 5 + NMS_CLASSES), np.float32)
    preds[..., 0:2] = rng.uniform(0, 640, (1, NMS_ANCHORS, 2))
    preds[..., 2:4] = rng.uniform(8, 160, (1, NMS_ANCHORS, 2))
    preds[..., 4:] = rng.uniform(0, 1, (1, NMS_ANCHORS, 1 + NMS_CLASSES))
    return {"images": images, "targets": targets, "mask": mask, "nms_predictions": preds}


def compose_config(overrides: list[str]) -> Any:
    """The self-test's config: YOLOX-nano with ``overrides``."""
    return load_config("tool", ["model=yolox_nano", *overrides])


def nano(cfg: Any, weights: str | None = None):
    """YOLOX-nano (80 classes) with the reference weights when given."""
    from msdet.models.weights import load_weights
    from msdet.models.yolox import build_model

    net = build_model(cfg.model, NUM_CLASSES)  # MindSpore's operators: the paths a card runs
    if weights:
        load_weights(net, weights, use_ema=False)
    return net


def train_step_cell(cfg: Any, rt: Any, weights: str, amp: str):
    """msdet's training step (SGD, EMA, loss scaling at ``amp``) on the reference weights."""
    from msdet.engine.runtime.amp import apply_amp
    from msdet.engine.training.step import build_train_step
    from msdet.models.loss import YOLOXLoss

    rt = replace(rt, amp_level=amp)
    net = apply_amp(nano(cfg, weights), rt)
    return build_train_step(
        net, YOLOXLoss(NUM_CLASSES), np.full(8, 0.01, np.float32), cfg.train, rt
    )


def one_step(step: Any, batch: dict[str, np.ndarray]) -> tuple[np.ndarray, float]:
    """Run the training step once; returns (its loss terms, the norm of the weight update).

    From zero momentum the first SGD update is ``lr (1 + momentum) (gradient + decay)``
    (Nesterov), so the update's norm compares the gradients without exposing them.
    """
    import mindspore as ms

    params = step.optimizer.parameters
    before = [p.asnumpy().astype(np.float64) for p in params]
    out = step(*(ms.Tensor(batch[k]) for k in ("images", "targets", "mask")))
    terms = np.array([float(o.asnumpy()) for o in out[:6]])
    update = sum(float(((p.asnumpy() - b) ** 2).sum()) for p, b in zip(params, before))
    return terms, float(np.sqrt(update))


# ---- the reference: host CPU, PyNative ------------------------------------------------------


def make_reference(out_dir: str, size: int) -> None:
    """Weights, inputs and every reference figure, computed on the CPU in PyNative mode."""
    from msdet.engine.runtime.process import setup_runtime

    cfg = compose_config(
        ["runtime.device=CPU", "runtime.mode=pynative", "runtime.cpu_kernels=native"]
    )
    setup_runtime(cfg.runtime, out_dir)
    import mindspore as ms

    batch = inputs(size)
    net = nano(cfg)
    # BatchNorm statistics of one real batch (momentum 0: the batch's own), so that the
    # inference outputs differ from anchor to anchor.
    bns = [c for _, c in net.cells_and_names() if isinstance(c, ms.nn.BatchNorm2d)]
    for bn in bns:
        bn.momentum = 0.0
    net.set_train(True)
    net(ms.Tensor(batch["images"]))
    for bn in bns:
        bn.momentum = 0.97
    weights = os.path.join(out_dir, "weights.ckpt")
    ms.save_checkpoint(net, weights)
    net.set_train(False)
    from msdet.engine.runtime.amp import mixed_precision
    from msdet.engine.runtime.process import Runtime

    figures = {}
    cpu = Runtime(device="CPU", mode="pynative", amp_level="O0", sink=False, sink_size=-1)
    for amp in ("O0", "O2"):  # the device's side is compared with the same AMP level here
        infer = nano(cfg, weights)
        infer.set_train(False)
        if amp != "O0":
            infer = mixed_precision(infer, amp)
            infer.set_train(False)
        figures[f"forward_{amp}"] = infer(ms.Tensor(batch["images"])).asnumpy().astype(np.float32)
        step = train_step_cell(cfg, cpu, weights, amp)
        step.scale.set_data(ms.Tensor(1.0, ms.float32))  # as check_train_step does
        figures[f"loss_terms_{amp}"], figures[f"update_norm_{amp}"] = one_step(step, batch)
    from msdet.ops.nms import HostNMS

    dets, counts = HostNMS(
        NMS_CLASSES, conf_thresh=0.0, pre_nms_topk=NMS_CANDIDATES, max_det=NMS_CANDIDATES
    )(ms.Tensor(batch["nms_predictions"]))
    np.savez(
        os.path.join(out_dir, "reference.npz"),
        **figures,
        nms_dets=dets,
        nms_counts=counts,
        **batch,
    )


def run_reference(size: int, work: str) -> dict[str, np.ndarray]:
    """:func:`make_reference` in a child process (MindSpore pins one device per process)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MS_ROLE", "MS_SCHED"))}
    cmd = [
        sys.executable,
        "-m",
        "msdet.engine.tools.selftest",
        "--reference",
        work,
        "--size",
        str(size),
    ]
    done = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"the CPU reference failed:\n{done.stderr[-3000:]}")
    saved = np.load(os.path.join(work, "reference.npz"))
    return {k: saved[k] for k in saved.files}


def timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    started = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - started
