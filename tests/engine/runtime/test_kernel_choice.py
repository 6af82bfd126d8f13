"""engine.runtime.kernel_choice: which of msdet's CPU kernels runtime.cpu_kernels=auto uses, by measurement."""

from __future__ import annotations

import json

import pytest

from msdet.engine.runtime import kernel_choice
from msdet.engine.runtime.kernel_choice import (
    DECISIONS,
    cached_choice,
    choice_path,
    decide,
    describe,
)
from msdet.ops.cpu_kernels import KERNELS


def choose(name, median_ms):
    return DECISIONS[name].choose(median_ms)


def times(native, depthwise, batchnorm_silu, both):
    return {
        "native": native,
        "depthwise": depthwise,
        "batchnorm_silu": batchnorm_silu,
        "both": both,
    }


def test_choose_keeps_the_fastest_variant_only_when_it_clearly_wins():
    assert choose("blocks", times(160, 115, 138, 65)) == ("depthwise", "batchnorm_silu")
    assert choose("blocks", times(160, 100, 170, 120)) == ("depthwise",)
    assert choose("blocks", times(160, 170, 120, 150)) == ("batchnorm_silu",)
    # The AVX2-only EPYC's case: the kernels lose.
    assert choose("blocks", times(700, 760, 800, 880)) == ()
    # Faster by less than the margin (5%): not worth a different rounding.
    assert choose("blocks", times(100, 97, 99, 96)) == ()
    assert choose("blocks", times(100, 94, 99, 96)) == ("depthwise",)
    with pytest.raises(ValueError, match="no time for"):
        choose("blocks", {"native": 1.0, "both": 0.5})


def test_the_upsampling_is_decided_against_tile_alone():
    assert choose("upsample", {"tile": 29.1, "upsample": 15.0}) == ("upsample",)
    assert choose("upsample", {"tile": 29.1, "upsample": 28.0}) == ()  # within the margin
    assert choose("upsample", {"tile": 15.0, "upsample": 29.1}) == ()
    with pytest.raises(ValueError, match="no time for"):
        choose("upsample", {"tile": 1.0})


def test_spps_pools_are_decided_against_mindspores_max_pool_alone():
    assert choose("spp", {"max_pool": 14.0, "spp": 4.5}) == ("spp",)
    assert choose("spp", {"max_pool": 14.0, "spp": 13.6}) == ()  # within the margin
    assert choose("spp", {"max_pool": 4.5, "spp": 14.0}) == ()
    with pytest.raises(ValueError, match="no time for"):
        choose("spp", {"spp": 1.0})


def test_the_heads_transpose_is_kept_for_its_memory_unless_it_costs_time():
    assert choose("transpose", {"transpose_op": 6.0, "transpose": 2.5}) == ("transpose",)
    assert choose("transpose", {"transpose_op": 6.0, "transpose": 6.2}) == ("transpose",)
    assert choose("transpose", {"transpose_op": 6.0, "transpose": 6.4}) == ()  # 7% slower
    assert choose("transpose", {"transpose_op": 2.5, "transpose": 6.0}) == ()
    with pytest.raises(ValueError, match="no time for"):
        choose("transpose", {"transpose": 1.0})


def test_the_assigner_is_decided_against_mindspores_operators_alone():
    assert choose("assigner", {"ops": 40.0, "assigner": 21.0}) == ("assigner",)
    assert choose("assigner", {"ops": 40.0, "assigner": 38.5}) == ()  # within the margin
    assert choose("assigner", {"ops": 21.0, "assigner": 40.0}) == ()
    with pytest.raises(ValueError, match="no time for"):
        choose("assigner", {"assigner": 1.0})


def test_the_loss_is_decided_among_its_operators_the_class_kernel_and_the_terms_kernel():
    def loss(ops, class_bce, terms):
        return {"loss_ops": ops, "class_bce": class_bce, "loss_terms": terms}

    assert choose("loss", loss(16.4, 11.1, 1.7)) == ("loss_terms",)
    assert choose("loss", loss(16.4, 11.1, 12.0)) == ("class_bce",)
    assert choose("loss", loss(16.4, 16.0, 15.9)) == ()  # within the margin
    assert choose("loss", loss(1.7, 11.1, 16.4)) == ()
    with pytest.raises(ValueError, match="no time"):
        choose("loss", {"loss_ops": 1.0, "loss_terms": 1.0})


def test_nms_is_decided_against_nms_with_mask_alone():
    assert choose("nms", {"nms_with_mask": 52.0, "nms": 20.0}) == ("nms",)
    assert choose("nms", {"nms_with_mask": 52.0, "nms": 50.0}) == ()  # within the margin
    assert choose("nms", {"nms_with_mask": 20.0, "nms": 52.0}) == ()
    with pytest.raises(ValueError, match="no time for"):
        choose("nms", {"nms": 1.0})


def record(kernels, version="2.10.0", threads=2):
    """A cached record: every decision's times (1 ms each)."""
    return {
        "kernels": list(kernels),
        **{d.key: dict.fromkeys(d.variants, 1.0) for d in DECISIONS.values()},
        "mindspore": version,
        "threads": threads,
    }


def test_the_cached_decision_is_per_library_threads_and_mindspore_version(tmp_path):
    lib = str(tmp_path / "msdet_kernels-abc.so")
    path = choice_path(lib, 2)
    assert path.endswith("msdet_kernels-abc.choice-t2.json") and choice_path(lib, 1) != path
    assert cached_choice(lib, 2, "2.10.0") is None
    with open(path, "w", encoding="utf-8") as f:
        json.dump(record(["depthwise"]), f)
    assert cached_choice(lib, 2, "2.10.0")["kernels"] == ["depthwise"]
    assert cached_choice(lib, 2, "2.11.0") is None  # another MindSpore: measure again
    assert cached_choice(lib, 1, "2.10.0") is None
    older = {k: v for k, v in record(["depthwise"]).items() if k != "loss_ms"}
    for broken in ("{not json", json.dumps(record(["fast_conv"])), json.dumps(older)):
        with open(path, "w", encoding="utf-8") as f:
            f.write(broken)
        assert cached_choice(lib, 2, "2.10.0") is None


def test_decide_uses_the_cache_and_never_caches_a_failure(tmp_path, monkeypatch):
    lib = str(tmp_path / "lib.so")
    calls = []

    def child(library, threads):
        calls.append((library, threads))
        return (
            {"kernels": [], "error": "exit 1: boom"}
            if len(calls) == 1
            else record(["batchnorm_silu"])
        )

    monkeypatch.setattr(kernel_choice, "_measure_in_child", child)
    assert decide(lib, 2, "2.10.0")["error"] == "exit 1: boom"  # failed: MindSpore's operators
    assert decide(lib, 2, "2.10.0")["kernels"] == ["batchnorm_silu"]  # measured again
    assert decide(lib, 2, "2.10.0")["kernels"] == ["batchnorm_silu"]  # from the cache
    assert calls == [(lib, 2), (lib, 2)]


def test_the_flat_sgd_is_kept_for_its_memory_unless_it_costs_time():
    assert choose("sgd", {"sgd_ops": 9.0, "sgd": 2.0}) == ("sgd",)
    assert choose("sgd", {"sgd_ops": 9.0, "sgd": 9.4}) == ("sgd",)  # within the margin
    assert choose("sgd", {"sgd_ops": 9.0, "sgd": 9.5}) == ()
    assert choose("sgd", {"sgd_ops": 2.0, "sgd": 9.0}) == ()
    with pytest.raises(ValueError, match="no time for"):
        choose("sgd", {"sgd": 1.0})


def test_the_flat_ema_is_kept_for_its_memory_unless_it_costs_time():
    assert choose("ema", {"ema_ops": 3.0, "ema": 1.0}) == ("ema",)
    assert choose("ema", {"ema_ops": 3.0, "ema": 3.1}) == ("ema",)  # within the margin
    assert choose("ema", {"ema_ops": 3.0, "ema": 3.3}) == ()
    with pytest.raises(ValueError, match="no time for"):
        choose("ema", {"ema": 1.0})


def test_describe_is_one_line_with_the_figures():
    blocks = {"blocks_ms": times(160.2, 114.9, 138.3, 64.8)}
    line = describe({"kernels": ["depthwise"], "threads": 2, **blocks})
    assert "\n" not in line and "depthwise convolutions on msdet's kernels" in line
    assert "(measured on this CPU, 2 threads)" in line
    assert "native 160 ms" in line and "both 65 ms" in line
    assert "MindSpore's operators only" in describe({**record([]), **blocks})
    both = {
        **record(["depthwise", "upsample"]),
        **blocks,
        "upsample_ms": {"tile": 29.1, "upsample": 15.0},
    }
    line = describe(both)
    assert "depthwise convolutions and 2x upsampling on msdet's kernels" in line
    assert "tile 29 ms" in line and "upsample 15 ms" in line
    every = describe(
        {
            **both,
            "kernels": list(KERNELS),
            "spp_ms": {"max_pool": 14.2, "spp": 4.4},
            "transpose_ms": {"transpose_op": 6.1, "transpose": 2.4},
            "assigner_ms": {"ops": 40.2, "assigner": 21.3},
            "loss_ms": {"loss_ops": 16.4, "class_bce": 11.1, "loss_terms": 1.7},
            "nms_ms": {"nms_with_mask": 52.4, "nms": 19.6},
            "sgd_ms": {"sgd_ops": 9.3, "sgd": 2.2},
            "ema_ms": {"ema_ops": 3.1, "ema": 1.2},
        }
    )
    assert "SimOTA's assignment, the class loss, the loss's terms, NMS, SGD and the EMA" in every
    assert "loss_ops 16 ms" in every and "class_bce 11 ms" in every and "loss_terms 2 ms" in every
    assert "ema_ops 3 ms" in every and "ema 1 ms" in every
    assert "sgd_ops 9 ms" in every and "sgd 2 ms" in every
    assert "transpose_op 6 ms" in every and "transpose 2 ms" in every
    assert "max_pool 14 ms" in every and "spp 4 ms" in every
    assert "ops 40 ms" in every and "assigner 21 ms" in every
    assert "nms_with_mask 52 ms" in every and "nms 20 ms" in every
    # in the table's order: the blocks first, the EMA last
    assert every.index("native 160 ms") < every.index("tile 29 ms") < every.index("ema 1 ms")


def test_every_kernel_is_decided_once_and_every_variant_names_known_kernels():
    decided = [k for d in DECISIONS.values() for k in set().union(*d.variants.values())]
    assert sorted(decided) == sorted(KERNELS)
    for d in DECISIONS.values():
        assert next(iter(d.variants.values())) == (), d.name  # first: MindSpore's operators
        assert d.key == f"{d.name}_ms"


@pytest.mark.slow
def test_the_benchmark_measures_every_variant(library):
    """The child-process benchmark itself (~30-60 s on 2 cores): every variant of every
    decision timed, and the kernels kept the ones each decision's rule keeps from the
    times."""
    result = kernel_choice._measure_in_child(library, 2)
    assert "error" not in result, result
    expected = ()
    for decision in DECISIONS.values():
        times_ms = result[decision.key]
        assert set(times_ms) == set(decision.variants), decision.name
        assert all(t > 0 for t in times_ms.values()), decision.name
        expected += decision.choose(times_ms)
    assert tuple(result["kernels"]) == expected
    assert result["threads"] == 2 and result["library"] == library.rsplit("/", 1)[-1]
    assert set(result["first_call_s"]) == {n for d in DECISIONS.values() for n in d.variants}
