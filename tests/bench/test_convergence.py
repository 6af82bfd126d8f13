"""bench.convergence's record and its same-start experiment (the original's initial weights
as msdet's)."""

from __future__ import annotations

import argparse

import numpy as np
import pytest

from msdet.bench import convergence


def entry(side: str, seed: int, map_: float, loss: list[float], epochs_run: int = 2) -> dict:
    return {"side": side, "seed": seed, "epochs": 2, "epochs_run": epochs_run, "img": 320,
            "cpu": "cpu", "recipe": "parity", "mAP": map_, "mAP50": map_ + 0.2, "loss": loss,
            "train_min": 1.0}  # fmt: skip


def test_a_record_names_msdets_kernel_flags_when_they_were_set(monkeypatch):
    """MSDET_KERNEL_FLAGS=-mno-avx512f runs msdet's kernels without AVX-512 on the same CPU:
    the record says so on msdet's side (the original has no such kernels)."""
    args = argparse.Namespace(epochs=2, recipe="parity", model="yolox_nano", img=320, batch=8,
                              num_train=10, multiscale=0, set=[])  # fmt: skip
    result = {"history": [{"loss_total": 9.0, "epoch_s": 60.0}],
              "metrics": {"mAP": 0.1, "mAP50": 0.2}, "train_min": 1.0}  # fmt: skip
    monkeypatch.delenv(convergence.FLAGS_VAR, raising=False)
    assert "kernel_flags" not in convergence.record_entry("msdet", 3, args, result)
    monkeypatch.setenv(convergence.FLAGS_VAR, "-mno-avx512f")
    msdet = convergence.record_entry("msdet", 3, args, result)
    assert msdet["kernel_flags"] == "-mno-avx512f" and msdet["mAP"] == 0.1 and msdet["seed"] == 3
    assert "kernel_flags" not in convergence.record_entry("pytorch", 3, args, result)


def test_the_report_gives_each_sides_mean_and_spread_over_finished_runs():
    rows = convergence.summarise(
        [
            entry("msdet", 0, 0.30, [10.0, 6.0]),
            entry("msdet", 1, 0.40, [11.0, 7.0]),
            entry("msdet", 2, 0.90, [9.0, 5.0], epochs_run=1),  # stopped early: left out
            entry("msdet+original-init", 0, 0.35, [10.5, 6.5]),
            {**entry("msdet", 0, 0.20, [12.0, 8.0]), "overrides": ["runtime.cpu_kernels=native"]},
            {**entry("msdet", 1, 0.25, [12.0, 8.0]), "kernel_flags": "-mno-avx512f"},
        ]
    )
    by_side = {r["side"]: r for r in rows}
    # another kernel path of the same CPU is a side of its own, not more seeds of the default
    assert by_side["msdet (runtime.cpu_kernels=native)"]["seeds"] == [0]
    assert by_side["msdet (MSDET_KERNEL_FLAGS=-mno-avx512f)"]["mAP"]["mean"] == 0.25
    assert by_side["msdet"]["seeds"] == [0, 1]
    assert by_side["msdet"]["mAP"]["mean"] == pytest.approx(0.35)
    assert by_side["msdet"]["mAP"]["sd"] == pytest.approx(0.0707, abs=1e-4)
    assert by_side["msdet"]["loss"] == [10.5, 6.5]
    assert by_side["msdet+original-init"]["mAP"]["sd"] == 0.0


def test_side_names_say_what_was_swapped():
    args = argparse.Namespace(data_stream="yolox", init="own")
    assert (convergence.side_name(args), convergence.msdet_side(args)) == ("pytorch", "msdet")
    args = argparse.Namespace(data_stream="msdet", init="original")
    assert convergence.side_name(args) == "pytorch+msdet-data"
    assert convergence.msdet_side(args) == "msdet+original-init"


@pytest.mark.slow
def test_original_init_is_the_originals_draw_for_the_seed(tmp_path):
    """The checkpoint holds, tensor for tensor, the weights bench.torch_train starts from."""
    import mindspore as ms

    from msdet.models.yolox import load_model_config
    from msdet.porting.reference import build_torch_yolox

    names = ["disc", "rectangle", "triangle"]
    path = convergence.original_init(str(tmp_path), "yolox_nano", 3, names, 320)
    saved = ms.load_checkpoint(path)
    torch_net = build_torch_yolox(load_model_config("yolox_nano"), 3, seed=3)
    other = build_torch_yolox(load_model_config("yolox_nano"), 3, seed=4)
    key = "head.reg_preds.0.weight"
    ours = saved[key].asnumpy()
    assert np.array_equal(ours, torch_net.state_dict()[key].numpy())
    assert not np.array_equal(ours, other.state_dict()[key].numpy())
    gamma = saved["head.stems.0.bn.gamma"].asnumpy()
    assert np.array_equal(gamma, torch_net.state_dict()["head.stems.0.bn.weight"].numpy())
    assert convergence.original_init(str(tmp_path), "yolox_nano", 3, names, 320) == path
