"""A training run decided once, before any network or dataset is built: :func:`plan_run`.

Everything the engine would otherwise work out where it is used, from several config keys at
once, is decided here from the config, the runtime (device, ranks, chip) and a summary of
the data (image and class counts): the schedule, the loop and its backend per graph, data
sinking, the multi-scale sizes, the target buckets, when graphs compile, which epochs
evaluate, where the weights start, what may stop the run early. A combination of settings
that cannot work is refused here, as a :class:`PlanError` that says the way out; nothing is
dropped with a warning. The run's header is :meth:`RunPlan.describe`.

The trainer builds its parts from the plan and runs its loop
(``engine.training.trainer``); the callbacks are chosen from it in one place
(``engine.training.hooks``). Each decision here is a pure function of its inputs, tested
without a graph (``tests/engine/training/test_plan.py``).
"""

from __future__ import annotations

import enum
import importlib.util
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from msdet.data.buckets import check_graph_count, target_buckets
from msdet.data.config import first_no_aug_epoch
from msdet.engine.runtime.ascend import Backend, graph_backends
from msdet.engine.runtime.process import Runtime
from msdet.engine.training.schedule import DEFAULT_INTERVAL, Schedule, all_sizes, sink_steps

COMPILE_CACHE_VAR = "MS_COMPILER_CACHE_ENABLE"


class PlanError(ValueError):
    """Settings that cannot run together (or a value no run can take), with the way out."""


class Loop(enum.Enum):
    """Who drives the training steps (``runtime.loop``)."""

    MODEL = "model"  # mindspore.train.Model.train, in runtime.mode
    JIT = "jit"  # msdet's loop in PyNative mode, the step compiled by mindspore.jit

    @classmethod
    def parse(cls, value: Any) -> Loop:
        """``runtime.loop`` as a :class:`Loop`; a clear error for anything else."""
        try:
            return cls(str(value))
        except ValueError:
            raise PlanError(
                f"runtime.loop must be one of {[m.value for m in cls]}, got {value!r}"
            ) from None


class StartKind(enum.Enum):
    """Where a run's weights come from."""

    SCRATCH = "scratch"
    PRETRAINED = "pretrained"  # train.pretrained: a file, a model name or auto
    RESUME = "resume"  # train.resume: a checkpoint with epochs left
    FINISHED = "finished"  # train.resume of a run that trained all its epochs


@dataclass(frozen=True)
class DataSummary:
    """What the plan needs of the data: read from the annotations, no pipeline built."""

    name: str
    train_images: int
    val_images: int
    class_names: tuple[str, ...]

    @classmethod
    def of(cls, name: str, train: Any, val: Any) -> DataSummary:
        """The summary of a train and a val source (``data.coco.CocoSource``)."""
        return cls(str(name), len(train), len(val), tuple(train.class_names))


@dataclass(frozen=True)
class StartPlan:
    """``kind`` and what it names: ``pretrained`` (train.pretrained as given; the trainer
    resolves it to a file), ``resume`` (the checkpoint) and the epochs it trained;
    ``optional``: official weights that cannot be had start the run from scratch, said so
    (the own-data recipe's default, ``train.weights_optional``), instead of stopping it."""

    kind: StartKind
    pretrained: str | None = None
    resume: str | None = None
    epoch: int = 0
    optional: bool = False


@dataclass(frozen=True)
class RunPlan:
    """Every decision of a training run (module docstring)."""

    model: str  # model.name, for the header
    loop: Loop
    mode: str  # MindSpore's execution mode: "graph" | "pynative"
    backends: dict[str, Backend]  # graph kind -> jit level and backend (ascend.graph_backends)
    schedule: Schedule
    input_size: tuple[int, int]  # trained at (data.img_size x train.img_scale)
    eval_size: tuple[int, int]
    sink: bool  # MindSpore really sinks data (Ascend, GPU)
    steps_per_sink: int  # optimizer steps; one loop "epoch" per sink
    sinks_per_epoch: int
    multiscale_range: int  # 0: one size
    multiscale_interval: int
    sizes: tuple[tuple[int, int], ...]  # every training input size
    buckets: tuple[int, ...]  # target rows per bucket; () when off
    compile_all_first: bool  # every training graph compiled before the first step
    eval_epochs: tuple[int, ...]  # 1-based
    start: StartPlan
    patience: int  # evaluations without a new best before stopping; 0: off
    time_limit_min: float | None
    stop_at_epoch: int | None
    profile_steps: int
    log_every: int  # optimizer steps between the log's loss lines
    device_nms: bool  # the evaluation's NMS may run on the device (checked on first use)
    ranks: int = 1
    notes: tuple[str, ...] = field(default=())
    trackers: tuple[str, ...] = ()  # experiment trackers beside TensorBoard (train.track)

    @property
    def epochs(self) -> int:
        return self.schedule.epochs

    @property
    def calls_per_sink(self) -> int:
        """Training-step calls per sink: MindSpore counts micro-batches."""
        return self.steps_per_sink * self.schedule.accumulate

    @property
    def sink_calls(self) -> int:
        """The loop's sink size in calls; 0 when steps are fed from the host."""
        return self.calls_per_sink if self.sink else 0

    @property
    def loop_epochs(self) -> int:
        """The loop's 'epochs': one per sink."""
        return self.schedule.epochs * self.sinks_per_epoch

    @property
    def finished(self) -> bool:
        return self.start.kind is StartKind.FINISHED

    @property
    def training_graphs(self) -> int:
        """Training graphs the run compiles: one per input size and target bucket."""
        return len(self.sizes) * max(1, len(self.buckets))

    def evaluates(self, epoch: int) -> bool:
        """Whether epoch ``epoch`` (1-based) ends with an evaluation."""
        return int(epoch) in self.eval_epochs

    def evaluations_before(self, batches: int, start_epoch: int = 0) -> tuple[int, ...]:
        """The evaluations after ``start_epoch`` that come before ``batches`` training
        batches (BatchNorm's settling: ``models.layers.batchnorm_settling_steps``)."""
        calls = self.schedule.calls_per_epoch
        return tuple(e for e in self.eval_epochs if start_epoch < e and e * calls < batches)

    def describe(self) -> list[str]:
        """The run's header, one line each."""
        s = self.schedule
        trained, evaluated = self.input_size, self.eval_size
        lines = [
            f"training {self.model} at {trained[0]}x{trained[1]}"
            + ("" if evaluated == trained else f" (evaluated at {evaluated[0]}x{evaluated[1]})")
            + f": {s.epochs} epochs x {s.steps_per_epoch} steps, batch {s.batch} x "
            f"{s.ranks} ranks"
            + (f" x {s.accumulate} accumulated" if s.accumulate > 1 else "")
            + f", lr {s.base_lr:.4g}",
            "loop: "
            + (
                "mindspore.train.Model.train"
                if self.loop is Loop.MODEL
                else "msdet's loop, the step compiled by mindspore.jit"
            )
            + f", {self.mode} mode; "
            + _describe_backends(self.backends)
            + ("; data sink" if self.sink else ""),
            f"evaluation after epochs {_ranges(self.eval_epochs)}",
        ]
        if self.multiscale_range:
            lines.append(
                f"multi-scale: {len(self.sizes)} sizes "
                f"({self.sizes[0][0]}-{self.sizes[-1][0]} px), a new one every "
                f"{self.multiscale_interval} steps"
            )
        if self.buckets:
            lines.append(
                f"target buckets: {'/'.join(map(str, self.buckets))} rows "
                f"({self.training_graphs} training graphs, "
                + ("all compiled first)" if self.compile_all_first else "each on first use)")
            )
        return lines + list(self.notes)


def _describe_backends(backends: dict) -> str:
    """Each graph kind's jit level and backend, once when they are all the same."""
    if len(set(backends.values())) == 1:
        return f"every graph at {next(iter(backends.values())).describe()}"
    return "; ".join(f"{kind} graphs at {b.describe()}" for kind, b in backends.items())


def _ranges(epochs: Sequence[int]) -> str:
    """1, 2, 5-10 for (1, 2, 5, 6, 7, 8, 9, 10)."""
    parts, run = [], []
    for e in epochs:
        if run and e != run[-1] + 1:
            parts.append(run)
            run = []
        run.append(e)
    if run:
        parts.append(run)
    return ", ".join(str(r[0]) if len(r) == 1 else f"{r[0]}-{r[-1]}" for r in parts) or "none"


def plan_run(
    cfg: Any,
    rt: Runtime,
    data: DataSummary,
    resume: Any = None,
    environ: dict[str, str] | None = None,
) -> RunPlan:
    """The plan of a training run (module docstring). ``resume``: the checkpoint to resume
    (``engine.training.resume.ResumeSource``) when ``train.resume`` is set; ``environ``: the
    process environment (the compile cache may be switched on there)."""
    env = os.environ if environ is None else environ
    tcfg, rcfg = cfg.train, cfg.runtime
    check_class_count(cfg.model, data)
    loop = Loop.parse(rcfg.get("loop", "model"))
    mode = check_mode(loop, str(rcfg.mode))
    schedule = Schedule.from_config(tcfg, rt.world_size, data.train_images)
    input_size = (int(tcfg.input_size[0]), int(tcfg.input_size[1]))
    ms_range, interval = multiscale_settings(tcfg)
    sizes = tuple(all_sizes(input_size, ms_range)) if ms_range else (input_size,)
    profiling = int(rcfg.profile_steps) > 0
    steps_per_sink, sinks = sink_plan(rt, schedule.steps_per_epoch, loop, (ms_range, interval),
                                      profiling)  # fmt: skip
    buckets = plan_buckets(cfg.data, rt.sink_effective, len(sizes))
    compile_cache = bool(rcfg.compile_cache) or env.get(COMPILE_CACHE_VAR) == "1"
    backends = graph_backends(loop.value, rt.chip_profile, rcfg.jit_level,
                              rank_table=bool(env.get("RANK_TABLE_FILE")))  # fmt: skip
    start = plan_start(cfg, resume, data.class_names, schedule.epochs)
    patience = int(tcfg.patience)
    time_limit = float(tcfg.time_limit_min) if tcfg.time_limit_min else None
    check_single_rank_stops(rt.world_size, patience, time_limit)
    return RunPlan(
        model=str(cfg.model.name),
        loop=loop,
        mode=mode,
        backends=backends,
        schedule=schedule,
        input_size=input_size,
        eval_size=(int(cfg.eval.img_size[0]), int(cfg.eval.img_size[1])),
        sink=rt.sink_effective,
        steps_per_sink=steps_per_sink,
        sinks_per_epoch=sinks,
        multiscale_range=ms_range,
        multiscale_interval=interval,
        sizes=sizes,
        buckets=buckets,
        compile_all_first=compile_cache or (rt.distributed and len(buckets) > 1),
        eval_epochs=evaluation_epochs(
            schedule.epochs, int(tcfg.eval_interval), int(tcfg.no_aug_epochs)
        ),  # fmt: skip
        start=start,
        patience=patience,
        time_limit_min=time_limit,
        stop_at_epoch=int(tcfg.stop_at_epoch) if tcfg.stop_at_epoch else None,
        profile_steps=int(rcfg.profile_steps),
        log_every=max(1, min(int(tcfg.log_interval), steps_per_sink)),
        device_nms=rt.device == "Ascend" and not rt.host_nms,
        ranks=rt.world_size,
        notes=_notes(rt, profiling),
        trackers=trackers(tcfg),
    )


def check_class_count(model_cfg: Any, data: DataSummary) -> int:
    """The dataset's class count, or an error naming both when ``model.num_classes`` is set
    to another one."""
    wanted = model_cfg.get("num_classes")
    if wanted is not None and int(wanted) != len(data.class_names):
        raise PlanError(
            f"model.num_classes={wanted} but the dataset {data.name} has "
            f"{len(data.class_names)} classes: set model.num_classes=null to take the dataset's"
        )
    return len(data.class_names)


def check_mode(loop: Loop, mode: str) -> str:
    """MindSpore's execution mode for ``loop``: ``runtime.mode`` under ``Model.train``;
    PyNative under the jit loop, which refuses ``runtime.mode=pynative`` (every operator on
    its own is ``Model.train``'s debugging mode)."""
    if mode not in ("graph", "pynative"):
        raise PlanError(f"runtime.mode must be one of ['graph', 'pynative'], got {mode!r}")
    if loop is Loop.JIT:
        if mode != "graph":
            raise PlanError(
                "runtime.loop=jit runs PyNative mode with the training step compiled by "
                f"mindspore.jit; runtime.mode={mode} (every operator on its own) goes with "
                "runtime.loop=model only"
            )
        return "pynative"
    return mode


def multiscale_settings(tcfg: Any) -> tuple[int, int]:
    """(train.multiscale_range, train.multiscale_interval); range 0 is off."""
    ms_range = int(tcfg.multiscale_range)
    interval = int(tcfg.get("multiscale_interval", DEFAULT_INTERVAL))
    if ms_range < 0:
        raise PlanError(f"train.multiscale_range must be >= 0 (0 = off), got {ms_range}")
    if interval < 1:
        raise PlanError(f"train.multiscale_interval must be >= 1, got {interval}")
    return ms_range, interval


def sink_plan(
    rt: Runtime,
    steps_per_epoch: int,
    loop: Loop = Loop.MODEL,
    multiscale: tuple[int, int] = (0, DEFAULT_INTERVAL),
    profiling: bool = False,
) -> tuple[int, int]:
    """(steps per sink, sinks per epoch). Without real sinking one 'sink' is one epoch.

    ``profiling``: one step per sink, so that the profiler's step boundaries are steps,
    not whole sinks. With multi-scale training a sink runs one size: it must fit in one size
    window, and the jit loop's data sink (``mindspore.data_sink``) holds one input shape."""
    size = int(rt.sink_size)
    if rt.sink_effective and profiling:
        return 1, steps_per_epoch
    if rt.sink_effective and multiscale[0] > 0:
        if loop is Loop.JIT:
            raise PlanError(
                "train.multiscale_range with runtime.sink under runtime.loop=jit: the data "
                "sink's device queue (mindspore.data_sink) holds one input shape; set "
                "runtime.sink=false or runtime.loop=model"
            )
        try:
            size = sink_steps(multiscale[1], steps_per_epoch, size)
        except ValueError as err:
            raise PlanError(str(err)) from None
        return size, steps_per_epoch // size
    if not rt.sink_effective or size in (-1, 0, steps_per_epoch):
        return steps_per_epoch, 1
    if size < 0 or steps_per_epoch % size:
        raise PlanError(
            f"runtime.sink_size={size} must be -1 or divide the {steps_per_epoch} steps of an epoch"
        )
    return size, steps_per_epoch // size


def plan_buckets(data_cfg: Any, sink: bool, sizes: int) -> tuple[int, ...]:
    """``data.target_buckets`` checked against the run; ``()`` when off. A data sink feeds
    one shape, so sinking and buckets exclude each other."""
    try:
        buckets = target_buckets(data_cfg)
        if len(buckets) == 1:
            return ()
        if sink:
            raise PlanError(
                f"data.target_buckets={list(buckets[:-1])} needs runtime.sink=false: a data "
                "sink feeds the graph one input shape, and each bucket is a shape of its own"
            )
        check_graph_count(sizes, buckets)
    except PlanError:
        raise
    except ValueError as err:
        raise PlanError(str(err)) from None
    return buckets


def evaluation_epochs(epochs: int, interval: int, no_aug_epochs: int) -> tuple[int, ...]:
    """The epochs (1-based) that end with an evaluation: every ``train.eval_interval``, every
    epoch without mosaic (as YOLOX), and the last."""
    every = max(int(interval), 1)
    first_no_aug = first_no_aug_epoch(epochs, no_aug_epochs) + 1
    return tuple(e for e in range(1, epochs + 1)
                 if e % every == 0 or e >= first_no_aug or e == epochs)  # fmt: skip


def plan_start(cfg: Any, resume: Any, class_names: Sequence[str], epochs: int) -> StartPlan:
    """Where the weights start: the resumed checkpoint (finished when it trained every
    epoch), else ``train.pretrained`` (null: from scratch). A checkpoint of another model
    (architecture, classes, input size), or one that trained more epochs than
    ``train.epochs``, is refused naming both values (``engine.training.resume``)."""
    if resume is not None:
        from msdet.engine.training.resume import check_epochs_left, check_resume_fits

        check_resume_fits(resume, cfg, class_names)
        check_epochs_left(resume, epochs)
        trained = resumed_epoch(resume)
        kind = StartKind.FINISHED if trained >= epochs else StartKind.RESUME
        return StartPlan(kind, resume=resume.path, epoch=trained)
    value = cfg.train.pretrained
    if value is None or str(value) == "":
        return StartPlan(StartKind.SCRATCH)
    optional = bool(cfg.train.get("weights_optional", False))
    return StartPlan(StartKind.PRETRAINED, pretrained=str(value), optional=optional)


# The experiment trackers (train.track) and how to install each: both are optional. SwanLab
# from 0.6.5 on requires protobuf<7; MindSpore 2.10's generated code refuses a protobuf
# older than 7.34 (measured: a VersionError when MindSpore loads), so its last release
# without that bound is the one that installs beside MindSpore.
TRACKERS = {
    "mlflow": "pip install mlflow",
    "swanlab": "pip install 'swanlab<0.6.5' (later releases need protobuf<7, which MindSpore "
    "2.10 cannot load)",
}


def trackers(tcfg: Any, installed: Callable[[str], bool] | None = None) -> tuple[str, ...]:
    """The experiment trackers ``train.track`` names, in the order given (the config
    checked them: each one of :data:`TRACKERS`, once); () when off. A tracker whose
    package is not installed (``installed(name)``; default: importable here) is refused
    with the command that installs it."""
    names = tcfg.get("track") or ()
    if isinstance(names, str):
        names = [n for n in names.split(",") if n.strip()]
    names = tuple(str(n) for n in names)
    unknown = [n for n in names if n not in TRACKERS]
    if unknown:
        raise PlanError(f"train.track: {', '.join(unknown)} is not a tracker msdet has; it "
                        f"has {', '.join(TRACKERS)}")  # fmt: skip
    have = installed or (lambda name: importlib.util.find_spec(name) is not None)
    for name in names:
        if not have(name):
            raise PlanError(
                f"train.track={','.join(names)}: {name} is not installed here: "
                f"{TRACKERS[name]}, or pip install 'msdet[tracking]'; or leave {name} out of "
                "train.track"
            )
    return names


def resumed_epoch(resume: Any) -> int:
    """The epochs the checkpoint ``resume`` trained (0 when it holds no training state)."""
    from msdet.engine.training.checkpoints import META_EPOCH

    value = resume.params.get(META_EPOCH)
    return int(value.asnumpy()) if value is not None else 0


def check_single_rank_stops(ranks: int, patience: int, time_limit: float | None) -> None:
    """Early stopping and the time limit are one process's decisions: with several ranks
    they could stop at different epochs and leave the others waiting in a collective."""
    if ranks <= 1:
        return
    if patience > 0:
        raise PlanError(
            f"train.patience={patience} with {ranks} ranks: ranks could stop at different "
            "epochs and leave the others waiting; set train.patience=0 (and train.epochs to "
            "the length you want)"
        )
    if time_limit:
        raise PlanError(
            f"train.time_limit_min={time_limit:g} with {ranks} ranks: ranks could stop at "
            "different epochs and leave the others waiting; set train.time_limit_min=null "
            "and choose train.epochs, or train.stop_at_epoch"
        )


def _notes(rt: Runtime, profiling: bool) -> tuple[str, ...]:
    notes = []
    if rt.sink and not rt.sink_effective:
        notes.append(
            f"runtime.sink: MindSpore cannot sink data on {rt.device} and feeds each step "
            "from the host instead (same results; LossMonitor/TimeMonitor count real steps)"
        )
    if rt.sink_effective and profiling:
        notes.append("runtime.profile_steps: one step per sink while profiling")
    return tuple(notes)
