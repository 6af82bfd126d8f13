"""msdet's own training loop (``runtime.loop=jit``): PyNative mode, the training step compiled
with ``mindspore.jit``, the same callbacks as ``Model.train`` (:class:`JitLoop`, the
``engine.training.loops`` interface).

MindSpore's release notes retire the static-graph distributed features (2.11 is the last
release with them) and recommend PyNative mode with ``mindspore.jit`` instead; this loop is
that path for the same recipe. The step is the one :class:`~msdet.engine.training.step.
TrainStep` the ``Model.train`` path runs (forward, SimOTA loss, backward, loss scaling,
gradient mean over ranks, SGD, EMA), compiled as one graph by ``mindspore.jit``: on CPU it
runs the same kernels in the same order, so both loops give the same losses bit for bit,
and the same checkpoints (the Cell's Parameters). With several ranks the step all-reduces
the gradients over the world group of MindSpore's communication API itself
(:class:`GradientMean`, in buckets of flat buffers: one AllReduce for YOLOX-nano's ~330
gradients); the auto-parallel context that ``Model.train`` compiles under is never set.

Every graph this loop compiles is given its backend (``RunPlan.backends``): ``ms_backend``,
kernel by kernel, on every chip. ``mindspore.jit`` left to itself sends the 910A's graphs to
GE whatever the jit level (``engine.runtime.ascend.graph_backends``).

The callbacks are msdet's and MindSpore's own (``LossMonitor``, ``TimeMonitor``): the loop
calls them at the points ``Model.train`` does (``mindspore/train/model.py``,
``_train_process``) with a :class:`mindspore.train.RunContext` over the fields ``Model``
fills (:class:`CallbackParams`), so the console lines, results.csv and checkpoints do not
depend on the loop.

Target buckets on several ranks (``data.target_buckets``): each rank's batch would pick its
own bucket, so one rank would compile a bucket's graph on first use while the others wait
for it in the gradient all-reduce (``Model.train`` compiles every bucket first instead,
``engine.training.callbacks.compile``; a ``mindspore.jit`` graph cannot be compiled without
running it). Here the ranks agree on the bucket at every step (:class:`BucketAgreement`):
all run, and first compile, the same graph at the same step.

Data sinking (``runtime.sink`` on Ascend): the step runs over a device-side queue of the
dataset through ``mindspore.data_sink`` (Ascend and GPU only; on CPU neither loop sinks and
every step is fed from the host). As with ``Model.train`` in sink mode, the trainer counts
one loop "epoch" per sink of ``sink_size`` steps and the callbacks see one step per sink
(its last step's outputs, ``cur_step_num`` advanced by ``sink_size``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from typing import Any

import mindspore as ms
import numpy as np
from mindspore import nn, ops
from mindspore.train import RunContext

from msdet.engine.runtime import mindspore_compat
from msdet.engine.runtime.ascend import MS_BACKEND, Backend
from msdet.engine.runtime.distributed import world_group
from msdet.engine.runtime.process import Runtime
from msdet.engine.training.graphs import input_shapes, padded_to_rows, target_rows
from msdet.engine.training.loops import TrainLoop
from msdet.engine.training.plan import RunPlan

# What a graph of this loop compiles with when nothing else is said (tests, the self-test).
KERNEL_BY_KERNEL = Backend("O0", MS_BACKEND, 'mindspore.jit(backend="ms_backend")')
# Gradients per all-reduce: buckets of up to 25 MB of float32, PyTorch DDP's default.
BUCKET_ELEMENTS = 25 * 2**20 // 4

log = logging.getLogger("train")


class CallbackParams(dict):
    """What ``Model.train`` hands its callbacks through ``RunContext.original_args()``: a
    dict whose keys read as attributes (MindSpore's callbacks use both forms)."""

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError as err:
            raise AttributeError(name) from err

    def __setattr__(self, name: str, value: Any) -> None:
        self[name] = value


def compiled_step(train_step: ms.nn.Cell, backend: Backend = KERNEL_BY_KERNEL):
    """``train_step``'s ``construct`` compiled by ``mindspore.jit`` with ``backend`` (its jit
    level and backend, both given: ``RunPlan.backends["train"]``): one graph per input shapes
    and Cell phase (``engine.training.multiscale`` gives each training size its own phase),
    compiled on the first call that needs it."""
    return ms.jit(train_step, jit_level=backend.jit_level, backend=backend.backend)


def jit_compiled_cell(cell: ms.nn.Cell, backend: Backend = KERNEL_BY_KERNEL) -> ms.nn.Cell:
    """``cell`` with its ``construct`` compiled by ``mindspore.jit`` (the graph
    :func:`compiled_step` gives), for code that calls the Cell itself in PyNative mode
    (evaluation, the self-test); its Parameters and attributes stay where they were."""
    cell.construct = ms.jit(cell.construct, jit_level=backend.jit_level, backend=backend.backend)
    return cell


def gradient_buckets(sizes: Sequence[int], limit: int = BUCKET_ELEMENTS) -> tuple:
    """Consecutive ``(start, stop)`` ranges of the gradients (their element counts
    ``sizes``, in order), each holding at most ``limit`` elements (a larger gradient alone)."""
    buckets, start, held = [], 0, 0
    for i, size in enumerate(sizes):
        if i > start and held + int(size) > limit:
            buckets.append((start, i))
            start, held = i, 0
        held += int(size)
    if len(sizes) > start:
        buckets.append((start, len(sizes)))
    return tuple(buckets)


class GradientMean(nn.Cell):
    """The gradients' mean over the ranks, the arithmetic of MindSpore's
    ``nn.DistributedGradReducer`` (each element summed over ``group`` in float32, times 1 /
    ranks, cast back), without its reading of the static-graph auto-parallel context that this
    loop does not set. The gradients (of ``shapes``, in order) travel in flat float32 buffers
    of :func:`gradient_buckets`: one AllReduce per bucket, not one per gradient."""

    def __init__(self, world_size: int, group: str, shapes: Sequence[Sequence[int]],
                 limit: int = BUCKET_ELEMENTS):  # fmt: skip
        super().__init__()
        self.allreduce = ops.AllReduce(ops.ReduceOp.SUM, group)
        self.factor = ms.Tensor(1.0 / int(world_size), ms.float32)
        self.shapes = tuple(tuple(int(d) for d in s) for s in shapes)
        self.sizes = tuple(int(np.prod(s)) for s in self.shapes)
        self.buckets = gradient_buckets(self.sizes, limit)

    def construct(self, grads):
        out = ()
        for start, stop in self.buckets:
            parts = []
            for i in range(start, stop):
                parts.append(grads[i].astype(ms.float32).reshape(-1))
            total = self.allreduce(ops.concat(parts)) * self.factor
            offset = 0
            for i in range(start, stop):
                piece = total[offset : offset + self.sizes[i]].reshape(self.shapes[i])
                out = out + (piece.astype(grads[i].dtype),)
                offset = offset + self.sizes[i]
        return out


class BucketAgreement:
    """Each step, every rank pads its batch to the largest target bucket any rank's batch
    needs (``buckets``: ``data.target_buckets`` as the trainer resolves them, the last the
    pipeline's full row count). ``reduce_sum`` sums a float32 array over the ranks
    (:func:`world_sum`): each rank adds a one-hot count of its own bucket, as MindSpore's
    CPU all-reduce only sums."""

    def __init__(self, buckets: Sequence[int], reduce_sum: Callable[[np.ndarray], np.ndarray]):
        self.buckets = tuple(int(b) for b in buckets)
        self.reduce_sum = reduce_sum

    def __call__(self, inputs: tuple) -> tuple:
        """``inputs`` (images, targets, mask), padded to the bucket the ranks agree on."""
        rows = target_rows(inputs)
        if rows not in self.buckets:
            raise ValueError(f"a batch of {rows} target rows is in no bucket of {self.buckets}")
        counts = np.zeros(len(self.buckets), np.float32)
        counts[self.buckets.index(rows)] = 1.0
        needed = np.flatnonzero(self.reduce_sum(counts))
        agreed = self.buckets[int(needed[-1])]
        return inputs if agreed == rows else padded_to_rows(inputs, agreed)


def world_sum(group: str) -> Callable[[np.ndarray], np.ndarray]:
    """A float32 array summed over the ranks of ``group`` (one all-reduce, in PyNative)."""
    allreduce = ops.AllReduce(ops.ReduceOp.SUM, group)
    return lambda values: allreduce(ms.Tensor(values)).asnumpy()


def device_sink(train_step: ms.nn.Cell, dataset, sink_size: int, backend: Backend) -> Callable:
    """``train_step`` over a device-side queue of ``dataset`` (``mindspore.data_sink``, the
    step compiled with ``backend``'s jit level and backend): each call runs ``sink_size`` steps
    and returns the last one's outputs. Ascend and GPU only (MindSpore refuses CPU)."""
    config = ms.JitConfig(jit_level=backend.jit_level, backend=backend.backend)
    return ms.data_sink(train_step, dataset, sink_size=sink_size, jit_config=config)


class JitTrainLoop:
    """Runs ``train_step`` (a :class:`~msdet.engine.training.step.TrainStep`) compiled by
    ``mindspore.jit`` over ``dataset`` for epochs ``initial_epoch + 1 .. epochs``, calling
    ``callbacks`` as ``Model.train(epochs, dataset, callbacks, dataset_sink_mode=False,
    initial_epoch=initial_epoch)`` does. ``world_size``: ranks, for the callbacks'
    ``device_number``; ``backend``: the step's graph (``RunPlan.backends``); ``agreement``: the ranks'
    :class:`BucketAgreement` (several ranks with target buckets), else None;
    ``sink_size`` > 0: data sinking, each of the ``epochs`` one sink of that many steps run
    by ``sink`` (:func:`device_sink`'s signature), as ``Model.train(...,
    dataset_sink_mode=True, sink_size=sink_size)`` counts them."""

    def __init__(
        self,
        train_step: ms.nn.Cell,
        world_size: int = 1,
        backend: Backend = KERNEL_BY_KERNEL,
        agreement: BucketAgreement | None = None,
        sink_size: int = 0,
        sink: Callable = device_sink,
    ):
        self.train_step = train_step
        self.step = compiled_step(train_step, backend)
        self.world_size = int(world_size)
        self.backend = backend
        self.agreement = agreement
        self.sink_size = int(sink_size)
        self.sink = sink
        self.graphs: dict[tuple, float] = {}  # (phase, input shapes) -> first call's seconds
        self.steps_run = 0  # this process's steps fed from the host

    def train(self, epochs: int, dataset, callbacks: list, initial_epoch: int = 0) -> None:
        """The training run (see the class docstring); returns when the epochs are done or
        a callback requested a stop."""
        params = CallbackParams(
            cur_step_num=0,
            train_network=self.train_step,
            epoch_num=epochs - initial_epoch,
            batch_num=dataset.get_dataset_size(),
            mode="train",
            loss_fn=None,
            optimizer=None,
            parallel_mode="data_parallel" if self.world_size > 1 else "stand_alone",
            device_number=self.world_size,
            train_dataset=dataset,
            list_callback=list(callbacks),
            train_dataset_element=None,
            network=self.train_step,
            last_save_ckpt_step=None,
            latest_ckpt_file=None,
            loss_scale_mananger=None,  # MindSpore's spelling
            initial_step=0,
            dataset_sink_mode=self.sink_size > 0,
        )
        if self.sink_size:
            params.sink_size = self.sink_size
        run_context = RunContext(params)
        self.train_step.set_train(True)
        steps = (
            self._sunk(self.sink(self.train_step, dataset, self.sink_size, self.backend))
            if self.sink_size
            else self._fed(dataset.create_tuple_iterator(num_epochs=epochs))
        )
        with ExitStack() as stack:
            entered = [stack.enter_context(cb) for cb in callbacks]
            _call(entered, "on_train_begin", run_context)
            for index in range(initial_epoch, epochs):
                params.cur_epoch_num = index + 1
                _call(entered, "on_train_epoch_begin", run_context)
                for count, element, run in steps():
                    params.cur_step_num += count
                    params.train_dataset_element = element
                    _call(entered, "on_train_step_begin", run_context)
                    params.net_outputs = run()
                    _call(entered, "on_train_step_end", run_context)
                    if run_context.get_stop_requested():
                        break
                _call(entered, "on_train_epoch_end", run_context)
                if run_context.get_stop_requested():
                    break
            _call(entered, "on_train_end", run_context)

    def _fed(self, batches) -> Callable:
        """An epoch's steps fed from the host: (1, batch, run) per batch."""

        def epoch():
            for element in batches:
                element = tuple(element)
                if self.agreement is not None:
                    element = self.agreement(element)
                yield 1, element, lambda element=element: self._run(element)

        return epoch

    def _sunk(self, sunk: Callable) -> Callable:
        """A loop epoch under data sinking: one sink, (sink_size, (), run)."""

        def epoch():
            yield self.sink_size, (), lambda: self._run_sink(sunk)

        return epoch

    def _run(self, inputs: tuple):
        """One step; the first call of each graph (a new size or input shape) compiles it,
        and its time is logged as the compile time (with that first step in it)."""
        self.steps_run += 1
        key = (self.train_step.phase, input_shapes(inputs))
        if key in self.graphs:
            return self.step(*inputs)
        started = time.perf_counter()
        outputs = self.step(*inputs)
        outputs[0].asnumpy()  # the step has run: the time is compile + one step
        self.graphs[key] = seconds = time.perf_counter() - started
        rows = target_rows(inputs)
        log.info(
            "training graph%s compiled by mindspore.jit at step %d in %.1f s, that step "
            "included (%d graph%s)",
            "" if rows is None else f" for {rows} target rows",
            self.steps_run,
            seconds,
            len(self.graphs),
            "" if len(self.graphs) == 1 else "s",
        )
        return outputs

    def _run_sink(self, sunk: Callable):
        """One sink of steps; the first compiles the graph (logged with that sink's time)."""
        if self.graphs:
            return sunk()
        started = time.perf_counter()
        outputs = sunk()
        outputs[0].asnumpy()
        self.graphs[("sink", self.train_step.phase)] = seconds = time.perf_counter() - started
        log.info(
            "training graph compiled by mindspore.jit over the data sink in %.1f s, its "
            "first sink of %d steps included",
            seconds,
            self.sink_size,
        )
        return outputs


def _call(callbacks: list, hook: str, run_context: RunContext) -> None:
    for cb in callbacks:
        getattr(cb, hook)(run_context)


class JitLoop(TrainLoop):
    """msdet's loop (``engine.training.loops``): PyNative mode from its construction (build it
    before the network), every graph given its backend (``RunPlan.backends``), the gradients
    averaged in buckets (:class:`GradientMean`), the ranks agreeing on each step's target
    bucket (:class:`BucketAgreement`), and data sinking through ``mindspore.data_sink``."""

    def __init__(self, plan: RunPlan, rt: Runtime):
        super().__init__(plan, rt)
        mindspore_compat.require("jit")
        ms.set_context(mode=ms.PYNATIVE_MODE)

    def describe(self) -> str:
        return "msdet's loop, PyNative mode, the step compiled by mindspore.jit"

    def gradient_reducer(self, parameters: Any) -> nn.Cell | None:
        if not self.rt.distributed:
            return None
        reducer = GradientMean(self.rt.world_size, world_group(), [p.shape for p in parameters])
        log.info(
            "gradients averaged over %d ranks in %d all-reduce%s (%d gradients)",
            self.rt.world_size,
            len(reducer.buckets),
            "" if len(reducer.buckets) == 1 else "s",
            len(reducer.sizes),
        )
        return reducer

    def compile_eval(self, cell: nn.Cell) -> nn.Cell:
        # PyNative mode would run evaluation operator by operator: compile it as the step is
        return jit_compiled_cell(cell, self.plan.backends["eval"])

    def run(self, train_step: nn.Cell, dataset: Any, callbacks: list, initial_epoch: int) -> None:
        plan = self.plan
        sink_backend = plan.backends["sink"]
        JitTrainLoop(
            train_step,
            self.rt.world_size,
            plan.backends["train"],
            self._bucket_agreement(),
            sink_size=plan.sink_calls,
            sink=lambda step, data, size, _: device_sink(step, data, size, sink_backend),
        ).train(plan.loop_epochs, dataset, callbacks, initial_epoch=initial_epoch)

    def _bucket_agreement(self) -> BucketAgreement | None:
        """The ranks' agreement on each step's target bucket (several ranks with buckets)."""
        if self.rt.world_size <= 1 or len(self.plan.buckets) <= 1:
            return None
        log.info(
            "target buckets on %d ranks: each step padded to the largest bucket any rank needs "
            "(every rank compiles a bucket's graph at the same step)",
            self.rt.world_size,
        )
        return BucketAgreement(self.plan.buckets, world_sum(world_group()))
