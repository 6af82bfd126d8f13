"""On-device self-test: does msdet work on this machine, path by path? The pieces every
process of it shares: the fixed inputs, the tolerances, the comparisons, the CPU reference.

    python -m msdet.tools.selftest                    # the device here (Ascend if present)
    python -m msdet.tools.selftest --size 64          # the tiny variant (CI runs it on CPU)
    python -m msdet.tools.selftest --cards 8          # also 8 ranks: collectives, a step
    python -m msdet.tools.selftest --only step,eval   # some checks only
    python -m msdet.tools.selftest runtime.device=CPU # key=value: config settings
    python -m msdet.tools.selftest runtime.loop=jit   # msdet's jit loop's way (below)

Every device-only path msdet takes is run on the device and compared with the same
computation on the host CPU, from the same weights and inputs: a child process (``--reference
DIR``) builds YOLOX-nano, calibrates its BatchNorm statistics on a random batch (a fresh
network's outputs are all alike), saves the weights and computes every reference in PyNative
mode on the CPU. On a CPU-only machine the device side is the CPU in graph mode, so each
comparison is graph mode against PyNative; checks that need an Ascend card say "skipped:
needs Ascend", never "passed". A table is printed and a JSON report written (``--report``,
default ``selftest.json``): versions, chip, each check's figures, tolerance and seconds, and
the compile budget. The exit code is 1 when any check failed. Attach the report to a bug
report.

Checks (``--only`` keys): ``chip`` the chip profile and precision mode; ``forward``
YOLOX-nano's forward at O0 and at O2; ``step`` one training step (loss terms, foreground
count, gradient norm); ``overflow`` an injected fp16 overflow (the step is skipped, the loss
scale halves, no weight moves); ``sink`` data sinking with several steps per sink (the same
statistics as without); ``nms`` NMSWithMask at 80 classes x 2,864 candidates against the host
NMS; ``checkpoint`` a training checkpoint saved and restored on the device (every tensor
equal); ``eval`` a COCO evaluation against the host's; ``export`` a MINDIR export, reloaded
and compared; ``distributed`` (``--cards N``) an all-reduce, sharded evaluation against one
rank's, and one training step on N ranks (gradient reducer, the all-reduced overflow flag,
SyncBatchNorm) against one card's. Tolerances are measured figures, stated beside each check.

Both training loops: with ``runtime.loop=jit`` (a setting like any other) the device side
runs in PyNative mode and calls the training step, the forward, NMS and the evaluation
network through ``mindspore.jit``, as ``train.py``'s jit loop does (:func:`as_called`);
the ranks all-reduce without the auto-parallel context; ``sink`` runs that loop's sink
(``mindspore.data_sink``) against its steps fed one by one.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field, fields, replace
from typing import Any

import numpy as np

from msdet.common.config import load_config
from msdet.engine.runtime.ascend import MS_BACKEND, Backend, graph_backends
from msdet.engine.runtime.process import Runtime, setup_runtime
from msdet.engine.training.plan import Loop, check_mode

log = logging.getLogger("selftest")


@dataclass(frozen=True)
class DeviceRun(Runtime):
    """The runtime as the self-test uses it: with the training loop ``runtime.loop`` names
    and the backend that loop gives its ``mindspore.jit`` graphs (``RunPlan.backends``)."""

    loop: Loop = Loop.MODEL
    loop_backend: Backend = Backend("O0", MS_BACKEND, "")


def set_up_device(runtime_cfg: Any, work: str) -> DeviceRun:
    """``setup_runtime`` and the loop's mode and backend, as a training run sets them."""
    import mindspore as ms

    loop = Loop.parse(runtime_cfg.get("loop", "model"))
    check_mode(loop, str(runtime_cfg.mode))
    rt = setup_runtime(runtime_cfg, work)
    backend = graph_backends(loop.value, rt.chip_profile, runtime_cfg.jit_level,
                             rt.rank_table)["train"]  # fmt: skip
    if loop is Loop.JIT:  # as engine.training.jit_loop.JitLoop: PyNative, the graphs jit-compiled
        ms.set_context(mode=ms.PYNATIVE_MODE)
    elif rt.distributed:  # as engine.training.loops.ModelLoop: Model.train's context
        from msdet.engine.runtime.distributed import set_data_parallel_context

        set_data_parallel_context(ms, rt.world_size)
    own = {f.name: getattr(rt, f.name) for f in fields(Runtime)}
    if loop is Loop.JIT:
        own["mode"] = "pynative"  # the context set above: the report says what ran
    return DeviceRun(**own, loop=loop, loop_backend=backend)


NUM_CLASSES, BATCH, TARGETS, MAX_OBJECTS = 80, 2, 4, 16
NMS_CLASSES, NMS_CANDIDATES, NMS_ANCHORS = 80, 2864, 3500
# The small generated val set of the evaluation checks (one card, sharded over ranks): 7
# images (an odd count, so one rank's shard is padded), a network input of 64 px.
EVAL_DATA = ("data.num_train=4", "data.num_val=7", "data.img_size=[64,64]", "eval.img_size=[64,64]")
LOSS_TERMS = ("total", "iou", "obj", "cls", "l1")  # then num_fg, the foreground count
# Each side is compared with the host at the same AMP level: an fp16 network against the
# fp32 one differs by far more than any defect would show (measured on the CPU, 64 px: O2
# against O0 moved the loss terms by 1.1e-2 and the update by 19%). Like is compared with
# like: box coordinates relative to the largest one, class and objectness probabilities
# absolutely (they lie in [0, 1]; hidden beside 300 px coordinates in one relative figure),
# each loss term relative to itself, the foreground count as a count. Measured on the CPU
# (AMD EPYC, MindSpore 2.10, 64 px), graph mode against PyNative: at O0 0 (bit-identical)
# for all; at O2 2.8e-4 (boxes), 3.7e-4 (probabilities, absolute), 3.3e-6 (loss terms),
# 2.9e-4 (update): the modes cast in different places. Between a card and the CPU the
# kernels differ: float32 sums round differently (1e-6-level: TOL_FP32 leaves 100x), and
# fp16 networks differ in how the cube accumulates (not measured on a card: TOL_FP16 is
# fp16's resolution, 2^-10, times ~50).
TOL_FP32 = 1e-4  # float32 on both sides, different kernels (relative)
TOL_FP16 = 5e-2  # float16 networks on both sides, different kernels (relative)
TOL_PROB_FP32 = 1e-5  # probabilities, absolute: float32 rounding of a sigmoid's inputs
TOL_PROB_FP16 = 1e-2  # probabilities, absolute: ~10 fp16 steps at 1.0, 27x the CPU figure
# SimOTA picks each object's anchors by rank: in float32 the host and the device pick the
# same ones; an fp16 network moves costs near a tie, and each move changes the count by one.
TOL_FG_FP16 = 0.02  # foreground count, relative (not measured on a card)
STATUS_ORDER = ("passed", "failed", "skipped", "info")
FP32_MODES = ("must_keep_origin_dtype", "force_fp32")  # Ascend precision modes keeping float32
REFERENCE_FILE, WEIGHTS_FILE = "reference.npz", "weights.ckpt"


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


def absolute_error(got: np.ndarray, ref: np.ndarray) -> float:
    """max |got - ref| over float64 copies; inf for other shapes or a non-finite value."""
    got, ref = np.asarray(got, np.float64), np.asarray(ref, np.float64)
    if got.shape != ref.shape or not np.isfinite(got).all():
        return float("inf")
    return float(np.abs(got - ref).max(initial=0.0))


def compare(name: str, got: np.ndarray, ref: np.ndarray, tol: float, **figures) -> Check:
    """A passed/failed check of ``got`` against ``ref`` within ``tol`` (relative)."""
    err = relative_error(got, ref)
    status = "passed" if err <= tol else "failed"
    return Check(name, status, {"max_rel_error": err, **figures}, tol)


def compare_predictions(
    name: str, got: np.ndarray, ref: np.ndarray, fp16: bool, **figures
) -> Check:
    """Decoded predictions ``[B, A, 5 + C]`` against the reference: the boxes (cx, cy, w,
    h) relative to the largest coordinate, the objectness and class probabilities
    absolutely; passed when both are within their tolerance (fp16 or fp32 ones)."""
    got, ref = np.asarray(got), np.asarray(ref)
    tol_boxes, tol_probs = (TOL_FP16, TOL_PROB_FP16) if fp16 else (TOL_FP32, TOL_PROB_FP32)
    same = got.shape == ref.shape
    boxes = relative_error(got[..., :4], ref[..., :4]) if same else float("inf")
    probs = absolute_error(got[..., 4:], ref[..., 4:]) if same else float("inf")
    ok = boxes <= tol_boxes and probs <= tol_probs
    return Check(
        name,
        "passed" if ok else "failed",
        {
            "boxes_max_rel_error": boxes,
            "probs_max_abs_error": probs,
            "tolerance_boxes": tol_boxes,
            "tolerance_probs": tol_probs,
            **figures,
        },
        tol_boxes,
    )


def compare_losses(terms: np.ndarray, ref: np.ndarray, fp16: bool) -> tuple[bool, dict[str, Any]]:
    """The training step's ``(total, iou, obj, cls, l1, num_fg)`` against the reference's:
    each loss term relative to itself (a small term is not judged by the largest one), the
    foreground count as a count (equal in float32; within :data:`TOL_FG_FP16` in fp16).
    Returns (within tolerance, figures)."""
    terms, ref = np.asarray(terms, np.float64).ravel(), np.asarray(ref, np.float64).ravel()
    n = len(LOSS_TERMS)
    if terms.shape != ref.shape or len(ref) != n + 1:
        return False, {"error": f"loss terms of shape {terms.shape}, reference {ref.shape}"}
    tol = TOL_FP16 if fp16 else TOL_FP32
    errors = {}
    for key, got, want in zip(LOSS_TERMS, terms[:n], ref[:n]):
        # A term that is 0 in the reference (L1 before the last epochs) must stay 0.
        errors[key] = abs(got - want) / abs(want) if want else (0.0 if got == 0 else float("inf"))
        if not np.isfinite(got):
            errors[key] = float("inf")
    fg, fg_ref = terms[n], ref[n]
    fg_err = abs(fg - fg_ref) / max(fg_ref, 1.0)
    fg_ok = fg == fg_ref if not fp16 else fg_err <= TOL_FG_FP16
    figures = {
        "loss_rel_errors": errors,
        "num_fg": fg,
        "reference_num_fg": fg_ref,
        "tolerance_loss": tol,
        "tolerance_num_fg": TOL_FG_FP16 if fp16 else 0.0,
    }
    return bool(max(errors.values()) <= tol and fg_ok), figures


def runs_fp16(rt: Any, amp: str) -> bool:
    """Whether a network at ``amp`` computes in float16 somewhere on ``rt``'s device: AMP
    above O0, or on Ascend a precision mode that narrows float32 matrix operators (all but
    keep-dtype and force_fp32; MindSpore's own default keeps float32 where the cube has it)."""
    if amp != "O0":
        return True
    if rt.device != "Ascend":
        return False
    if rt.precision_mode is None:
        return not rt.cube_fp32
    return rt.precision_mode not in FP32_MODES


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


def train_step_cell(
    cfg: Any, rt: Any, weights: str, amp: str, sync_bn: bool = False, skip_nonfinite: bool = False
):
    """msdet's training step (SGD, EMA, loss scaling at ``amp``) on the reference weights;
    with ``sync_bn`` its BatchNorms synced over the ranks (as ``train.py`` converts them);
    ``skip_nonfinite`` as ``runtime.check_finite`` sets it in ``train.py``; with
    ``runtime.loop=jit`` called through ``mindspore.jit``, as that loop calls it."""
    from msdet.engine.runtime.amp import apply_amp
    from msdet.engine.training.step import build_train_step
    from msdet.models.loss import YOLOXLoss
    from msdet.models.sync_batchnorm import convert_sync_batchnorm

    rt = replace(rt, amp_level=amp)
    net = nano(cfg, weights)
    if sync_bn:
        convert_sync_batchnorm(net)
    step = build_train_step(
        apply_amp(net, rt),
        YOLOXLoss(NUM_CLASSES),
        np.full(8, 0.01, np.float32),
        cfg.train,
        rt,
        skip_nonfinite=skip_nonfinite,
        grad_reducer=gradient_reducer(rt),
    )
    return as_called(step, rt)


def gradient_reducer(rt: Any) -> Any:
    """The gradient mean over the ranks of ``rt``'s training loop, for ``build_train_step``
    (None with one rank): the jit loop's buckets, or ``Model.train``'s reducer."""
    if not rt.distributed:
        return None
    if getattr(rt, "loop", Loop.MODEL) is Loop.JIT:
        from msdet.engine.runtime.distributed import world_group
        from msdet.engine.training.jit_loop import GradientMean

        return lambda params: GradientMean(rt.world_size, world_group(),
                                           [p.shape for p in params])  # fmt: skip
    from mindspore import nn

    return lambda params: nn.DistributedGradReducer(params, mean=True, degree=rt.world_size)


def as_called(cell: Any, rt: Any) -> Any:
    """``cell`` as a run with ``rt`` calls it: compiled by ``mindspore.jit`` under
    ``runtime.loop=jit`` (PyNative mode: without it every operator would run on its own),
    else as it is (graph mode compiles it on its first call); a host object (host NMS) as
    it is."""
    if getattr(rt, "loop", Loop.MODEL) is not Loop.JIT or not hasattr(cell, "construct"):
        return cell
    from msdet.engine.training.jit_loop import jit_compiled_cell

    return jit_compiled_cell(cell, rt.loop_backend)


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


def load_reference(work: str) -> dict[str, np.ndarray]:
    """What :func:`msdet.tools.selftest.reference.make_reference` saved in ``work``."""
    saved = np.load(os.path.join(work, REFERENCE_FILE))
    return {k: saved[k] for k in saved.files}


def timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    started = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - started
