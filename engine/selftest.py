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

import argparse
import json
import logging
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import numpy as np

log = logging.getLogger("selftest")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIG_DIR = os.path.join(ROOT, "configs")
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
    from hydra import compose, initialize_config_dir

    from engine.cli import prepare_config

    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        return prepare_config(compose("config", overrides=["model=yolox_nano", *overrides]))


def nano(cfg: Any, weights: str | None = None):
    """YOLOX-nano (80 classes) with the reference weights when given."""
    from models.checkpoint import load_weights
    from models.yolox import build_model

    net = build_model(cfg.model, NUM_CLASSES)
    if weights:
        load_weights(net, weights, use_ema=False)
    return net


def train_step_cell(cfg: Any, rt: Any, weights: str, amp: str):
    """msdet's training step (SGD, EMA, loss scaling at ``amp``) on the reference weights."""
    from engine.amp import apply_amp
    from engine.trainer import build_train_step
    from models.loss import YOLOXLoss

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
    from engine.runtime import setup_runtime

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
    from engine.amp import mixed_precision
    from engine.runtime import Runtime

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
    from ops.nms import HostNMS

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
    env["PYTHONPATH"] = os.pathsep.join(p for p in (ROOT, env.get("PYTHONPATH")) if p)
    cmd = [sys.executable, "-m", "engine.selftest", "--reference", work, "--size", str(size)]
    done = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"the CPU reference failed:\n{done.stderr[-3000:]}")
    saved = np.load(os.path.join(work, "reference.npz"))
    return {k: saved[k] for k in saved.files}


# ---- the checks on the device ---------------------------------------------------------------


def check_chip(rt: Any) -> Check:
    """The chip profile and the precision mode in effect; on CPU, the profiles of the chips
    msdet knows, simulated from MindSpore's capability answers for them."""
    from engine.device import chip_profile

    if rt.device != "Ascend":
        expected = {  # (classic, A2) -> (precision mode, host NMS, float-status register)
            "ascend910": ((True, False), ("allow_fp32_to_fp16", True, True)),
            "ascend910b": ((False, True), ("must_keep_origin_dtype", False, False)),
            "ascend310p": ((False, False), (None, True, False)),
        }
        got = {}
        for soc, (answers, _) in expected.items():
            p = chip_profile(soc, *answers, None)
            got[soc] = (p.precision_mode, p.host_nms, p.float_status)
        ok = all(got[s] == w for s, (_, w) in expected.items())
        return Check(
            "chip profile (simulated)",
            "passed" if ok else "failed",
            {"profiles": {s: list(v) for s, v in got.items()}},
            note="no Ascend here: the real chip's profile needs Ascend",
        )
    from engine.device import precision_mode_in_effect

    in_effect = precision_mode_in_effect()
    ok = rt.precision_mode is None or in_effect == rt.precision_mode
    return Check(
        "chip profile and precision mode",
        "passed" if ok else "failed",
        {
            "chip": rt.chip,
            "precision_mode": in_effect,
            "chosen": rt.precision_mode,
            "host_nms": rt.host_nms,
        },
    )


def timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    started = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - started


def check_forward(cfg: Any, rt: Any, ref: dict, weights: str, amp: str) -> Check:
    """YOLOX-nano's inference forward at ``amp`` against the float32 reference."""
    import mindspore as ms

    from engine.amp import mixed_precision

    net = nano(cfg, weights)
    net.set_train(False)
    if amp != "O0":
        net = mixed_precision(net, amp)
        net.set_train(False)
    images = ms.Tensor(ref["images"])
    out, first = timed(lambda: net(images).asnumpy())
    _, second = timed(lambda: net(images).asnumpy())
    fp16 = amp != "O0" or (rt.device == "Ascend" and rt.precision_mode != "must_keep_origin_dtype")
    check = compare(
        f"forward {amp}",
        out.astype(np.float32),
        ref[f"forward_{amp}"],
        TOL_FP16 if fp16 else TOL_FP32,
        compile_s=round(first - second, 2),
        step_s=round(second, 4),
    )
    check.seconds = first + second
    return check


def check_train_step(step: Any, rt: Any, ref: dict) -> Check:
    """msdet's training step once at the run's AMP level, from the reference weights: loss
    terms and the size of the update (the gradients, through SGD) against the host's."""
    import mindspore as ms

    # Scale 1: the dynamic scale's first 1024 overflows a fresh network's fp16 gradients
    # (the step is then skipped, correctly, and there is no update to compare).
    step.scale.set_data(ms.Tensor(1.0, ms.float32))
    (terms, norm), seconds = timed(lambda: one_step(step, ref))
    fp16 = rt.amp_level != "O0" or (
        rt.device == "Ascend" and rt.precision_mode != "must_keep_origin_dtype"
    )
    tol = TOL_FP16 if fp16 else TOL_FP32
    ref_norm = float(ref[f"update_norm_{rt.amp_level}"])
    loss_err = relative_error(terms, ref[f"loss_terms_{rt.amp_level}"])
    norm_err = abs(norm - ref_norm) / max(ref_norm, 1e-12)
    ok = loss_err <= tol and norm_err <= tol
    return Check(
        f"training step {rt.amp_level}: losses, update",
        "passed" if ok else "failed",
        {
            "loss_max_rel_error": loss_err,
            "update_norm_rel_error": norm_err,
            "loss_terms": terms.tolist(),
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
    step.scale.set_data(ms.Tensor(2.0**100, ms.float32))
    out, seconds = timed(lambda: step(*batch))
    skipped_flag, scale = bool(out[8].asnumpy()), float(step.scale.asnumpy())
    moved = [p.name for p, b in zip(params, before) if not np.array_equal(p.asnumpy(), b)]
    step.scale.set_data(ms.Tensor(1.0, ms.float32))
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
    """``Model.train`` with ``steps`` steps in one sink against the same steps fed one by one:
    the in-graph statistics (loss sums, steps, skips) and the final weights agree."""
    if not rt.sink_effective:
        return skipped(
            "data sinking (sink_size > 1)",
            f"needs Ascend: on {rt.device} MindSpore feeds every step from the host",
        )
    import mindspore.dataset as ds
    from mindspore.train import Model

    from engine.step_stats import read_and_reset

    batch = tuple(ref[k] for k in ("images", "targets", "mask"))
    results = {}
    for sink in (True, False):
        step = train_step_cell(cfg, rt, weights, rt.amp_level)
        data = ds.GeneratorDataset(
            lambda: (batch for _ in range(steps)), ["images", "targets", "mask"]
        )
        (_, seconds) = timed(
            lambda step=step, data=data, sink=sink: Model(step).train(
                1, data, dataset_sink_mode=sink, sink_size=steps if sink else -1
            )
        )
        stats = read_and_reset(step.stats)
        weights_now = np.concatenate([p.asnumpy().ravel() for p in step.trainable_params()])
        results[sink] = (stats, weights_now, seconds)
    (sunk, w_sunk, t_sunk), (fed, w_fed, t_fed) = results[True], results[False]
    sums_err = relative_error(
        np.array(list(sunk["sums"].values())), np.array(list(fed["sums"].values()))
    )
    weights_err = relative_error(w_sunk, w_fed)
    ok = sunk["steps"] == fed["steps"] == steps and sums_err <= TOL_FP32 and weights_err <= TOL_FP32
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
        },
        TOL_FP32,
        t_sunk + t_fed,
    )


def check_nms(rt: Any, ref: dict) -> Check:
    """NMSWithMask on the device at 80 classes x 2,864 candidates against the host NMS."""
    import mindspore as ms

    from ops.nms import BatchedNMS

    nms = BatchedNMS(
        NMS_CLASSES, conf_thresh=0.0, pre_nms_topk=NMS_CANDIDATES, max_det=NMS_CANDIDATES
    )
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
    from models.inference import ExportError, InferenceNet, export_and_verify

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


def check_distributed(cards: int, rt: Any, work: str) -> Check:
    """``cards`` ranks through msdet's launcher: an all-reduce and sharded evaluation."""
    name = f"{cards} ranks: all-reduce, sharded evaluation"
    if cards < 2:
        return skipped("collectives (2+ cards)", "needs 2+ Ascend cards: run with --cards N")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MS_", "RANK_"))}
    env["TRAIN_ENTRY"] = os.path.join(ROOT, "engine", "selftest_ranks.py")
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    run_dir = os.path.join(work, "ranks")
    device = "runtime=ascend_8p" if rt.device == "Ascend" else "runtime=cpu"
    from data.build import build_sources
    from engine.selftest_ranks import DATA

    build_sources(compose_config([*DATA]).data)  # generated once here, not by every rank
    cmd = [
        "bash",
        os.path.join(ROOT, "scripts", "run_distributed_train.sh"),
        str(cards),
        device,
        f"hydra.run.dir={run_dir}",
    ]
    started = time.perf_counter()
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800)
    seconds = time.perf_counter() - started
    result = os.path.join(run_dir, "selftest_ranks.json")
    if done.returncode != 0 or not os.path.isfile(result):
        return Check(
            name, "failed", seconds=seconds, note=(done.stderr.strip().splitlines() or ["?"])[-1]
        )
    with open(result, encoding="utf-8") as f:
        figures = json.load(f)
    ok = figures["allreduce_ok"] and figures["sharded_equals_single"]
    return Check(name, "passed" if ok else "failed", figures, seconds=seconds)


# ---- the report -------------------------------------------------------------------------------


def environment(rt: Any) -> dict[str, Any]:
    """Versions and the machine, for the report."""
    import mindspore as ms

    from engine.doctor import ascend_versions

    return {
        "mindspore": ms.__version__,
        **ascend_versions(),
        "device": rt.device,
        "chip": rt.chip,
        "precision_mode": rt.precision_mode,
        "amp": rt.amp_level,
        "mode": rt.mode,
        "cpu_kernels": list(rt.kernel_names),
        "python": platform.python_version(),
        "machine": platform.machine(),
        "processor": _cpu_model(),
    }


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            return next(
                (ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), ""
            )
    except OSError:
        return platform.processor()


def format_table(checks: list[Check]) -> str:
    """The report as a table: check, status, main figure, tolerance, seconds."""
    width = max(len(c.name) for c in checks)
    lines = [f"{'check':<{width}}  {'status':<7}  {'figure':<24}  {'tolerance':<9}  seconds"]
    for c in checks:
        main = next((f"{k}={v:.3g}" for k, v in c.figures.items() if isinstance(v, float)), "")
        tol = f"{c.tolerance:g}" if c.tolerance is not None else ""
        lines.append(f"{c.name:<{width}}  {c.status:<7}  {main:<24}  {tol:<9}  {c.seconds:7.1f}")
        if c.note:
            lines.append(f"{'':<{width}}  {c.note}")
    return "\n".join(lines)


def run_checks(overrides: list[str], size: int, cards: int, work: str) -> tuple[dict, list[Check]]:
    """Set up the device, build the reference, run every check; returns (environment, checks)."""
    from engine.runtime import setup_runtime

    # MindSpore's operators on both sides: msdet's CPU kernels have parity tests of their own,
    # are float32 only (AMP checks rebuild the network), and never run on a device.
    cfg = compose_config(["runtime.cpu_kernels=native", *overrides])
    rt = setup_runtime(cfg.runtime, work)
    env = environment(rt)
    checks = [check_chip(rt)]
    (ref, seconds) = timed(lambda: run_reference(size, work))
    weights = os.path.join(work, "weights.ckpt")
    log.info("CPU reference computed in %.1f s", seconds)
    cells: dict[str, Any] = {}

    def step_at(amp: str) -> Any:  # one compiled step per AMP level (Ascend: O2 for both)
        if amp not in cells:
            cells[amp] = train_step_cell(cfg, rt, weights, amp)
        return cells[amp]

    steps: list[tuple[str, Callable[[], Check]]] = [
        ("forward O0", lambda: check_forward(cfg, rt, ref, weights, "O0")),
        ("forward O2", lambda: check_forward(cfg, rt, ref, weights, "O2")),
        ("training step", lambda: check_train_step(step_at(rt.amp_level), rt, ref)),
        ("overflow", lambda: check_overflow(step_at("O2"), rt, ref)),
        ("sink", lambda: check_sink(cfg, rt, ref, weights)),
        ("nms", lambda: check_nms(rt, ref)),
        ("export", lambda: check_export(cfg, ref, weights, work)),
        ("distributed", lambda: check_distributed(cards, rt, work)),
    ]
    for label, run in steps:
        started = time.perf_counter()
        try:
            check = run()
        except Exception as err:  # one broken path must not hide the others
            check = Check(
                label,
                "failed",
                note=f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}",
            )
        check.seconds = check.seconds or time.perf_counter() - started
        log.info("%s: %s", check.name, check.status)
        checks.append(check)
    return env, checks


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=320, help="input size (64: the tiny variant)")
    parser.add_argument("--cards", type=int, default=0, help="also check N ranks (2+)")
    parser.add_argument("--report", default="selftest.json", help="where the JSON report goes")
    parser.add_argument("--keep", action="store_true", help="keep the work folder")
    parser.add_argument("--reference", metavar="DIR", help=argparse.SUPPRESS)
    parser.add_argument("overrides", nargs="*", help="Hydra overrides, e.g. runtime.device=CPU")
    args = parser.parse_args(argv)
    if args.reference:
        make_reference(args.reference, args.size)
        return 0
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    work = tempfile.mkdtemp(prefix="msdet-selftest-")
    started = time.perf_counter()
    try:
        env, checks = run_checks(args.overrides, args.size, args.cards, work)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    report = {
        "environment": env,
        "size": args.size,
        "total_s": round(time.perf_counter() - started, 1),
        "checks": [asdict(c) for c in checks],
        "summary": {s: sum(c.status == s for c in checks) for s in STATUS_ORDER},
    }
    print(format_table(checks))
    print(f"summary: {report['summary']} in {report['total_s']} s; report: {args.report}")
    with open(args.report, "w", encoding="utf-8") as f:
        json.dump(report, f, indent=2, default=str)
    return 1 if report["summary"]["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
