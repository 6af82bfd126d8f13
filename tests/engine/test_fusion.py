"""runtime.fusion: graph kernel fusion settings, and losses equal to the unfused graph's."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from bench.common import read_result
from engine.compiler import FUSION_FLAGS, fusion_settings

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_fusion_settings():
    assert fusion_settings("off", None) == (None, None)
    assert fusion_settings("off", "O0") == ("O0", None)
    jit, flags = fusion_settings("safe", None)
    assert jit == "O1" and "--disable_cluster_ops=Log,Exp,Sqrt" in flags
    assert fusion_settings("all", "O1") == ("O1", FUSION_FLAGS["all"])
    with pytest.raises(ValueError, match="runtime.jit_level=O1 or null"):
        fusion_settings("safe", "O0")
    with pytest.raises(ValueError, match="runtime.fusion must be one of"):
        fusion_settings("fast", None)


def _losses(fusion: str, cwd, cache, isa: str | None = None) -> list[float]:
    """Three steps of YOLOX-nano at 64 px (``bench.fusion``'s own variant runner); ``isa``
    caps oneDNN's instruction set (msdet's default on CPU: AVX2)."""
    env = {**os.environ, "PYTHONPATH": ROOT, "MSDET_CACHE_DIR": str(cache)}
    env.pop("MS_DEV_GRAPH_KERNEL_FLAGS", None)
    env.pop("MS_COMPILER_CACHE_PATH", None)
    if isa:
        env["ONEDNN_MAX_CPU_ISA"] = isa
    tiny = ["data.img_size=64", "data.max_objects=8", "train.batch_size=2"]
    out = subprocess.run(
        [sys.executable, "-m", "bench.fusion", "--only", fusion, "--steps", "2", *tiny],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    result = read_result(out.stdout)
    assert result["flags"] == FUSION_FLAGS[fusion]
    return result["losses"]


# Fusion changes the rounding inside its clusters, not the computation. Measured (relative
# difference of safe to off at steps 1 / 2 / 3, this test's 64 px run unless said):
#   Intel Xeon (320 px, bench.fusion):  0 / 1.1e-6 / 2.4e-5
#   AMD EPYC, AVX2 only:                0 / 1.07e-5 / 1.4e-4
#   AMD EPYC, AVX-512 (Zen 4):          0 / 1.35e-5 / 2.7e-3
# The same unfused run with oneDNN capped at SSE4.1 instead of AVX2 (a change of rounding
# only, in the convolutions) moved the step-2 loss by 5.7e-3 and the step-3 loss by 1.4e-2
# on the Zen 4 machine: SimOTA's discrete assignment amplifies any rounding difference once
# the weights have been updated, so no fixed bound taken on one CPU holds on the next.
FIRST_LOSS_RTOL = 1e-6  # ~8 float32 ulps: the same operators outside the clusters (measured 0)
# After one update a rounding difference in the gradients moves the loss by ~1e-5 relative
# (above); 1e-4 is the floor of the bound wherever the ISA spread happens to be smaller.
UPDATE_RTOL_FLOOR = 1e-4


@pytest.mark.slow
def test_safe_fusion_keeps_the_unfused_losses(tmp_path):
    """``safe`` computes what the unfused graph computes: the first loss equal within float32
    rounding (AKG's Log/Exp/Sqrt, which ``all`` fuses, moved it by 3.8e-6 at 64 px and 1e-5
    at 320 px, so this check tells the two apart), and the next one no further from the
    unfused loss than a pure change of rounding moves it: the unfused graph with oneDNN
    at SSE4.1, run here beside it (see the figures above; the step-2 bound of 1e-5 this test
    had before failed on both AMD machines)."""
    for name in ("off", "safe", "sse41"):
        (tmp_path / name).mkdir()
    plain = _losses("off", tmp_path / "off", tmp_path / "cache")
    fused = _losses("safe", tmp_path / "safe", tmp_path / "cache")
    rounded = _losses("off", tmp_path / "sse41", tmp_path / "cache", isa="SSE41")
    assert abs(plain[0] - fused[0]) <= FIRST_LOSS_RTOL * abs(plain[0]), (plain, fused)
    # Step 2: after one update. Step 3 is left out: there SimOTA has amplified the rounding
    # (2.7e-3 above), and where capping oneDNN changes nothing (aarch64) nothing bounds it.
    spread = abs(plain[1] - rounded[1])
    bound = max(spread, UPDATE_RTOL_FLOOR * abs(plain[1]))
    assert abs(plain[1] - fused[1]) <= bound, (plain, fused, rounded)
    # AKG's compiled kernels go to msdet's cache, not into the working folder
    assert not (tmp_path / "safe" / "akg_kernel_meta").exists()
    assert (tmp_path / "cache" / "fusion" / "akg_kernel_meta").is_dir()
