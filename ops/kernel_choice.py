"""Which of msdet's CPU kernels make the training step faster on *this* CPU: measured once.

msdet's kernels (``ops.cpu_kernels``: depthwise convolution, BatchNorm + SiLU) made the
YOLOX-nano step 1.35x faster on an Intel Xeon and 1.27x on an AVX-512 AMD EPYC, but slower on
an AVX2-only AMD EPYC (0.88 vs 0.70-0.81 s, BENCHMARKS.md). Whether a direct loop on an
OpenMP team beats MindSpore's operator depends on the CPU, its caches and how quickly the
team's sleeping threads wake up between operators, so ``runtime.cpu_kernels=auto`` does not
assume: the first time a library is used with a thread count, :func:`measure` runs a short
benchmark in a separate process (its graphs, memory and random state never touch the
training process) and :func:`choose` keeps a kernel only where it wins by a margin.

The benchmark is the shape of YOLOX-nano's backbone at 320 px and batch 8: depthwise 3x3
(strides 1 and 2) -> BatchNorm -> SiLU -> pointwise 1x1 -> BatchNorm -> SiLU, five times,
forward and backward in one graph, so MindSpore's own operators run between the kernels as
in the network. Four variants: MindSpore's operators only, with msdet's depthwise kernel,
with its BatchNorm + SiLU, with both; they alternate, several rounds. The 2x upsampling
kernel is decided on its own, against reshape + ``Tile``, on the neck's two upsamplings
(forward and backward, the same batch and size): it shares no operator with the blocks;
so are SPP's pools, on YOLOX-nano's SPP block (forward and backward), the head's
transpose, on its [8, 85, 2,100] outputs (forward and backward), the optimizer, on one SGD
step over YOLOX-nano's parameters, the EMA, on one update over them (the last three are
kept unless they cost time: their gain is memory), SimOTA's three operators (pairwise
terms, class cost, matching), on the assigner at the training step's shapes (batch 8, 50
target rows, 2,100 anchors), the loss's class term, on its [8, 2,100, 80] logits (forward
and backward), and the greedy NMS operator, on :class:`ops.nms.BatchedNMS` at the
inference benchmark's shapes (batch 8, 3,549 anchors at 416 px, 80 classes, about a fifth
of the anchors above the score threshold).
The decision is cached beside the library (``<library>.choice-t<threads>.json``), whose
name already holds the sources, compiler, flags and CPU.

    python -m ops.kernel_choice LIBRARY THREADS      # measure; prints the JSON record
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from ops.cpu_kernels import KERNELS, kernels_text

log = logging.getLogger(__name__)

VARIANTS: dict[str, tuple[str, ...]] = {
    "native": (),
    "depthwise": ("depthwise",),
    "batchnorm_silu": ("batchnorm_silu",),
    "both": ("depthwise", "batchnorm_silu"),
}
# The upsampling's two variants, decided apart from the blocks' (the same margin).
UPSAMPLE_VARIANTS: dict[str, tuple[str, ...]] = {"tile": (), "upsample": ("upsample",)}
# SPP's pools' two variants, likewise.
SPP_VARIANTS: dict[str, tuple[str, ...]] = {"max_pool": (), "spp": ("spp",)}
# The head's transpose's two variants, likewise.
TRANSPOSE_VARIANTS: dict[str, tuple[str, ...]] = {"transpose_op": (), "transpose": ("transpose",)}
# The assigner's two variants, likewise.
ASSIGNER_VARIANTS: dict[str, tuple[str, ...]] = {"ops": (), "assigner": ("assigner",)}
# The loss's class term's two variants, likewise.
CLASS_BCE_VARIANTS: dict[str, tuple[str, ...]] = {"bce_ops": (), "class_bce": ("class_bce",)}
# The suppression's two variants, likewise.
NMS_VARIANTS: dict[str, tuple[str, ...]] = {"nms_with_mask": (), "nms": ("nms",)}
# The optimizer's two variants, likewise.
SGD_VARIANTS: dict[str, tuple[str, ...]] = {"sgd_ops": (), "sgd": ("sgd",)}
# The EMA's two variants, likewise.
EMA_VARIANTS: dict[str, tuple[str, ...]] = {"ema_ops": (), "ema": ("ema",)}
# A variant replaces MindSpore's operators only when its median step is at least this much
# faster: two runs of the same variant on a shared 2-core machine differ by a few percent.
MARGIN = 0.05
ROUNDS, WARMUP = 5, 2
BATCH = 8
# (channels in, channels out, input side, depthwise stride): YOLOX-nano's DWConv blocks
# at 320 px, the stem's output onwards.
BLOCKS = ((16, 32, 160, 2), (32, 32, 80, 1), (32, 64, 80, 2), (64, 64, 40, 1), (64, 128, 40, 2))
# (channels, input side): the inputs of YOLOX-nano's two upsamplings (PAFPN) at 320 px.
UPSAMPLES = ((128, 10), (64, 20))
# (channels in, side): YOLOX-nano's SPP block at 320 px (its pools see half the channels).
SPP = (256, 10)
# The head's outputs before the swap at 320 px, 80 classes: [B, 85, 2,100].
HEAD_OUT = (85, 2100)
# The assignment's shapes: target rows per image, real boxes among them, anchors at 320 px
# (strides 8, 16, 32), classes.
ASSIGN_ROWS, ASSIGN_REAL, ASSIGN_SIDE, ASSIGN_CLASSES = 50, 5, 320, 80
# Post-processing's shapes: the side (3,549 anchors), the share of anchors whose score
# passes eval.conf_thresh (0.01), and eval's defaults (threshold, IoU, top-k, max_det).
NMS_SIDE, NMS_VALID_SHARE, NMS_SETTINGS = 416, 0.2, (0.01, 0.65, 1000, 100)
# The optimizer's parameters: YOLOX-nano's at 80 classes, (shape, count), 912,159 values.
# Convolution weights, with weight decay:
SGD_WEIGHTS = (
    ((1, 64, 1, 1), 3), ((4, 64, 1, 1), 3), ((16, 1, 3, 3), 2), ((16, 12, 3, 3), 1),
    ((16, 16, 1, 1), 2), ((16, 32, 1, 1), 2), ((32, 1, 3, 3), 5), ((32, 16, 1, 1), 1),
    ((32, 32, 1, 1), 9), ((32, 64, 1, 1), 2), ((32, 128, 1, 1), 2), ((64, 1, 3, 3), 19),
    ((64, 32, 1, 1), 1), ((64, 64, 1, 1), 26), ((64, 128, 1, 1), 6), ((64, 256, 1, 1), 3),
    ((80, 64, 1, 1), 3), ((128, 1, 3, 3), 4), ((128, 64, 1, 1), 1), ((128, 128, 1, 1), 8),
    ((128, 256, 1, 1), 6), ((256, 128, 1, 1), 1), ((256, 256, 1, 1), 2), ((256, 512, 1, 1), 1),
)  # fmt: skip
# BatchNorm scales and shifts, biases: no decay.
SGD_VECTORS = (
    ((1,), 3), ((4,), 3), ((16,), 14), ((32,), 38), ((64,), 110), ((80,), 3), ((128,), 38),
    ((256,), 8),
)  # fmt: skip
SGD_RECIPE = (0.9, 5e-4)  # momentum (Nesterov), weight decay: the yolox recipe
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TIMEOUT_S = 600


def choose(median_ms: Mapping[str, float], margin: float = MARGIN) -> tuple[str, ...]:
    """The kernels of the fastest variant, or none unless it beats ``native`` by ``margin``.

    ``median_ms`` maps each name of :data:`VARIANTS` to its median step time.
    """
    return _winner(VARIANTS, median_ms, margin)


def choose_upsample(median_ms: Mapping[str, float], margin: float = MARGIN) -> tuple[str, ...]:
    """``("upsample",)`` if the kernel beats reshape + ``Tile`` by ``margin``, else ``()``;
    ``median_ms`` maps each name of :data:`UPSAMPLE_VARIANTS` to its median time."""
    return _winner(UPSAMPLE_VARIANTS, median_ms, margin)


def choose_spp(median_ms: Mapping[str, float], margin: float = MARGIN) -> tuple[str, ...]:
    """``("spp",)`` if SPP's pools on the kernel beat MindSpore's MaxPool and Concat by
    ``margin``, else ``()``; ``median_ms`` maps each name of :data:`SPP_VARIANTS` to its
    median time."""
    return _winner(SPP_VARIANTS, median_ms, margin)


def choose_transpose(median_ms: Mapping[str, float], margin: float = MARGIN) -> tuple[str, ...]:
    """``("transpose",)`` unless the kernel's swap is slower than MindSpore's ``Transpose``
    by ``margin`` (it is kept for its memory: no index table; :func:`_not_slower`), else
    ``()``; ``median_ms`` maps each name of :data:`TRANSPOSE_VARIANTS` to its median time."""
    return _not_slower(TRANSPOSE_VARIANTS, median_ms, margin)


def choose_assigner(median_ms: Mapping[str, float], margin: float = MARGIN) -> tuple[str, ...]:
    """``("assigner",)`` if the assigner on its compiled operators beats MindSpore's
    operators by ``margin``, else ``()``; ``median_ms`` maps each name of
    :data:`ASSIGNER_VARIANTS` to its median time."""
    return _winner(ASSIGNER_VARIANTS, median_ms, margin)


def choose_class_bce(median_ms: Mapping[str, float], margin: float = MARGIN) -> tuple[str, ...]:
    """``("class_bce",)`` if the loss's class term on its compiled operators beats
    MindSpore's operators by ``margin``, else ``()``; ``median_ms`` maps each name of
    :data:`CLASS_BCE_VARIANTS` to its median time."""
    return _winner(CLASS_BCE_VARIANTS, median_ms, margin)


def choose_nms(median_ms: Mapping[str, float], margin: float = MARGIN) -> tuple[str, ...]:
    """``("nms",)`` if the greedy NMS operator beats ``NMSWithMask`` by ``margin``, else
    ``()``; ``median_ms`` maps each name of :data:`NMS_VARIANTS` to its median time."""
    return _winner(NMS_VARIANTS, median_ms, margin)


def choose_sgd(median_ms: Mapping[str, float], margin: float = MARGIN) -> tuple[str, ...]:
    """``("sgd",)`` unless one SGD operator over all parameters is slower than one ``SGD``
    per parameter by ``margin`` (it is kept for its memory: 329 fewer operators in the
    graph; :func:`_not_slower`), else ``()``; ``median_ms`` maps each name of
    :data:`SGD_VARIANTS` to its median time."""
    return _not_slower(SGD_VARIANTS, median_ms, margin)


def choose_ema(median_ms: Mapping[str, float], margin: float = MARGIN) -> tuple[str, ...]:
    """``("ema",)`` unless the EMA's update in one operator is slower than MindSpore's
    ``Reshape``s, ``Concat``, ``Lerp`` and ``Assign`` by ``margin`` (kept for its memory, as
    :func:`choose_sgd`), else ``()``; ``median_ms`` maps each name of :data:`EMA_VARIANTS`
    to its median time."""
    return _not_slower(EMA_VARIANTS, median_ms, margin)


def _winner(
    variants: Mapping[str, tuple[str, ...]], median_ms: Mapping[str, float], margin: float
) -> tuple[str, ...]:
    """The kernels of the fastest of ``variants`` if it beats the first (MindSpore's
    operators) by ``margin``, else none."""
    _check_times(variants, median_ms)
    baseline = next(iter(variants))
    best = min(variants, key=lambda name: median_ms[name])
    if median_ms[best] < (1.0 - margin) * median_ms[baseline]:
        return variants[best]
    return ()


def _not_slower(
    variants: Mapping[str, tuple[str, ...]], median_ms: Mapping[str, float], margin: float
) -> tuple[str, ...]:
    """The kernels of the second of two ``variants`` unless it is slower than the first
    (MindSpore's operators) by ``margin``: for kernels whose gain is memory, which a time
    benchmark cannot show, and which must only not cost time."""
    _check_times(variants, median_ms)
    baseline, kernel = variants
    if median_ms[kernel] <= (1.0 + margin) * median_ms[baseline]:
        return variants[kernel]
    return ()


def _check_times(variants: Mapping[str, Any], median_ms: Mapping[str, float]) -> None:
    missing = [name for name in variants if name not in median_ms]
    if missing:
        raise ValueError(f"kernel benchmark has no time for {missing}")


def choice_path(library: str, threads: int) -> str:
    """Where the decision for ``library`` at ``threads`` threads is cached."""
    return f"{os.path.splitext(library)[0]}.choice-t{int(threads)}.json"


def cached_choice(library: str, threads: int, mindspore_version: str) -> dict | None:
    """The cached record for this library, thread count and MindSpore version, or None."""
    path = choice_path(library, threads)
    try:
        with open(path, encoding="utf-8") as f:
            record = json.load(f)
    except (OSError, ValueError):
        return None
    if record.get("mindspore") != mindspore_version or not isinstance(record.get("kernels"), list):
        return None
    if any(k not in KERNELS for k in record["kernels"]):
        return None
    return record


def decide(library: str, threads: int, mindspore_version: str) -> dict:
    """The cached record, else measure in a child process and cache it.

    Returns ``{"kernels": [...], "median_ms": {variant: ms}, "mindspore": ..., ...}``; on a
    failed measurement ``kernels`` is empty (MindSpore's operators: never slower) and
    ``error`` says why. Ranks sharing a host measure once: the others wait on a lock file.
    """
    record = cached_choice(library, threads, mindspore_version)
    if record is not None:
        return record
    with _locked(choice_path(library, threads) + ".lock"):
        record = cached_choice(library, threads, mindspore_version)  # another rank's
        if record is not None:
            return record
        log.info("measuring which of msdet's CPU kernels are faster here (once, ~30 s)")
        record = _measure_in_child(library, threads)
        if "error" in record:
            log.warning(
                "kernel benchmark failed (%s): MindSpore's operators are used", record["error"]
            )
            return record  # not cached: the next run tries again
        _write_json(choice_path(library, threads), record)
    return record


def describe(record: Mapping[str, Any]) -> str:
    """One log line: what runs on which kernels, and the measured times."""
    times = {
        **(record.get("median_ms") or {}),
        **(record.get("upsample_ms") or {}),
        **(record.get("spp_ms") or {}),
        **(record.get("transpose_ms") or {}),
        **(record.get("assigner_ms") or {}),
        **(record.get("class_bce_ms") or {}),
        **(record.get("nms_ms") or {}),
        **(record.get("sgd_ms") or {}),
        **(record.get("ema_ms") or {}),
    }
    names = (
        *VARIANTS,
        *UPSAMPLE_VARIANTS,
        *SPP_VARIANTS,
        *TRANSPOSE_VARIANTS,
        *ASSIGNER_VARIANTS,
        *CLASS_BCE_VARIANTS,
        *NMS_VARIANTS,
        *SGD_VARIANTS,
        *EMA_VARIANTS,
    )
    figures = ", ".join(f"{name} {times[name]:.0f} ms" for name in names if name in times)
    chosen = kernels_text(record.get("kernels", []))
    what = f"{chosen} on msdet's kernels" if chosen else "MindSpore's operators only"
    return (
        f"CPU kernels (measured on this CPU, {record.get('threads')} threads): {what} ({figures})"
    )


@contextlib.contextmanager
def _locked(path: str) -> Iterator[None]:
    import fcntl

    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "w", encoding="utf-8") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _write_json(path: str, record: Mapping[str, Any]) -> None:
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(record, f, indent=1)
    os.replace(tmp, path)


# A launcher's variables (msrun, rank tables) must not make the child join the cluster, nor
# may the child's graphs land in a compile cache.
CHILD_DROPS_PREFIXES = (
    "MS_ROLE",
    "MS_SCHED",
    "MS_WORKER",
    "MS_NODE",
    "MS_LOCAL",
    "MS_COMPILER_CACHE",
)
CHILD_DROPS = ("RANK_ID", "RANK_SIZE", "RANK_TABLE_FILE", "DEVICE_ID")


def _measure_in_child(library: str, threads: int) -> dict:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in CHILD_DROPS and not k.startswith(CHILD_DROPS_PREFIXES)
    }
    env["PYTHONPATH"] = os.pathsep.join(p for p in (ROOT, env.get("PYTHONPATH")) if p)
    cmd = [sys.executable, "-m", "ops.kernel_choice", library, str(int(threads))]
    try:
        done = subprocess.run(
            cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=TIMEOUT_S
        )
    except (OSError, subprocess.TimeoutExpired) as err:
        return {"kernels": [], "error": str(err)}
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("{")]
    if done.returncode != 0 or not lines:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return {"kernels": [], "error": f"exit {done.returncode}: {tail}"}
    return json.loads(lines[-1])


def measure(library: str, threads: int, rounds: int = ROUNDS) -> dict:
    """Run the benchmark in this process (graph mode) and return the record to cache."""
    import mindspore as ms
    import numpy as np

    from ops.cpu_kernels import set_kernel_threads

    ms.set_context(mode=ms.GRAPH_MODE)
    ms.device_context.cpu.op_tuning.threads_num(int(threads))
    set_kernel_threads(library, threads)
    rng = np.random.default_rng(0)
    x = ms.Tensor(
        rng.standard_normal((BATCH, BLOCKS[0][0], BLOCKS[0][2], BLOCKS[0][2]), np.float32)
    )
    steps = {name: _grad_step(_blocks(library, kernels, rng)) for name, kernels in VARIANTS.items()}
    compile_s, median_ms = _time_alternating(steps, (x,), rounds)
    xs = tuple(
        ms.Tensor(rng.standard_normal((BATCH, c, side, side), np.float32)) for c, side in UPSAMPLES
    )
    up_steps = {
        name: _grad_step(_upsamplings(library, kernels, rng))
        for name, kernels in UPSAMPLE_VARIANTS.items()
    }
    up_compile_s, upsample_ms = _time_alternating(up_steps, xs, rounds)
    spp_x = ms.Tensor(rng.standard_normal((BATCH, SPP[0], SPP[1], SPP[1]), np.float32))
    spp_steps = {
        name: _grad_step(_spp(library, kernels, rng)) for name, kernels in SPP_VARIANTS.items()
    }
    spp_compile_s, spp_ms = _time_alternating(spp_steps, (spp_x,), rounds)
    head_out = ms.Tensor(rng.standard_normal((BATCH, *HEAD_OUT), np.float32))
    swap_steps = {
        name: _grad_step(_swap(library, kernels, rng))
        for name, kernels in TRANSPOSE_VARIANTS.items()
    }
    swap_compile_s, transpose_ms = _time_alternating(swap_steps, (head_out,), rounds)
    assign_steps = {
        name: _assigner(library, kernels) for name, kernels in ASSIGNER_VARIANTS.items()
    }
    assign_compile_s, assigner_ms = _time_alternating(assign_steps, _assigner_inputs(rng), rounds)
    bce_steps = {name: _class_bce(library, kernels) for name, kernels in CLASS_BCE_VARIANTS.items()}
    bce_compile_s, class_bce_ms = _time_alternating(bce_steps, _class_bce_inputs(rng), rounds)
    nms_steps = {name: _nms(library, kernels) for name, kernels in NMS_VARIANTS.items()}
    nms_compile_s, nms_ms = _time_alternating(nms_steps, (_nms_input(rng),), rounds)
    sgd_steps = {name: _sgd(library, kernels, rng) for name, kernels in SGD_VARIANTS.items()}
    grads = tuple(
        ms.Tensor(rng.standard_normal(p.shape).astype(np.float32) * 1e-3)
        for p in sgd_steps["sgd"].weights
    )
    sgd_compile_s, sgd_ms = _time_alternating(sgd_steps, grads, rounds)
    ema_steps = {name: _ema(library, kernels, rng) for name, kernels in EMA_VARIANTS.items()}
    ema_compile_s, ema_ms = _time_alternating(ema_steps, (), rounds)
    chosen = (
        choose(median_ms)
        + choose_upsample(upsample_ms)
        + choose_spp(spp_ms)
        + choose_transpose(transpose_ms)
        + choose_assigner(assigner_ms)
        + choose_class_bce(class_bce_ms)
        + choose_nms(nms_ms)
        + choose_sgd(sgd_ms)
        + choose_ema(ema_ms)
    )
    return {
        "kernels": list(chosen),
        "median_ms": median_ms,
        "upsample_ms": upsample_ms,
        "spp_ms": spp_ms,
        "transpose_ms": transpose_ms,
        "assigner_ms": assigner_ms,
        "class_bce_ms": class_bce_ms,
        "nms_ms": nms_ms,
        "sgd_ms": sgd_ms,
        "ema_ms": ema_ms,
        "first_call_s": {
            **compile_s,
            **up_compile_s,
            **spp_compile_s,
            **swap_compile_s,
            **assign_compile_s,
            **bce_compile_s,
            **nms_compile_s,
            **sgd_compile_s,
            **ema_compile_s,
        },
        "threads": int(threads),
        "margin": MARGIN,
        "mindspore": ms.__version__,
        "library": os.path.basename(library),
    }


def _time_alternating(steps: Mapping[str, Any], inputs: tuple, rounds: int):
    """(first call's seconds, median ms of the later calls) of each step, the steps taking
    turns: ``WARMUP`` rounds, then ``rounds`` timed ones, in reversed order every other
    round (in a fixed order the later variants measured faster)."""
    import numpy as np

    compile_s = {}
    for name, step in steps.items():
        started = time.perf_counter()
        step(*inputs)[0].asnumpy()
        compile_s[name] = round(time.perf_counter() - started, 2)
    names = list(steps)
    times: dict[str, list[float]] = {name: [] for name in names}
    for i in range(WARMUP + rounds):
        for name in names if i % 2 == 0 else names[::-1]:
            started = time.perf_counter()
            steps[name](*inputs)[0].asnumpy()
            if i >= WARMUP:
                times[name].append(1000.0 * (time.perf_counter() - started))
    return compile_s, {name: round(float(np.median(t)), 2) for name, t in times.items()}


def _upsamplings(library: str, kernels: Sequence[str], rng) -> Any:
    """The neck's two upsamplings, each behind a 1x1 convolution (as the lateral ones are,
    so the gradient runs through the upsampling), on msdet's kernel if ``kernels`` has it."""
    import mindspore as ms
    from mindspore import nn

    from ops.upsample import upsample2x, upsample2x_op

    class Branch(nn.Cell):
        def __init__(self, channels: int, side: int):
            super().__init__()
            w = rng.uniform(-0.3, 0.3, (channels, channels, 1, 1)).astype("float32")
            self.conv = nn.Conv2d(channels, channels, 1, weight_init=ms.Tensor(w))
            # a fixed weighting of the output, so every gradient entry differs
            self.scale = ms.Tensor(
                rng.uniform(0.5, 1.5, (1, channels, 2 * side, 2 * side)).astype("float32")
            )
            self.op = upsample2x_op(library) if "upsample" in kernels else None

        def construct(self, x):
            y = self.conv(x)
            y = upsample2x(y) if self.op is None else self.op(y)
            return y * self.scale

    class Net(nn.Cell):
        def __init__(self):
            super().__init__()
            self.branches = nn.CellList([Branch(c, side) for c, side in UPSAMPLES])

        def construct(self, *xs):
            total = 0.0
            for branch, x in zip(self.branches, xs):
                total = total + branch(x).sum()
            return total

    return Net()


def _spp(library: str, kernels: Sequence[str], rng) -> Any:
    """YOLOX-nano's SPP block: a 1x1 convolution to half the channels, the three chained 5x5
    pools concatenated with their input, a 1x1 convolution back (``models.layers.
    SPPBottleneck`` without its BatchNorms); the pools on msdet's kernel if ``kernels`` has
    it, else ``MaxPool2d`` + ``Concat``; the output weighted so every gradient differs."""
    import mindspore as ms
    from mindspore import nn, ops

    from ops.spp_pool import spp_pools_op

    channels, side = SPP
    hidden = channels // 2

    def weight(shape):  # no MindSpore initialiser: its random state is not touched
        return ms.Tensor(rng.uniform(-0.1, 0.1, shape).astype("float32"))

    class Block(nn.Cell):
        def __init__(self):
            super().__init__()
            self.conv1 = nn.Conv2d(
                channels, hidden, 1, weight_init=weight((hidden, channels, 1, 1))
            )
            self.pools = nn.CellList([nn.MaxPool2d(5, 1, pad_mode="same") for _ in range(3)])
            self.fused = spp_pools_op(library, 3) if "spp" in kernels else None
            self.conv2 = nn.Conv2d(
                4 * hidden, channels, 1, weight_init=weight((channels, 4 * hidden, 1, 1))
            )
            self.scale = ms.Tensor(
                rng.uniform(0.5, 1.5, (1, channels, side, side)).astype("float32")
            )

        def construct(self, x):
            x = self.conv1(x)
            if self.fused is None:
                pooled = [x]
                y = x
                for pool in self.pools:
                    y = pool(y)
                    pooled.append(y)
                y = ops.concat(pooled, 1)
            else:
                y = self.fused(x)
            return self.conv2(y) * self.scale

    return Block()


def _swap(library: str, kernels: Sequence[str], rng) -> Any:
    """The head's swap of its outputs' last two axes after a per-channel weight (so the
    gradient runs through the swap), on msdet's kernel if ``kernels`` has it."""
    import mindspore as ms
    from mindspore import nn, ops

    from ops.transpose import swap_last_axes_op

    class Swap(nn.Cell):
        def __init__(self):
            super().__init__()
            weight = rng.uniform(0.5, 1.5, (1, HEAD_OUT[0], 1)).astype("float32")
            self.weight = ms.Parameter(ms.Tensor(weight), name="weight")
            self.scale = ms.Tensor(rng.uniform(0.5, 1.5, (1, *HEAD_OUT[::-1])).astype("float32"))
            self.op = swap_last_axes_op(library) if "transpose" in kernels else None

        def construct(self, x):
            y = x * self.weight
            y = ops.transpose(y, (0, 2, 1)) if self.op is None else self.op(y)
            return y * self.scale

    return Swap()


def _assigner(library: str, kernels: Sequence[str]) -> Any:
    """SimOTA's assigner (forward only: it runs outside the gradient), on its compiled
    operators if ``kernels`` has them."""
    from ops.assigner import SimOTAAssigner

    return SimOTAAssigner(ASSIGN_CLASSES, library=library if "assigner" in kernels else None)


def _assigner_inputs(rng) -> tuple:
    """The assigner's inputs at the training step's shapes: random predictions, a few real
    boxes per image among padded rows."""
    import mindspore as ms
    import numpy as np

    grids, strides = [], []
    for stride in (8, 16, 32):
        n = ASSIGN_SIDE // stride
        ys, xs = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")
        grids.append(np.stack([xs.ravel(), ys.ravel()], -1))
        strides.append(np.full(n * n, stride))
    grid, stride = np.concatenate(grids), np.concatenate(strides)
    a = len(stride)
    pred = np.concatenate(
        [rng.uniform(0, ASSIGN_SIDE, (BATCH, a, 2)), np.exp(rng.uniform(1, 4, (BATCH, a, 2)))], -1
    )
    boxes = np.zeros((BATCH, ASSIGN_ROWS, 4))
    boxes[:, :ASSIGN_REAL, :2] = rng.uniform(40, ASSIGN_SIDE - 40, (BATCH, ASSIGN_REAL, 2))
    boxes[:, :ASSIGN_REAL, 2:] = rng.uniform(16, 80, (BATCH, ASSIGN_REAL, 2))
    mask = np.zeros((BATCH, ASSIGN_ROWS))
    mask[:, :ASSIGN_REAL] = 1.0
    classes = rng.integers(0, ASSIGN_CLASSES, (BATCH, ASSIGN_ROWS))
    f32 = np.float32
    return tuple(
        ms.Tensor(x)
        for x in (
            pred.astype(f32),
            rng.standard_normal((BATCH, a)).astype(f32),
            rng.standard_normal((BATCH, a, ASSIGN_CLASSES)).astype(f32),
            grid.astype(f32),
            stride.astype(f32),
            boxes.astype(f32),
            classes.astype(np.int32),
            mask.astype(f32),
        )
    )


def _class_bce(library: str, kernels: Sequence[str]) -> Any:
    """The loss's class term (``ops.bce.ClassBCE``) summed, with its gradient w.r.t. the
    logits, as the training step runs it; on msdet's operator if ``kernels`` has it.
    Returns (loss, gradient)."""
    import mindspore as ms
    from mindspore import nn

    from ops.bce import ClassBCE

    class Step(nn.Cell):
        def __init__(self):
            super().__init__()
            self.term = ClassBCE(ASSIGN_CLASSES, library if "class_bce" in kernels else None)
            self.grad_fn = ms.value_and_grad(self.forward, 0)

        def forward(self, logits, cls, iou, weight):
            return self.term(logits, cls, iou, weight).sum()

        def construct(self, logits, cls, iou, weight):
            return self.grad_fn(logits, cls, iou, weight)

    step = Step()
    step.set_train(True)
    return step


def _class_bce_inputs(rng) -> tuple:
    """The class term's inputs at the training step's shapes: random logits, matched classes
    and IoUs, a tenth of the anchors in the foreground."""
    import mindspore as ms
    import numpy as np

    a = sum((ASSIGN_SIDE // stride) ** 2 for stride in (8, 16, 32))
    return (
        ms.Tensor(rng.standard_normal((BATCH, a, ASSIGN_CLASSES)).astype(np.float32) * 4),
        ms.Tensor(rng.integers(0, ASSIGN_CLASSES, (BATCH, a)).astype(np.int32)),
        ms.Tensor(rng.random((BATCH, a)).astype(np.float32)),
        ms.Tensor((rng.random((BATCH, a)) < 0.1).astype(np.float32)),
    )


def _sgd(library: str, kernels: Sequence[str], rng) -> Any:
    """One step of SGD with Nesterov momentum and weight decay over YOLOX-nano's parameters
    (:data:`SGD_WEIGHTS`, :data:`SGD_VECTORS`): one ``SGD`` operator per parameter, as
    ``engine.optim`` runs it on MindSpore's operators, or msdet's one operator for all if
    ``kernels`` has it. Called with the gradients; returns (the first weight's sum after the
    step,), so the update must have run."""
    import mindspore as ms
    import numpy as np
    from mindspore import nn, ops

    from ops.sgd import flat_sgd_op

    momentum, decay = SGD_RECIPE
    shapes = [shape for shape, count in SGD_WEIGHTS + SGD_VECTORS for _ in range(count)]
    decays = [decay if len(shape) > 1 else 0.0 for shape in shapes]

    def f32(*values):
        return ms.Tensor(np.array(values, np.float32))

    class Update(nn.Cell):
        def __init__(self):
            super().__init__()
            self.weights = ms.ParameterTuple(
                ms.Parameter(f32(*rng.uniform(-0.1, 0.1, shape).ravel()).reshape(shape), f"w{i}")
                for i, shape in enumerate(shapes)
            )
            self.accum = self.weights.clone("accum", "zeros")
            self.stat = self.weights.clone("stat", "ones")
            self.lr, self.momentum, self.decays = f32(1e-3), f32(momentum), f32(*decays)
            self.settings = (f32(0.0), f32(1.0))  # dampening, Nesterov
            self.flat = flat_sgd_op(library, len(shapes)) if "sgd" in kernels else None
            self.each = tuple(ops.SGD(0.0, d, True) for d in decays)

        def construct(self, *grads):
            if self.flat is None:
                done = ()
                for op, weight, grad, accum, stat in zip(
                    self.each, self.weights, grads, self.accum, self.stat
                ):
                    done = done + (op(weight, grad, self.lr, accum, self.momentum, stat),)
            else:
                dampening, nesterov = self.settings
                done = self.flat(
                    self.lr, self.momentum, dampening, nesterov, self.decays,
                    *grads, *self.weights, *self.accum, *self.stat,
                )  # fmt: skip
            after = ops.depend(ops.zeros((), ms.float32), done)
            return (after + self.weights[0].sum(),)

    return Update()


def _ema(library: str, kernels: Sequence[str], rng) -> Any:
    """One update of a flat EMA buffer over YOLOX-nano's trainable parameters (the table of
    :func:`_sgd`; the model's EMA also averages its BatchNorm statistics): ``Reshape``s,
    ``Concat``, ``Lerp`` and ``Assign``, as ``engine.train_step.ModelEMA`` runs on
    MindSpore's operators, or msdet's one operator if ``kernels`` has it. Returns (the
    buffer's first value after the update,)."""
    import mindspore as ms
    import numpy as np
    from mindspore import nn, ops

    from ops.ema import flat_ema_op

    shapes = [shape for shape, count in SGD_WEIGHTS + SGD_VECTORS for _ in range(count)]

    class Update(nn.Cell):
        def __init__(self):
            super().__init__()
            self.sources = ms.ParameterTuple(
                ms.Parameter(ms.Tensor(rng.standard_normal(shape).astype(np.float32)), f"p{i}")
                for i, shape in enumerate(shapes)
            )
            total = sum(int(np.prod(shape)) for shape in shapes)
            self.buffer = ms.Parameter(ms.Tensor(np.zeros(total, np.float32)), "buffer")
            self.weight = ms.Tensor(np.array([1e-4], np.float32))
            self.flat = flat_ema_op(library, len(shapes)) if "ema" in kernels else None

        def construct(self):
            if self.flat is None:
                values = ops.concat([p.reshape((-1,)) for p in self.sources])
                done = ops.assign(self.buffer, ops.lerp(self.buffer, values, self.weight))
            else:
                done = self.flat(self.weight, *self.sources, self.buffer)
            after = ops.depend(ops.zeros((), ms.float32), done)
            return (after + self.buffer[0],)

    return Update()


def _nms(library: str, kernels: Sequence[str]) -> Any:
    """:class:`ops.nms.BatchedNMS` at eval's defaults, 80 classes, on the greedy NMS
    operator if ``kernels`` has it (else ``NMSWithMask``)."""
    from ops.nms import BatchedNMS

    conf, iou, topk, max_det = NMS_SETTINGS
    return BatchedNMS(
        ASSIGN_CLASSES, conf, iou, topk, max_det, library=library if "nms" in kernels else None
    )


def _nms_input(rng) -> Any:
    """Decoded predictions [8, A, 85] at ``NMS_SIDE``: boxes anywhere in the image, a share
    ``NMS_VALID_SHARE`` of the anchors confident enough to be candidates."""
    import mindspore as ms
    import numpy as np

    a = sum((NMS_SIDE // stride) ** 2 for stride in (8, 16, 32))
    centres = rng.uniform(0, NMS_SIDE, (BATCH, a, 2))
    sizes = rng.uniform(8, NMS_SIDE / 3, (BATCH, a, 2))
    confident = rng.uniform(size=(BATCH, a, 1)) < NMS_VALID_SHARE
    objectness = np.where(confident, rng.uniform(0.1, 1, (BATCH, a, 1)), 1e-3)
    classes = rng.uniform(0, 1, (BATCH, a, ASSIGN_CLASSES))
    pred = np.concatenate([centres, sizes, objectness, classes], -1)
    return ms.Tensor(pred.astype(np.float32))


def _blocks(library: str, kernels: Sequence[str], rng) -> Any:
    """The benchmark network with ``kernels`` on msdet's library, the rest on MindSpore's."""
    import mindspore as ms
    from mindspore import nn

    from ops.batchnorm_silu import BatchNormSiLU
    from ops.depthwise import DepthwiseConv2d

    def weight(shape):  # no MindSpore initialiser: its random state is not touched
        return ms.Tensor(rng.uniform(-0.3, 0.3, shape).astype("float32"))

    class NormAct(nn.Cell):
        def __init__(self, channels: int):
            super().__init__()
            self.bn = nn.BatchNorm2d(channels, eps=1e-3, momentum=0.97)
            self.act = nn.SiLU()
            fused = "batchnorm_silu" in kernels
            self.fused = BatchNormSiLU(1e-3, 0.97, library) if fused else None

        def construct(self, x):
            if self.fused is None:
                return self.act(self.bn(x))
            bn = self.bn
            return self.fused(x, bn.gamma, bn.beta, bn.moving_mean, bn.moving_variance)

    class Block(nn.Cell):
        def __init__(self, cin: int, cout: int, stride: int):
            super().__init__()
            if "depthwise" in kernels:
                self.dconv = DepthwiseConv2d(cin, 3, stride, weight((cin, 1, 3, 3)), library)
            else:
                self.dconv = nn.Conv2d(
                    cin, cin, 3, stride, pad_mode="pad", padding=1, group=cin,
                    weight_init=weight((cin, 1, 3, 3)),
                )  # fmt: skip
            self.norm1 = NormAct(cin)
            self.pconv = nn.Conv2d(cin, cout, 1, weight_init=weight((cout, cin, 1, 1)))
            self.norm2 = NormAct(cout)

        def construct(self, x):
            return self.norm2(self.pconv(self.norm1(self.dconv(x))))

    return nn.SequentialCell([Block(cin, cout, s) for cin, cout, _, s in BLOCKS])


def _grad_step(net) -> Any:
    """A Cell computing the sum of ``net``'s output and its gradients w.r.t. the weights,
    as the training step does (a Cell around ``value_and_grad``: the same network behind an
    ``ms.jit`` function ran MindSpore's depthwise weight gradient ~40x slower)."""
    import mindspore as ms
    from mindspore import nn

    class Step(nn.Cell):
        def __init__(self):
            super().__init__()
            self.net = net
            self.grad_fn = ms.value_and_grad(self.forward, None, net.trainable_params())

        def forward(self, *xs):
            return self.net(*xs).sum()

        def construct(self, *xs):
            return self.grad_fn(*xs)

    step = Step()
    step.set_train(True)
    return step


def main(argv: Sequence[str] | None = None) -> None:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 2:
        raise SystemExit("usage: python -m ops.kernel_choice LIBRARY THREADS")
    print(json.dumps(measure(args[0], int(args[1]))), flush=True)


if __name__ == "__main__":
    main()
