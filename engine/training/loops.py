"""The two training loops behind one interface, chosen once from the run plan
(``engine.training.plan``): :class:`ModelLoop` runs ``mindspore.train.Model.train``;
``engine.training.jit_loop.JitLoop`` runs msdet's own loop in PyNative mode around a step
compiled by ``mindspore.jit``.

A loop owns what differs between the two: the execution mode and the jit level and backend
of each graph it compiles (``RunPlan.backends``, from ``engine.runtime.ascend.graph_backends``),
the data-parallel set-up and the gradient reducer, how the evaluation's network is compiled,
and how steps are fed (from the host or over a data sink). Build the loop before the network:
it sets the context the network is built under.
"""

from __future__ import annotations

import logging
from typing import Any

import mindspore as ms
from mindspore import nn
from mindspore.train import Model

from msdet.engine.runtime.distributed import set_data_parallel_context
from msdet.engine.runtime.process import Runtime
from msdet.engine.training.plan import RunPlan

log = logging.getLogger("train")


class TrainLoop:
    """What the trainer asks of a loop (see the module docstring)."""

    def __init__(self, plan: RunPlan, rt: Runtime):
        self.plan = plan
        self.rt = rt

    def describe(self) -> str:
        """The loop, its mode and each graph's backend, for the run's header."""
        raise NotImplementedError

    def gradient_reducer(self, parameters: Any) -> nn.Cell | None:
        """The Cell that averages the gradients over the ranks (None with one rank)."""
        raise NotImplementedError

    def compile_eval(self, cell: nn.Cell) -> nn.Cell:
        """``cell`` (the evaluation network, its NMS) as this loop compiles it."""
        raise NotImplementedError

    def run(self, train_step: nn.Cell, dataset: Any, callbacks: list, initial_epoch: int) -> None:
        """Train ``plan.loop_epochs`` loop epochs (one per sink) from ``initial_epoch``."""
        raise NotImplementedError


class ModelLoop(TrainLoop):
    """``Model.train`` in ``runtime.mode``: graph mode compiles the step whole (data sinking
    where the device has it), PyNative runs it operator by operator (debugging). Every graph
    compiles at the global jit level ``engine.runtime.process.setup_runtime`` set (the same
    backends the plan names); with several ranks the step compiles under MindSpore's
    static-graph data-parallel context, which this loop sets, and averages its gradients with
    ``nn.DistributedGradReducer``."""

    def __init__(self, plan: RunPlan, rt: Runtime):
        super().__init__(plan, rt)
        mode = ms.GRAPH_MODE if plan.mode == "graph" else ms.PYNATIVE_MODE
        ms.set_context(mode=mode)
        if rt.distributed:
            set_data_parallel_context(ms, rt.world_size)

    def describe(self) -> str:
        return f"mindspore.train.Model.train in {self.plan.mode} mode"

    def gradient_reducer(self, parameters: Any) -> nn.Cell | None:
        if not self.rt.distributed:
            return None
        return nn.DistributedGradReducer(parameters, mean=True, degree=self.rt.world_size)

    def compile_eval(self, cell: nn.Cell) -> nn.Cell:
        return cell  # graph mode compiles it on its first call

    def run(self, train_step: nn.Cell, dataset: Any, callbacks: list, initial_epoch: int) -> None:
        Model(train_step).train(
            self.plan.loop_epochs,
            dataset,
            callbacks=callbacks,
            dataset_sink_mode=self.rt.sink,
            sink_size=self.plan.calls_per_sink,  # MindSpore counts calls
            initial_epoch=initial_epoch,
        )
