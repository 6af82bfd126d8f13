"""What every benchmark says about its machine: two CPUs of one model name told apart."""

from __future__ import annotations

from msdet.bench.common import cpu_model, cpu_simd

ZEN4 = """processor\t: 0
vendor_id\t: AuthenticAMD
cpu family\t: 25
model\t\t: 17
model name\t: AMD EPYC
flags\t\t: fpu sse sse2 sse4_1 sse4_2 avx fma avx2 avx512f avx512_vnni avx512_bf16

processor\t: 1
model name\t: AMD EPYC
flags\t\t: fpu sse sse2
"""
ZEN3 = ZEN4.replace("25\nmodel\t\t: 17", "25\nmodel\t\t: 1").replace(
    " avx512f avx512_vnni avx512_bf16", ""
)
GRAVITON = """processor\t: 0
BogoMIPS\t: 243.75
Features\t: fp asimd evtstrm aes sve
CPU implementer\t: 0x41
"""


def test_the_model_name_carries_family_and_model_and_the_simd_levels_follow():
    assert cpu_model(ZEN4) == "AMD EPYC (family 25 model 17)"
    assert cpu_model(ZEN3) == "AMD EPYC (family 25 model 1)"
    # The first processor's flags, widest level first.
    assert cpu_simd(ZEN4) == "avx512f avx512_vnni avx512_bf16 avx2 fma avx sse4_2"
    assert cpu_simd(ZEN3) == "avx2 fma avx sse4_2"
    assert cpu_simd(GRAVITON) == "asimd sve"
    assert cpu_simd("") == ""


def test_alternating_steps_reverse_their_order_every_round_and_skip_the_warm_up():
    from msdet.bench.common import alternate_steps

    calls, seen = [], []

    class Step:
        def __init__(self, name):
            self.name = name

        def __call__(self, *inputs):
            calls.append((self.name, inputs))
            return [Done()]

    class Done:
        def asnumpy(self):
            return None

    steps = {"a": Step("a"), "b": Step("b"), "c": Step("c")}
    result = alternate_steps(steps, (1, 2), 2, before=seen.append)
    order = [name for name, _ in calls]
    assert order == ["a", "b", "c", "c", "b", "a", "a", "b", "c"]  # warm-up, then 2 rounds
    assert seen == order and all(inputs == (1, 2) for _, inputs in calls)
    assert set(result) == {"a", "b", "c"} and all(t >= 0 for t in result.values())
