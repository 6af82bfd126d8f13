"""engine.runtime.compiler: which configurations share compiled graphs, and where they are kept."""

from __future__ import annotations

import os

import pytest

from msdet.engine.runtime import compiler
from tests.support import ROOT


def _composed(*overrides: str):
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=os.path.join(ROOT, "configs"), version_base="1.3"):
        return compose("config", overrides=list(overrides))


@pytest.mark.slow
def test_graph_key_ignores_what_changes_no_graph():
    base = compiler.graph_key(_composed())
    # A resumed run, another time limit, another start or dataset name: the same graphs.
    for neutral in (
        "train.resume=auto",
        "train.time_limit_min=5",
        "train.pretrained=yolox_nano",
        "data.name=mine",
    ):
        assert compiler.graph_key(_composed(neutral)) == base, neutral
    # Batch, size range, model and precision change the graphs.
    for changing in (
        "train.batch_size=4",
        "train.multiscale_range=2",
        "model=yolox_s",
        "runtime.amp=O2",
        "data.img_size=[256,256]",
    ):
        assert compiler.graph_key(_composed(changing)) != base, changing


def test_compile_cache_folder_per_key_device_kernel_and_version():
    folder = compiler.compile_cache_folder("/c", "k", "CPU", "/lib/a.so", "2.10.0")
    assert os.path.dirname(folder) == "/c" and len(os.path.basename(folder)) == 16
    assert folder == compiler.compile_cache_folder("/c", "k", "CPU", "/lib/a.so", "2.10.0")
    others = {
        compiler.compile_cache_folder("/c", "k2", "CPU", "/lib/a.so", "2.10.0"),
        compiler.compile_cache_folder("/c", "k", "Ascend", "/lib/a.so", "2.10.0"),
        compiler.compile_cache_folder("/c", "k", "CPU", None, "2.10.0"),
        compiler.compile_cache_folder("/c", "k", "CPU", "/lib/a.so", "2.11.0"),
    }
    assert folder not in others and len(others) == 4


def test_the_training_key_covers_the_class_count_the_data_decide():
    """Another data folder can hold another class count, and with it other head shapes:
    the key the trainer uses shares graphs only between the same counts."""
    here, elsewhere = _composed(), _composed("data.root=/elsewhere")
    assert compiler.training_graph_key(here, 3) == compiler.training_graph_key(elsewhere, 3)
    assert compiler.training_graph_key(here, 3) != compiler.training_graph_key(elsewhere, 80)


def test_enable_compile_cache_sets_mindspores_cache_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("MSDET_CACHE_DIR", str(tmp_path))
    for var in compiler.COMPILE_CACHE_VARS:
        # setenv first: monkeypatch restores only what it changed, and the cache switched on
        # here must not reach later tests' subprocesses
        monkeypatch.setenv(var, "")
        monkeypatch.delenv(var)
    folder = compiler.enable_compile_cache("key-a", "CPU", None, "2.10.0")
    assert os.environ["MS_COMPILER_CACHE_ENABLE"] == "1"
    assert os.environ["MS_COMPILER_CACHE_PATH"] == folder
    assert os.path.dirname(folder) == str(tmp_path / "graphs")
    assert compiler.enable_compile_cache("key-b", "CPU", None, "2.10.0") != folder
