"""Which of msdet's CPU kernels make the training step faster on *this* CPU: measured once.

Whether a direct loop on an OpenMP team beats MindSpore's operator depends on the CPU, its
caches and how quickly the team's sleeping threads wake up between operators: msdet's
depthwise and BatchNorm + SiLU kernels made the YOLOX-nano step 1.35x faster on an Intel
Xeon and 1.27x on an AVX-512 AMD EPYC, but slower on an AVX2-only AMD EPYC (0.88 vs
0.70-0.81 s). So ``runtime.cpu_kernels=auto`` does not assume: the first
time a library is used with a thread count, :func:`measure` runs short benchmarks in a
separate process (its graphs, memory and random state never touch the training process)
and keeps a kernel only where its rule says so.

:data:`DECISIONS` lists what is decided, each on its own benchmark
(``engine.runtime.kernel_benchmarks``, YOLOX-nano's shapes) and its own variants, the first of which
is MindSpore's operators alone; the variants take turns, several rounds. Two rules:
:func:`_winner` keeps the fastest variant if it beats MindSpore's operators by
:data:`MARGIN` (kernels whose gain is time), :func:`_not_slower` keeps the kernel unless it
is slower by the margin (kernels whose gain is memory or operator count, which a short
benchmark cannot show: the head's transpose, SGD, the EMA).
The decision is cached beside the library (``<library>.choice-t<threads>.json``), whose
name already holds the sources, compiler, flags and CPU.

    python -m msdet.engine.runtime.kernel_choice LIBRARY THREADS      # measure; prints the JSON record
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from msdet.common.cache import make_cache_folder
from msdet.engine.runtime import kernel_benchmarks as bench
from msdet.engine.runtime import kernel_benchmarks_training as training_bench
from msdet.ops.cpu_kernels import KERNELS, kernels_text

log = logging.getLogger(__name__)

# A variant replaces MindSpore's operators only when its median time is at least this much
# shorter: two runs of the same variant on a shared 2-core machine differ by a few percent.
MARGIN = 0.05
ROUNDS, WARMUP = 5, 2
TIMEOUT_S = 600
DONE_LINE = "measured"  # the child's line after each decision


@dataclass(frozen=True)
class Decision:
    """One choice ``auto`` makes: its benchmark's variants, the rule that picks among them,
    and the benchmark (``engine.runtime.kernel_benchmarks``: ``step`` builds one variant's Cell,
    ``inputs`` its inputs). The record keeps the times as ``"<name>_ms"``."""

    name: str
    variants: Mapping[str, tuple[str, ...]]  # the first: MindSpore's operators alone
    rule: Callable[[Mapping[str, tuple[str, ...]], Mapping[str, float], float], tuple[str, ...]]
    step: Callable[[str, Sequence[str], Any], Any]
    inputs: Callable[[Any, Mapping[str, Any]], tuple]

    @property
    def key(self) -> str:
        return f"{self.name}_ms"

    def choose(self, median_ms: Mapping[str, float], margin: float = MARGIN) -> tuple[str, ...]:
        """The kernels this decision keeps, given each variant's median time in ms."""
        return self.rule(self.variants, median_ms, margin)


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


DECISIONS: dict[str, Decision] = {
    d.name: d
    for d in (
        Decision(
            "blocks",
            {
                "native": (),
                "depthwise": ("depthwise",),
                "batchnorm_silu": ("batchnorm_silu",),
                "both": ("depthwise", "batchnorm_silu"),
            },
            _winner,
            bench.blocks,
            bench.blocks_inputs,
        ),
        Decision(
            "focus",
            {"focus_ops": (), "focus": ("focus",)},
            _winner,
            bench.focus,
            bench.focus_inputs,
        ),
        Decision(
            "pointwise",
            {"conv2d": (), "pointwise": ("pointwise",)},
            _winner,
            bench.pointwise,
            bench.pointwise_inputs,
        ),
        Decision(
            "upsample",
            {"tile": (), "upsample": ("upsample",)},
            _winner,
            bench.upsample,
            bench.upsample_inputs,
        ),
        Decision("spp", {"max_pool": (), "spp": ("spp",)}, _winner, bench.spp, bench.spp_inputs),
        Decision(
            "transpose",
            {"transpose_op": (), "transpose": ("transpose",)},
            _not_slower,  # kept for its memory: no index table
            bench.transpose,
            bench.transpose_inputs,
        ),
        Decision(
            "assigner",
            {"ops": (), "assigner": ("assigner",)},
            _winner,
            training_bench.assigner,
            training_bench.assigner_inputs,
        ),
        Decision(
            "loss",
            {"loss_ops": (), "class_bce": ("class_bce",), "loss_terms": ("loss_terms",)},
            _winner,
            training_bench.loss,
            training_bench.loss_inputs,
        ),
        Decision(
            "nms",
            {"nms_with_mask": (), "nms": ("nms",)},
            _winner,
            training_bench.nms,
            training_bench.nms_inputs,
        ),
        Decision(
            "sgd",
            {"sgd_ops": (), "sgd": ("sgd",)},
            _not_slower,  # kept for its memory: 329 fewer operators in the graph
            training_bench.sgd,
            training_bench.sgd_inputs,
        ),
        Decision(
            "ema",
            {"ema_ops": (), "ema": ("ema",)},
            _not_slower,  # likewise: one operator instead of Reshapes, Concat, Lerp, Assign
            training_bench.ema,
            training_bench.ema_inputs,
        ),
    )
}


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
    if any(not isinstance(record.get(d.key), dict) for d in DECISIONS.values()):
        return None  # from before a decision was added: measure again
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
        log.info(
            "measuring which of msdet's CPU kernels are faster here "
            "(once per library and thread count, under a minute)"
        )
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
    figures = ", ".join(
        f"{name} {ms:.0f} ms"
        for decision in DECISIONS.values()
        for name, ms in (record.get(decision.key) or {}).items()
        if name in decision.variants
    )
    chosen = kernels_text(record.get("kernels", []))
    what = f"{chosen} on msdet's kernels" if chosen else "MindSpore's operators only"
    return (
        f"CPU kernels (measured on this CPU, {record.get('threads')} threads): {what} ({figures})"
    )


def headline(record: Mapping[str, Any]) -> str:
    """The console's short form of :func:`describe`."""
    chosen = len(record.get("kernels", []))
    if not chosen:
        return "CPU kernels: MindSpore's operators (none of msdet's measured faster here)"
    return (
        f"CPU kernels: {chosen} of msdet's {len(KERNELS)}, measured faster on this CPU at "
        f"{record.get('threads')} threads (the times are in the log file)"
    )


@contextlib.contextmanager
def _locked(path: str) -> Iterator[None]:
    import fcntl

    make_cache_folder(os.path.dirname(path) or ".")  # a clear error naming MSDET_CACHE_DIR
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
    """:func:`measure` in a child process (its own MindSpore context), with a progress bar
    over the decisions as the child reports each one done."""
    from msdet.common.progress import Progress

    env = {
        k: v
        for k, v in os.environ.items()
        if k not in CHILD_DROPS and not k.startswith(CHILD_DROPS_PREFIXES)
    }
    cmd = [sys.executable, "-m", "msdet.engine.runtime.kernel_choice", library, str(int(threads))]
    bar = Progress(len(DECISIONS), "measuring CPU kernels", "kernel", logger=log)
    lines: list[str] = []
    # Its own working folder: whatever MindSpore writes there (compile records) goes with it.
    work = tempfile.mkdtemp(prefix="msdet-kernel-choice-")
    try:
        with subprocess.Popen(
            cmd, cwd=work, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        ) as child:
            timer = threading.Timer(TIMEOUT_S, child.kill)
            timer.start()
            try:
                for line in child.stdout:  # one DONE_LINE per decision, then the record
                    if line.startswith(DONE_LINE):
                        bar.update()
                    elif line.startswith("{"):
                        lines.append(line)
                stderr = child.stderr.read()
                child.wait()
            finally:
                timer.cancel()
    except OSError as err:
        return {"kernels": [], "error": str(err)}
    finally:
        bar.close()
        shutil.rmtree(work, ignore_errors=True)
    if child.returncode != 0 or not lines:
        tail = (stderr.strip().splitlines() or ["no output"])[-1]
        return {"kernels": [], "error": f"exit {child.returncode}: {tail}"}
    return json.loads(lines[-1])


def measure(library: str, threads: int, rounds: int = ROUNDS) -> dict:
    """Run every benchmark of :data:`DECISIONS` in this process (graph mode) and return the
    record to cache."""
    import mindspore as ms
    import numpy as np

    from msdet.ops.cpu_kernels import set_kernel_threads

    ms.set_context(mode=ms.GRAPH_MODE)
    ms.device_context.cpu.op_tuning.threads_num(int(threads))
    set_kernel_threads(library, threads)
    rng = np.random.default_rng(0)
    record: dict[str, Any] = {"kernels": [], "first_call_s": {}}
    for decision in DECISIONS.values():
        steps = {
            name: decision.step(library, kernels, rng)
            for name, kernels in decision.variants.items()
        }
        first_s, median_ms = _time_alternating(steps, decision.inputs(rng, steps), rounds)
        record["kernels"] += decision.choose(median_ms)
        record[decision.key] = median_ms
        record["first_call_s"].update(first_s)
        print(f"{DONE_LINE} {decision.key}", flush=True)  # the parent's progress bar
    return {
        **record,
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


def main(argv: Sequence[str] | None = None) -> None:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 2:
        raise SystemExit("usage: python -m msdet.engine.runtime.kernel_choice LIBRARY THREADS")
    print(json.dumps(measure(args[0], int(args[1]))), flush=True)


if __name__ == "__main__":
    main()
