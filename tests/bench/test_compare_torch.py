"""bench.compare_torch: which environment each side runs in, and what the result records.
The children are replaced by a recorder (the real benchmark runs for minutes)."""

from __future__ import annotations

import pytest

from msdet.bench import compare_torch


def _recorded(monkeypatch, argv):
    calls = []

    def fake_run(cmd, env=None):
        calls.append((cmd[0], "--infer" in cmd, dict(env or {})))
        torch_side = cmd[0] == "msdet.bench.torch_step"
        step = 0.2 if torch_side else 0.18
        result = {
            "images_per_s": 40.0 if torch_side else 44.0,
            "peak_rss_mb": 1500.0 if torch_side else 1250.0,
            "first_step_s": 0.4 if torch_side else 8.0,
        }
        result["batch_s" if "--infer" in cmd else "step_s"] = step
        if torch_side:
            result["cpu_capability"] = (
                "AVX2" if env and env.get("ATEN_CPU_CAPABILITY") else "AVX512"
            )
        return result

    monkeypatch.setattr(compare_torch, "run", fake_run)
    return compare_torch.main(argv), calls


@pytest.mark.parametrize("isa", ["native", "avx2"])
def test_each_side_runs_in_its_own_environment(monkeypatch, isa):
    result, calls = _recorded(monkeypatch, ["--rounds", "2", "--steps", "3", "--isa", isa])
    assert len(calls) == 8  # two rounds of four children
    for module, _, env in calls:
        side = "pytorch" if module == "msdet.bench.torch_step" else "msdet"
        assert env == compare_torch.ISA_CAPS[isa][side]
    if isa == "avx2":
        torch_env = compare_torch.ISA_CAPS["avx2"]["pytorch"]
        assert torch_env["ATEN_CPU_CAPABILITY"] == "avx2"
        assert torch_env["ONEDNN_MAX_CPU_ISA"] == "AVX2"
        assert compare_torch.ISA_CAPS["avx2"]["msdet"]["MSDET_KERNEL_FLAGS"] == "-mno-avx512f"
    assert result["isa"] == isa
    assert result["pytorch_cpu_capability"] == ("AVX2" if isa == "avx2" else "AVX512")
    assert result["ratio_train_speed"] == pytest.approx(0.2 / 0.18, abs=1e-3)
    assert result["ratio_train_memory"] == pytest.approx(1500 / 1250, abs=1e-3)


def test_the_child_environment_adds_to_the_parents(monkeypatch):
    """run() hands a child the parent's environment with the side's variables on top."""
    seen = {}

    class Done:
        returncode = 0
        stdout = 'RESULT {"step_s": 1.0}\n'
        stderr = ""

    def fake_subprocess_run(cmd, capture_output, text, env):
        seen.update(env)
        return Done()

    monkeypatch.setenv("MSDET_TEST_PARENT", "kept")
    monkeypatch.setattr(compare_torch.subprocess, "run", fake_subprocess_run)
    assert compare_torch.run(
        ["msdet.bench.step_speed"], {"MSDET_KERNEL_FLAGS": "-mno-avx512f"}
    ) == {"step_s": 1.0}
    assert seen["MSDET_TEST_PARENT"] == "kept" and seen["MSDET_KERNEL_FLAGS"] == "-mno-avx512f"
