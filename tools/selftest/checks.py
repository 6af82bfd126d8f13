"""The self-test's checks, one function per path msdet takes on a device: each runs it
there and compares it with the CPU reference (:mod:`.cases`).
"""

from __future__ import annotations

import os
import time
from typing import Any

import numpy as np

from msdet.engine.runtime.mindspore_compat import write_parameter
from msdet.tools.selftest.cases import (
    NMS_CANDIDATES,
    NMS_CLASSES,
    TOL_FP32,
    Check,
    as_called,
    compare_losses,
    compare_predictions,
    nano,
    one_step,
    relative_error,
    runs_fp16,
    skipped,
    timed,
    train_step_cell,
)

# ---- the checks on the device ---------------------------------------------------------------


def check_chip(rt: Any) -> Check:
    """The chip profile and the precision mode in effect; on CPU, the profiles of the chips
    msdet knows, simulated from MindSpore's capability answers for them."""
    from msdet.engine.runtime.ascend import chip_profile

    if rt.device != "Ascend":
        expected = {  # (classic, A2) -> (host NMS, float-status register, NMS boxes, jit level)
            "ascend910": ((True, False), (True, True, 2864, "O2")),
            "ascend910b": ((False, True), (False, False, 2048, "O0")),
            "ascend310p": ((False, False), (True, False, 2864, "O0")),
        }
        got = {}
        for soc, (answers, _) in expected.items():
            p = chip_profile(soc, *answers, None)
            got[soc] = (p.host_nms, p.float_status, p.nms_max_boxes, p.default_jit_level)
        ok = all(got[s] == w for s, (_, w) in expected.items())
        return Check(
            "chip profile (simulated)",
            "passed" if ok else "failed",
            {"profiles": {s: list(v) for s, v in got.items()}},
            note="no Ascend here: the real chip's profile needs Ascend",
        )
    from msdet.engine.runtime.ascend import precision_mode_in_effect

    in_effect = precision_mode_in_effect()
    ok = rt.precision_mode is None or in_effect == rt.precision_mode
    return Check(
        "chip profile and precision mode",
        "passed" if ok else "failed",
        {
            "chip": rt.chip,
            "precision_mode": in_effect or "MindSpore's default",
            "chosen": rt.precision_mode,
            "host_nms": rt.host_nms,
            "nms_max_boxes": rt.nms_max_boxes,
            "jit_level": rt.jit_level,
            "backend": rt.backend,
        },
    )


def check_forward(cfg: Any, rt: Any, ref: dict, weights: str, amp: str) -> Check:
    """YOLOX-nano's inference forward at ``amp`` against the host's at the same level: boxes
    and probabilities each within their tolerance (:func:`.cases.compare_predictions`)."""
    import mindspore as ms

    from msdet.engine.runtime.amp import mixed_precision

    net = nano(cfg, weights)
    net.set_train(False)
    if amp != "O0":
        net = mixed_precision(net, amp)
        net.set_train(False)
    net = as_called(net, rt)
    images = ms.Tensor(ref["images"])
    out, first = timed(lambda: net(images).asnumpy())
    _, second = timed(lambda: net(images).asnumpy())
    check = compare_predictions(
        f"forward {amp}",
        out.astype(np.float32),
        ref[f"forward_{amp}"],
        runs_fp16(rt, amp),
        compile_s=round(first - second, 2),
        step_s=round(second, 4),
    )
    check.seconds = first + second
    return check


def check_train_step(step: Any, rt: Any, ref: dict) -> Check:
    """msdet's training step once at the run's AMP level, from the reference weights: each
    loss term, the foreground count and the size of the update (the gradients, through
    SGD) against the host's."""

    # Scale 1: the dynamic scale's first 1024 overflows a fresh network's fp16 gradients
    # (the step is then skipped, correctly, and there is no update to compare).
    write_parameter(step.scale, 1.0)
    (terms, norm), seconds = timed(lambda: one_step(step, ref))
    return compare_step(f"training step {rt.amp_level}: losses, update", terms, norm, rt, ref,
                        seconds)  # fmt: skip


def compare_step(
    name: str, terms: np.ndarray, norm: float, rt: Any, ref: dict, seconds: float = 0.0
) -> Check:
    """A training step's loss terms and update norm against the host's one-card step at the
    same AMP level (:func:`.cases.compare_losses`; the norm relative)."""
    fp16 = runs_fp16(rt, rt.amp_level)
    losses_ok, figures = compare_losses(terms, ref[f"loss_terms_{rt.amp_level}"], fp16)
    ref_norm = float(ref[f"update_norm_{rt.amp_level}"])
    norm_err = abs(norm - ref_norm) / max(ref_norm, 1e-12) if np.isfinite(norm) else float("inf")
    tol = figures.get("tolerance_loss", 0.0)
    ok = losses_ok and norm_err <= tol
    return Check(
        name,
        "passed" if ok else "failed",
        {
            "update_norm_rel_error": norm_err,
            **figures,
            "loss_terms": np.asarray(terms).tolist(),
            "reference_loss_terms": ref[f"loss_terms_{rt.amp_level}"].tolist(),
            "update_norm": norm,
            "reference_update_norm": ref_norm,
        },
        tol,
        seconds,
    )


def check_overflow(step: Any, rt: Any, ref: dict) -> Check:
    """An O2 step with a loss scale so large that the fp16 gradients overflow: skipped, the
    scale halves, no trained weight moves (the LR schedule, the EMA and BatchNorm's running
    statistics advance, as on every YOLOX iteration); the next step, at scale 1, trains."""
    import mindspore as ms

    batch = [ms.Tensor(ref[k]) for k in ("images", "targets", "mask")]
    params = step.optimizer.parameters
    before = [p.asnumpy().copy() for p in params]
    write_parameter(step.scale, 2.0**100)
    out, seconds = timed(lambda: step(*batch))
    skipped_flag, scale = bool(out[8].asnumpy()), float(step.scale.asnumpy())
    moved = [p.name for p, b in zip(params, before) if not np.array_equal(p.asnumpy(), b)]
    write_parameter(step.scale, 1.0)
    after = step(*batch)
    trained = not bool(after[8].asnumpy()) and any(
        not np.array_equal(p.asnumpy(), b) for p, b in zip(params, before)
    )
    ok = skipped_flag and scale == 2.0**99 and not moved and trained
    return Check(
        "injected overflow at O2",
        "passed" if ok else "failed",
        {
            "skipped": skipped_flag,
            "scale_after": scale,
            "weights_moved": moved[:5],
            "next_step_trained": trained,
            "float_status_register": rt.float_status,
        },
        seconds=seconds,
    )


def check_sink(cfg: Any, rt: Any, ref: dict, weights: str, steps: int = 4) -> Check:
    """The training loop (``Model.train``, or msdet's jit loop over ``mindspore.data_sink``)
    with ``steps`` steps in one sink against the same steps fed one by one: the in-graph
    statistics (loss sums, steps, skips) and the final weights agree. Its note says in one
    line whether the sink ran (one step-end call for the ``steps`` steps: MindSpore falls back
    to feeding each step silently) and on which jit level and backend."""
    if not rt.sink_effective:
        return skipped(
            "data sinking (sink_size > 1)",
            f"needs Ascend: on {rt.device} MindSpore feeds every step from the host",
        )
    import mindspore.dataset as ds
    from mindspore.train import Callback, Model

    from msdet.engine.training.jit_loop import JitTrainLoop
    from msdet.engine.training.plan import Loop
    from msdet.engine.training.step_stats import read_and_reset

    class StepEnds(Callback):
        calls = 0

        def on_train_step_end(self, run_context):
            StepEnds.calls += 1

    batch = tuple(ref[k] for k in ("images", "targets", "mask"))
    results = {}
    jit = rt.loop is Loop.JIT
    backend = rt.loop_backend if jit else rt.graphs
    for sink in (True, False):
        StepEnds.calls = 0
        step = train_step_cell(cfg, rt, weights, rt.amp_level)
        data = ds.GeneratorDataset(
            lambda: (batch for _ in range(steps)), ["images", "targets", "mask"]
        )
        if rt.loop is Loop.JIT:
            loop = JitTrainLoop(step, backend=rt.loop_backend, sink_size=steps if sink else 0)
            run = lambda loop=loop, data=data: loop.train(1, data, [StepEnds()])  # noqa: E731
        else:
            run = lambda step=step, data=data, sink=sink: Model(step).train(  # noqa: E731
                1,
                data,
                callbacks=[StepEnds()],
                dataset_sink_mode=sink,
                sink_size=steps if sink else -1,
            )
        (_, seconds) = timed(run)
        if sink:
            sink_calls = StepEnds.calls
        stats = read_and_reset(step.stats)
        weights_now = np.concatenate([p.asnumpy().ravel() for p in step.trainable_params()])
        results[sink] = (stats, weights_now, seconds)
    (sunk, w_sunk, t_sunk), (fed, w_fed, t_fed) = results[True], results[False]
    sums_err = relative_error(
        np.array(list(sunk["sums"].values())), np.array(list(fed["sums"].values()))
    )
    weights_err = relative_error(w_sunk, w_fed)
    ran = sink_calls == 1
    ok = ran and sunk["steps"] == fed["steps"] == steps
    ok = ok and sums_err <= TOL_FP32 and weights_err <= TOL_FP32
    how = "mindspore.data_sink" if jit else "Model.train(dataset_sink_mode=True)"
    note = (
        f"the data sink ran: {steps} steps in one call through {how}, {backend.describe()}"
        if ran
        else f"the data sink did not run: {sink_calls} step-end calls for {steps} steps "
        f"through {how} (MindSpore fed each step from the host)"
    )
    return Check(
        "data sinking (sink_size > 1)",
        "passed" if ok else "failed",
        {
            "steps": [sunk["steps"], fed["steps"]],
            "skipped": [sunk["skipped"], fed["skipped"]],
            "loss_sums_rel_error": sums_err,
            "weights_rel_error": weights_err,
            "sunk_s": round(t_sunk, 2),
            "fed_s": round(t_fed, 2),
            "sink_calls": sink_calls,
            "jit_level": backend.jit_level,
            "backend": backend.runs,
        },
        TOL_FP32,
        t_sunk + t_fed,
        note=note,
    )


def check_nms(rt: Any, ref: dict) -> Check:
    """NMSWithMask on the device at 80 classes x 2,864 candidates against the host NMS."""
    import mindspore as ms

    from msdet.ops.nms import BatchedNMS

    nms = BatchedNMS(
        NMS_CLASSES, conf_thresh=0.0, pre_nms_topk=NMS_CANDIDATES, max_det=NMS_CANDIDATES
    )
    nms = as_called(nms, rt)
    preds = ms.Tensor(ref["nms_predictions"])
    (dets, counts), seconds = timed(lambda: [t.asnumpy() for t in nms(preds)])
    same_count = counts.tolist() == ref["nms_counts"].tolist()
    err = relative_error(dets, ref["nms_dets"]) if same_count else float("inf")
    figures = {
        "kept": int(counts[0]),
        "reference_kept": int(ref["nms_counts"][0]),
        "max_rel_error": err,
        "candidates": NMS_CANDIDATES,
        "classes": NMS_CLASSES,
    }
    ok = same_count and err <= 1e-6
    if rt.host_nms:
        # The chip profile already keeps msdet's NMS off this device: report, don't fail.
        return Check(
            "NMSWithMask on the device vs host NMS",
            "info",
            figures,
            1e-6,
            seconds,
            "this chip's NMSWithMask is float16 only: msdet runs NMS on the host here "
            f"({'the device kernel agrees' if ok else 'the device kernel differs, as expected'})",
        )
    return Check(
        "NMSWithMask on the device vs host NMS",
        "passed" if ok else "failed",
        figures,
        1e-6,
        seconds,
    )


def check_export(cfg: Any, ref: dict, weights: str, work: str) -> Check:
    """A MINDIR export of the inference network, reloaded and run against the Cell."""
    from msdet.engine.inference.export import ExportError, export_and_verify
    from msdet.models.inference import InferenceNet

    net = nano(cfg, weights)
    net.set_train(False)
    started = time.perf_counter()
    try:
        report = export_and_verify(
            InferenceNet(net), ref["images"][:1], os.path.join(work, "nano"), "MINDIR"
        )
    except ExportError as err:
        return Check(
            "MINDIR export, reloaded",
            "failed",
            note=str(err),
            seconds=time.perf_counter() - started,
        )
    return Check(
        "MINDIR export, reloaded",
        "passed",
        {
            "max_abs_diff": report["max_abs_diff"],
            "file_mb": round(os.path.getsize(report["file"]) / 2**20, 1),
        },
        1e-4,
        time.perf_counter() - started,
    )


def check_checkpoint(cfg: Any, rt: Any, step: Any, ref: dict, weights: str, work: str) -> Check:
    """A training checkpoint of ``step`` (after one step on the device: weights, momentum,
    EMA, loss scale all moved) written as ``train.py`` writes it, then restored as a resume
    restores it into a fresh step built from the reference weights: every tensor equal."""

    from msdet.engine.training.checkpoints import (
        META_EPOCH,
        META_STEPS_PER_EPOCH,
        checkpoint_extras,
        not_saved,
        restore_training_state,
        save_atomic,
    )

    if int(step.optimizer.global_step.asnumpy().ravel()[0]) == 0:
        write_parameter(step.scale, 1.0)
        one_step(step, ref)
    path = os.path.join(work, "selftest_resume.ckpt")
    started = time.perf_counter()
    save_atomic(step, path, checkpoint_extras(step, {META_EPOCH: 1, META_STEPS_PER_EPOCH: 1}))
    fresh = train_step_cell(cfg, rt, weights, rt.amp_level)
    saved = {p.name: p.asnumpy() for p in step.get_parameters() if not not_saved(p.name)}
    before = {p.name: p.asnumpy() for p in fresh.get_parameters() if p.name in saved}
    restore_training_state(fresh, path, steps_per_epoch=1)
    after = {p.name: p.asnumpy() for p in fresh.get_parameters() if p.name in saved}
    missing = sorted(set(saved) - set(after))
    differ = sorted(n for n in after if not np.array_equal(after[n], saved[n]))
    moved = sum(not np.array_equal(before[n], saved[n]) for n in before)
    ok = not missing and not differ and moved > 0
    return Check(
        "checkpoint saved and restored on the device",
        "passed" if ok else "failed",
        {
            "tensors": len(saved),
            "restored_equal": len(after) - len(differ),
            "differ": differ[:10],
            "missing": missing[:10],
            "changed_by_restore": moved,
            "file_mb": round(os.path.getsize(path) / 2**20, 1),
        },
        0.0,
        time.perf_counter() - started,
        "" if moved else "the fresh step already held the saved values: nothing was shown",
    )
