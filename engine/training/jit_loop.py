"""msdet's own training loop (``runtime.loop=jit``): PyNative mode, the training step compiled
with ``mindspore.jit``, the same callbacks as ``Model.train``.

MindSpore's release notes retire the static-graph distributed features (2.11 is the last
release with them) and recommend PyNative mode with ``mindspore.jit`` instead; this loop is
that path for the same recipe. The step is the one :class:`~msdet.engine.training.step.
TrainStep` the ``Model.train`` path runs (forward, SimOTA loss, backward, loss scaling,
gradient mean over ranks, SGD, EMA), compiled as one graph by ``mindspore.jit``: on CPU it
runs the same kernels in the same order, so both loops give the same losses bit for bit,
and the same checkpoints (the Cell's Parameters). With several ranks the step all-reduces
the gradients over the world group of MindSpore's communication API itself
(:class:`~msdet.engine.training.step.GradientMean`); the auto-parallel context that
``Model.train`` compiles under is never set.

The callbacks are msdet's and MindSpore's own (``LossMonitor``, ``TimeMonitor``): the loop
calls them at the points ``Model.train`` does (``mindspore/train/model.py``,
``_train_process``) with a :class:`mindspore.train.RunContext` over the fields ``Model``
fills (:class:`CallbackParams`), so the console lines, results.csv and checkpoints do not
depend on the loop.

Data sinking: ``mindspore.data_sink`` runs a function over a device-side queue on Ascend
and GPU only; on CPU there is no sink in either loop (``Model.train`` falls back to feeding
each step from the host, and so does this loop). This loop feeds every step from the host
on every device: ``runtime.sink`` has no effect here (:func:`check_jit_sink` says so).
"""

from __future__ import annotations

import logging
import time
from contextlib import ExitStack
from typing import Any

import mindspore as ms
from mindspore.train import RunContext

from msdet.engine.training.graphs import input_shapes

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


def compiled_step(train_step: ms.nn.Cell, jit_level: str = "O0"):
    """``train_step``'s ``construct`` compiled by ``mindspore.jit`` at ``jit_level``
    (``Runtime.jit_level``): one graph per input shapes and Cell phase (``engine.training.multiscale``
    gives each training size its own phase), compiled on the first call that needs it."""
    return ms.jit(train_step, jit_level=jit_level)


def jit_compiled_cell(cell: ms.nn.Cell, jit_level: str = "O0") -> ms.nn.Cell:
    """``cell`` with its ``construct`` compiled by ``mindspore.jit`` (the graph
    :func:`compiled_step` gives), for code that calls the Cell itself in PyNative mode
    (evaluation, the self-test); its Parameters and attributes stay where they were."""
    cell.construct = ms.jit(cell.construct, jit_level=jit_level)
    return cell


def check_jit_sink(rt: Any) -> None:
    """Log what ``runtime.sink`` does under the jit loop: every step fed from the host."""
    if rt.sink:
        log.info(
            "runtime.loop=jit feeds every step from the host (runtime.sink applies to "
            "runtime.loop=model; %s)",
            "MindSpore cannot sink data on CPU" if rt.device == "CPU" else "no data sink here",
        )


class JitTrainLoop:
    """Runs ``train_step`` (a :class:`~msdet.engine.training.step.TrainStep`) compiled by
    ``mindspore.jit`` over ``dataset`` for epochs ``initial_epoch + 1 .. epochs``, calling
    ``callbacks`` as ``Model.train(epochs, dataset, callbacks, dataset_sink_mode=False,
    initial_epoch=initial_epoch)`` does. ``world_size``: ranks, for the callbacks'
    ``device_number``; ``jit_level``: ``Runtime.jit_level``."""

    def __init__(self, train_step: ms.nn.Cell, world_size: int = 1, jit_level: str = "O0"):
        self.train_step = train_step
        self.step = compiled_step(train_step, jit_level)
        self.world_size = int(world_size)
        self.graphs: dict[tuple, float] = {}  # (phase, input shapes) -> first call's seconds

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
            dataset_sink_mode=False,
        )
        run_context = RunContext(params)
        self.train_step.set_train(True)
        batches = dataset.create_tuple_iterator(num_epochs=epochs)
        with ExitStack() as stack:
            entered = [stack.enter_context(cb) for cb in callbacks]
            _call(entered, "on_train_begin", run_context)
            for index in range(initial_epoch, epochs):
                params.cur_epoch_num = index + 1
                _call(entered, "on_train_epoch_begin", run_context)
                for element in batches:
                    params.cur_step_num += 1
                    params.train_dataset_element = tuple(element)
                    _call(entered, "on_train_step_begin", run_context)
                    params.net_outputs = self._run(params.train_dataset_element)
                    _call(entered, "on_train_step_end", run_context)
                    if run_context.get_stop_requested():
                        break
                _call(entered, "on_train_epoch_end", run_context)
                if run_context.get_stop_requested():
                    break
            _call(entered, "on_train_end", run_context)

    def _run(self, inputs: tuple):
        """One step; the first call of each graph (a new size or input shape) compiles it,
        and its time is logged as the compile time (with that first step in it)."""
        key = (self.train_step.phase, input_shapes(inputs))
        if key in self.graphs:
            return self.step(*inputs)
        started = time.perf_counter()
        outputs = self.step(*inputs)
        outputs[0].asnumpy()  # the step has run: the time is compile + one step
        self.graphs[key] = seconds = time.perf_counter() - started
        log.info(
            "training graph compiled by mindspore.jit in %.1f s, its first step included "
            "(%d graph%s)",
            seconds,
            len(self.graphs),
            "" if len(self.graphs) == 1 else "s",
        )
        return outputs


def _call(callbacks: list, hook: str, run_context: RunContext) -> None:
    for cb in callbacks:
        getattr(cb, hook)(run_context)
