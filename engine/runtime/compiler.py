"""How MindSpore compiles msdet's graphs: jit level and kernel fusion, the persistent compile
cache, IR dumps for debugging, and what a failed compile leaves behind.

``engine.runtime.process.setup_runtime`` applies these settings from the ``runtime`` config group;
the functions here only turn settings into environment variables, context values and
folder names, so each is testable without compiling anything. Like ``engine.runtime.cpu``,
nothing here imports MindSpore at import time.
"""

from __future__ import annotations

import glob
import hashlib
import json
import logging
import os
import shutil
from typing import Any

from msdet.common.cache import make_cache_folder
from msdet.ops.cpu_kernels import user_cache_dir

log = logging.getLogger(__name__)

# MindSpore's persistent compile cache (runtime.compile_cache): it names graphs by compile
# order and checks only the Python sources they came from, so msdet gives every graph-
# relevant configuration its own folder. These keys change no compiled graph: a resumed
# run, or one with another time limit or data folder, finds the first run's graphs.
COMPILE_CACHE_VARS = ("MS_COMPILER_CACHE_ENABLE", "MS_COMPILER_CACHE_PATH")
GRAPH_NEUTRAL_KEYS = (
    "train.resume",
    "train.time_limit_min",
    "train.stop_at_epoch",
    "train.tensorboard",
    "train.pretrained",  # the starting values, not the network (train.freeze is not neutral)
    "train.pretrained_strict",
    "data.name",
    "data.root",  # the data decide the class count: training_graph_key adds it
    "data.cache_dir",
    "data.num_workers",
    "data.python_multiprocessing",
    "runtime.compile_cache",
    "runtime.profile_steps",
    "runtime.save_graphs",
)

# Graph kernel fusion (runtime.fusion): MindSpore fuses element-wise chains at jit_level O1
# (AKG-generated kernels on CPU, DVM on Ascend). "safe" leaves Log, Exp and Sqrt out of the
# clusters: AKG's versions of them moved the first loss by ~1e-5 relative, which SimOTA's
# discrete assignment turns into different losses a few steps later; without them the
# first loss is the unfused graph's and later ones differ by rounding.
FUSION_FLAGS = {
    "off": None,
    "safe": "--opt_level=1 --disable_cluster_ops=Log,Exp,Sqrt",
    "all": "--opt_level=1",
}
GRAPH_KERNEL_FLAGS_VAR = "MS_DEV_GRAPH_KERNEL_FLAGS"

# runtime.save_graphs=true: MindSpore's level 1 writes the IR after every compiler pass
# (a tiny nano run: 625 files, 2.5 GB; filtered as below: 32 entries, 164 MB). Unless
# MS_DEV_DUMP_IR_PASSES is already set, keep the stages worth reading: after type inference
# (every node's shape and dtype), the final front-end graph and the backend's kernel graph.
# runtime.save_graphs=2 or 3 dumps every pass.
IR_PASSES_VAR = "MS_DEV_DUMP_IR_PASSES"
IR_PASSES_VALUE = "type_inference,validate,graph_build"
# A failed graph compile writes MindSpore's analysis here, relative to the working
# directory whatever MS_DEV_SAVE_GRAPHS_PATH says (see collect_compile_failure).
ANALYZE_FAIL_GLOB = os.path.join("rank_*", "om", "analyze_fail.ir")


def configure_graph_dumps(save_graphs_dir: str | None, level: int = 1) -> dict[str, str]:
    """With ``save_graphs_dir``, compiled graphs' IR is written there (``level`` 1: the
    stages in :data:`IR_PASSES_VALUE`; 2 or 3: every pass, 3 adds .dot files). Returns the
    variables set."""
    changed: dict[str, str] = {}
    if not save_graphs_dir:
        return changed
    os.makedirs(save_graphs_dir, exist_ok=True)
    for key, value in (
        ("MS_DEV_SAVE_GRAPHS", str(int(level))),
        ("MS_DEV_SAVE_GRAPHS_PATH", save_graphs_dir),
    ):
        os.environ[key] = value
        changed[key] = value
    if int(level) == 1 and IR_PASSES_VAR not in os.environ:
        os.environ[IR_PASSES_VAR] = changed[IR_PASSES_VAR] = IR_PASSES_VALUE
    return changed


def fusion_settings(choice: str, jit_level: Any) -> tuple[str | None, str | None]:
    """(jit_level, graph kernel flags) for ``runtime.fusion``; ``jit_level`` is the
    configured one (None: MindSpore's default). Fusion runs at O1 only."""
    if choice not in FUSION_FLAGS:
        raise ValueError(f"runtime.fusion must be one of {tuple(FUSION_FLAGS)}, got {choice!r}")
    flags = FUSION_FLAGS[choice]
    if flags is None:
        return (str(jit_level) if jit_level else None), None
    if jit_level and str(jit_level) != "O1":
        raise ValueError(
            f"runtime.fusion={choice} fuses at jit_level O1: set runtime.jit_level=O1 or null "
            f"(got {jit_level})"
        )
    return "O1", flags


def configure_fusion(fusion: Any, jit_level: Any, device: str) -> tuple[str | None, str | None]:
    """Apply ``runtime.fusion`` to the process environment; returns (jit_level, flags)."""
    fusion = "off" if fusion is False else str(fusion)  # YAML 1.1 reads a bare off as false
    level, flags = fusion_settings(fusion, jit_level)
    if flags:
        check_fusion_compiler(device)
        os.environ[GRAPH_KERNEL_FLAGS_VAR] = flags
        # AKG writes its kernels under MS_COMPILER_CACHE_PATH (default: the working folder)
        os.environ.setdefault(COMPILE_CACHE_VARS[1], user_cache_dir("fusion"))
    return level, flags


def check_fusion_compiler(device: str) -> None:
    """AKG, MindSpore's CPU fusion compiler, imports the ``decorator`` package."""
    if device != "CPU":
        return
    try:
        import decorator  # noqa: F401
    except ImportError as err:
        raise ValueError(
            "runtime.fusion on CPU needs the 'decorator' package (pip install -r "
            "requirements.txt); or set runtime.fusion=off"
        ) from err


def graph_key(cfg: Any) -> str:
    """The composed config as canonical JSON, without :data:`GRAPH_NEUTRAL_KEYS`: two runs
    with the same key compile the same graphs (given the same sources, which MindSpore's
    cache checks itself)."""
    from omegaconf import OmegaConf

    tree = OmegaConf.to_container(cfg, resolve=True)
    for dotted in GRAPH_NEUTRAL_KEYS:
        group, _, key = dotted.partition(".")
        if isinstance(tree.get(group), dict):
            tree[group].pop(key, None)
    return json.dumps(tree, sort_keys=True, default=str)


def training_graph_key(cfg: Any, num_classes: int) -> str:
    """:func:`graph_key` with the class count the data gave: it sets the head's parameter
    shapes, yet a COCO-format dataset decides it, not a config key."""
    return json.dumps({"config": graph_key(cfg), "num_classes": int(num_classes)}, sort_keys=True)


def compile_cache_folder(
    root: str, key: str, device: str, cpu_kernels: str | None, version: str
) -> str:
    """``root/<digest>``: one folder per graph key, device, msdet kernel library (and the
    kernels in use) and MindSpore version (MindSpore adds ``rank_<n>/`` inside per rank)."""
    digest = hashlib.sha256(
        "\n".join((key, device, str(cpu_kernels), version)).encode()
    ).hexdigest()
    return os.path.join(root, digest[:16])


def enable_compile_cache(key: str, device: str, kernels: str | None, version: str) -> str:
    """Turn on MindSpore's persistent compile cache in this configuration's own folder."""
    folder = compile_cache_folder(user_cache_dir("graphs"), key, device, kernels, version)
    make_cache_folder(folder)  # a clear error naming MSDET_CACHE_DIR
    os.environ.update(dict(zip(COMPILE_CACHE_VARS, ("1", folder))))
    log.info("compile cache: graphs kept in %s", folder)
    return folder


def collect_compile_failure(run_dir: str, since: float) -> str | None:
    """Move MindSpore's ``analyze_fail.ir`` written since ``since`` (a time.time()) from the
    working directory into ``run_dir``; returns its new path, or None when there is none."""
    fresh = [p for p in glob.glob(ANALYZE_FAIL_GLOB) if os.path.getmtime(p) >= since]
    if not fresh:
        return None
    dst = os.path.join(run_dir, "analyze_fail.ir")
    os.makedirs(run_dir, exist_ok=True)
    shutil.move(max(fresh, key=os.path.getmtime), dst)
    return dst
