"""ops.batchnorm_silu: the fused BatchNorm + SiLU against MindSpore's layers."""

from __future__ import annotations

import os
import platform
import shutil
import subprocess

import mindspore as ms
import numpy as np
import pytest
from mindspore import nn, ops

from msdet.models.layers import BN_EPS, BN_MOMENTUM, BaseConv
from msdet.ops import cpu_kernels
from msdet.ops.batchnorm_silu import BatchNormSiLU
from msdet.ops.cpu_kernels import set_kernel_threads
from tests.support.modes import execution_mode


class Native(nn.Cell):
    def __init__(self, channels: int):
        super().__init__()
        self.bn = nn.BatchNorm2d(channels, eps=BN_EPS, momentum=BN_MOMENTUM)
        self.act = nn.SiLU()

    def construct(self, x):
        return self.act(self.bn(x))


class Fused(nn.Cell):
    """The same parameters as :class:`Native`, through the kernel."""

    def __init__(self, channels: int, library: str):
        super().__init__()
        self.bn = nn.BatchNorm2d(channels, eps=BN_EPS, momentum=BN_MOMENTUM)
        eager = ms.get_context("mode") == ms.PYNATIVE_MODE  # op by op in PyNative mode
        self.fused = BatchNormSiLU(BN_EPS, BN_MOMENTUM, library, eager)

    def construct(self, x):
        bn = self.bn
        return self.fused(x, bn.gamma, bn.beta, bn.moving_mean, bn.moving_variance)


class Grads(nn.Cell):
    """Output, d/dx, d/dgamma, d/dbeta of sum(net(x) * dy) in one graph."""

    def __init__(self, net: nn.Cell, dy: ms.Tensor):
        super().__init__()
        self.net = net
        self.dy = dy
        self.params = ms.ParameterTuple(net.trainable_params())
        self.grad = ops.GradOperation(get_all=True, get_by_list=True)

    def loss(self, x):
        return (self.net(x) * self.dy).sum()

    def construct(self, x):
        dx, (dgamma, dbeta) = self.grad(self.loss, self.params)(x)
        return self.net(x), dx[0], dgamma, dbeta


def _inputs(shape: tuple, seed: int, gamma_scale: float = 1.0) -> tuple[np.ndarray, ...]:
    """x, gamma, beta, dy."""
    n, c, h, w = shape
    rng = np.random.default_rng(seed)
    # channels with different scales and offsets, as a convolution's output has
    x = rng.standard_normal(shape).astype(np.float32) * rng.uniform(0.2, 5, (1, c, 1, 1))
    x = (x + rng.uniform(-3, 3, (1, c, 1, 1))).astype(np.float32)
    gamma = (rng.uniform(0.5, 1.5, c) * gamma_scale).astype(np.float32)
    beta = rng.uniform(-1, 1, c).astype(np.float32)
    dy = rng.standard_normal(shape).astype(np.float32)
    return x, gamma, beta, dy


def _run_both(
    library: str, shape: tuple, seed: int = 0, gamma_scale: float = 1.0
) -> tuple[list, list, list, list]:
    c = shape[1]
    x, gamma, beta, dy = _inputs(shape, seed, gamma_scale)
    x, dy = ms.Tensor(x), ms.Tensor(dy)
    results, stats = [], []
    for net in (Native(c), Fused(c, library)):
        net.bn.gamma.set_data(ms.Tensor(gamma))
        net.bn.beta.set_data(ms.Tensor(beta))
        net.set_train(True)
        results.append([t.asnumpy() for t in Grads(net, dy)(x)])
        stats.append([net.bn.moving_mean.asnumpy(), net.bn.moving_variance.asnumpy()])
    return results[0], results[1], stats[0], stats[1]


def _close(got: np.ndarray, ref: np.ndarray, rel: float, what: str) -> None:
    assert got.shape == ref.shape, what
    assert np.abs(got - ref).max() <= rel * max(1.0, np.abs(ref).max()), what


@pytest.mark.slow
@pytest.mark.parametrize(
    "shape",
    [
        (2, 3, 9, 7),
        (3, 5, 1, 1),  # one pixel per plane: statistics over the batch only
        (2, 16, 40, 40),  # a YOLOX-nano size: long sums
    ],
)
def test_matches_batchnorm_and_silu_in_graph_mode(library, graph_mode, shape):
    ref, got, ref_stats, got_stats = _run_both(library, shape)
    for name, r, g in zip(("output", "grad input", "grad gamma", "grad beta"), ref, got):
        # float32 rounding (MindSpore's CPU Sigmoid is itself ~2e-6 from float64): measured
        # <= 1.2e-6 under every CPU variant of docs/porting.md, 17x below
        _close(g, r, 2e-5, name)
    # the running statistics move as MindSpore's BatchNorm moves them (unbiased variance):
    # measured 4.8-5.2e-7 under every variant, the kernel's batch weight 1 - 0.97f in float32
    # (MindSpore's: 1.1e-7 from float64); 5e-6 is 10x that, 39x below a biased variance
    for name, r, g in zip(("moving mean", "moving variance"), ref_stats, got_stats):
        _close(g, r, 5e-6, name)


def test_matches_in_pynative_mode(library):
    with execution_mode(ms.PYNATIVE_MODE):
        ref, got, ref_stats, got_stats = _run_both(library, (2, 4, 6, 5), seed=1)
    for r, g in zip(ref + ref_stats, got + got_stats):
        _close(g, r, 2e-5, "pynative")  # measured <= 9.7e-7 under every CPU variant


@pytest.mark.slow
def test_saturated_activations_match(library, graph_mode):
    # gamma ~ 60: pre-activations beyond both ends of the kernel's exp clamp ([-87, 89],
    # kernels/batchnorm_silu.cc), where silu(z) is z or 0 to float precision
    shape, seed, gamma_scale = (2, 4, 10, 10), 6, 60.0
    x, gamma, beta, _ = _inputs(shape, seed, gamma_scale)
    mean, var = x.mean((0, 2, 3), keepdims=True), x.var((0, 2, 3), keepdims=True)
    z = gamma[:, None, None] * (x - mean) / np.sqrt(var + BN_EPS) + beta[:, None, None]
    assert (z < -89).sum() > 20 and (z > 89).sum() > 20, "the inputs do not reach the clamp"
    ref, got, _, _ = _run_both(library, shape, seed, gamma_scale)
    for r, g, what in zip(ref, got, ("y", "dx", "dgamma", "dbeta")):
        _close(g, r, 2e-5, what)


@pytest.mark.slow
def test_ordinary_inputs_raise_no_subnormal(tmp_path):
    """No subnormal operand or result in any of the three kernels: Intel CPUs handle each in
    microcode, and one subnormal constant multiplied into every vector once made the forward
    and evaluation kernels 6x slower on an Intel Xeon (the FP flags say it on any x86)."""
    compiler = os.environ.get(cpu_kernels.COMPILER_VAR) or "g++"
    if platform.machine().lower() not in ("x86_64", "amd64") or not shutil.which(compiler):
        pytest.skip("needs an x86 CPU (its MXCSR flags) and a C++ compiler")
    flags = [f for f in cpu_kernels.compiler_flags() if f not in ("-shared", "-fPIC")]
    harness = os.path.join(os.path.dirname(__file__), "batchnorm_silu_fp_flags.cc")
    binary = str(tmp_path / "fp_flags")
    subprocess.run(
        [compiler, *flags, "-I", cpu_kernels.KERNEL_DIR, harness, "-o", binary],
        check=True,
        capture_output=True,
        timeout=300,
    )
    lines = subprocess.run([binary], check=True, capture_output=True, text=True).stdout
    raised = {k: (int(de), int(uf)) for k, de, uf in (ln.split() for ln in lines.splitlines())}
    assert sorted(raised) == ["backward", "evaluation", "forward"], lines
    assert raised == {k: (0, 0) for k in raised}, f"(denormal operand, underflow): {raised}"


@pytest.mark.slow
def test_thread_count_does_not_change_results(library, graph_mode):
    runs = []
    try:
        for threads in (1, 2):
            set_kernel_threads(library, threads)
            runs.append(_run_both(library, (2, 6, 12, 10), seed=2)[1])
    finally:
        set_kernel_threads(library, 1)
    for one, two in zip(*runs):
        np.testing.assert_array_equal(one, two)  # channels are split, never a sum


def _base_convs(library: str) -> tuple[BaseConv, BaseConv]:
    ms.set_seed(3)
    fused = BaseConv(4, 6, 3, kernels=cpu_kernels.CpuKernels.all(library))
    ms.set_seed(3)
    plain = BaseConv(4, 6, 3)
    return fused, plain


@pytest.mark.slow
def test_base_conv_fuses_only_training_batch_statistics(library, graph_mode):
    fused, plain = _base_convs(library)
    assert fused.fused is not None and plain.fused is None
    # checkpoints are interchangeable: the fused op holds no parameters
    names = lambda cell: [(p.name, p.shape) for p in cell.get_parameters()]  # noqa: E731
    assert names(fused) == names(plain)
    x = ms.Tensor(np.random.default_rng(4).standard_normal((2, 4, 10, 10)).astype(np.float32))
    for cell in (fused, plain):
        cell.set_train(True)
    # measured <= 3.7e-7 and 6e-8 (running variances here are ~1) under every CPU variant
    _close(fused(x).asnumpy(), plain(x).asnumpy(), 2e-5, "training")
    _close(fused.bn.moving_variance.asnumpy(), plain.bn.moving_variance.asnumpy(), 1e-6, "stats")
    # evaluation and a BatchNorm frozen to its running statistics (train.freeze) use them,
    # through the kernel's inference entry; fresh cells for each (a compiled graph does not
    # see attributes changed after it)
    rng = np.random.default_rng(5)
    mean = rng.uniform(-1, 1, 6).astype(np.float32)
    var = rng.uniform(0.2, 3, 6).astype(np.float32)
    for train, frozen in ((False, None), (True, False)):
        outs = []
        for cell in _base_convs(library):
            cell.set_train(train)
            cell.bn.use_batch_statistics = frozen
            cell.bn.moving_mean.set_data(ms.Tensor(mean))
            cell.bn.moving_variance.set_data(ms.Tensor(var))
            outs.append(cell(x).asnumpy())
            np.testing.assert_array_equal(cell.bn.moving_mean.asnumpy(), mean)
            np.testing.assert_array_equal(cell.bn.moving_variance.asnumpy(), var)
        # measured <= 2.8e-7 under every CPU variant
        _close(outs[0], outs[1], 2e-5, f"train={train} use_batch_statistics={frozen}")


def test_other_activations_keep_mindspore_layers(library):
    kernels = cpu_kernels.CpuKernels.all(library)
    assert BaseConv(4, 6, 3, act="relu", kernels=kernels).fused is None
    assert BaseConv(4, 6, 3, act="silu", kernels=kernels).fused is not None
