"""The Ascend side of where msdet runs: which chip this is (as the installed MindSpore
release tells it), what msdet does differently on it (:class:`ChipProfile`: the cube's
float32, fp16 overflow detection, where NMS runs), the operator precision mode, the jit
level MindSpore compiles at, and the check of ``NMSWithMask`` before the evaluation relies
on it.

Every question to the card goes through here (``tests/test_layout.py``);
``engine.runtime.standin`` answers the same questions on CPU for a chip stood in, under each
release. Nothing here imports MindSpore at import time.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)

# Ascend operator precision (runtime.precision_mode). "auto" leaves MindSpore's own default per
# chip; any of CANN's modes can be set explicitly.
PRECISION_MODES = (
    "auto",
    "must_keep_origin_dtype",
    "force_fp16",
    "allow_fp32_to_fp16",
    "allow_mix_precision",
    "force_fp32",
    "allow_fp32_to_bf16",
    "allow_mix_precision_fp16",
    "allow_mix_precision_bf16",
)

DEFAULT_PRECISION_MODE = "auto"

KEEP_DTYPE = "must_keep_origin_dtype"

# MindSpore's names (mindspore/amp.py, nn/wrap/loss_scale.py) for the SoC features msdet's
# chip profile is decided from. "classic": the Atlas training series (910A), whose cube unit
# has no float32 and which reports fp16 overflow only in its float-status register. "hq
# dtype line": A2 (910B) and later, whose cube computes float32 and which reports overflow
# in the register only in saturation mode (MS_ASCEND_CHECK_OVERFLOW_MODE).
SOC_CLASSIC_OVERFLOW = "amp_loss_scale_train_classic_target"

SOC_A2 = "train_hq_dtype_line"

OVERFLOW_MODE_VAR = "MS_ASCEND_CHECK_OVERFLOW_MODE"

# MindSpore 2.10's own default jit level on Ascend (MsContext::GetJitLevel in
# libmindspore_core.so): with none set, a graph compiles at O2 (GE's whole-graph sink) where
# the SoC has this feature and at O0 (kernel by kernel, the ms_backend) elsewhere. In 2.10's
# SoC table (the same library) only ascend910, the Atlas training series, has it; 2.7's
# source tested the SoC name (ms_context.cc). A rank-table launch forces O2 on every chip.
SOC_JIT_O2_DEFAULT = "jit_level_o2_default_ascend_jit"


# NMSWithMask's box limits per call: MindSpore's operator takes at most 2,864; the A2's
# static kernel computes its next index in float16, exact for integers up to 2,048.
NMS_MAX_BOXES = 2864

NMS_MAX_BOXES_FLOAT16_INDEX = 2048


@dataclass(frozen=True)
class ChipProfile:
    """What msdet does differently on one Ascend chip, decided from MindSpore's own SoC
    capability queries (:func:`chip_profile`), never from a list of chip names.

    ``host_nms``: NMS runs on the host, because the chip's ``NMSWithMask`` kernel (the
    legacy TBE path of chips with RPN instructions) takes float16 only and scales
    coordinates by 0.054: class offsets of 80 classes x 833 px exceed float16's 65504 and
    float16's spacing at 2,048 px is 2 px, so suppression would silently differ. Where NMS
    runs on the device, :func:`device_nms_problem` still checks it on first use.
    ``nms_max_boxes``: candidates per ``NMSWithMask`` call whose indices the chip computes
    exactly. ``default_jit_level``: the jit level msdet sets when ``runtime.jit_level`` is
    unset, MindSpore 2.10's own default for the chip (:data:`SOC_JIT_O2_DEFAULT`): O2, GE's
    graph sink, on the Atlas training series, where MindSpore still defaults to GE and
    MindYOLO's published YOLOX runs used it; O0, kernel by kernel (aclnn kernels where
    MindSpore dispatches to them), elsewhere. GE is deprecated since MindSpore 2.9
    (``mindspore.jit``'s docstring), so msdet sets the level explicitly instead of relying on
    a default that may move.
    """

    soc: str  # MindSpore's name for it (MSContext.get_ascend_soc_version), for reports
    cube_fp32: bool  # matrix operators (convolution, matmul) compute in float32
    float_status: bool  # fp16 overflow read from the float-status register
    host_nms: bool
    nms_max_boxes: int = NMS_MAX_BOXES
    default_jit_level: str = "O0"

    def describe(self) -> str:
        """One log line."""
        return (
            f"Ascend chip {self.soc}: cube float32 {'yes' if self.cube_fp32 else 'no'}, "
            f"overflow from the "
            f"{'float-status register' if self.float_status else 'gradients'}, "
            f"NMS on the {'host' if self.host_nms else 'device'}"
            + ("" if self.host_nms else f" (<= {self.nms_max_boxes} boxes per call)")
            + f", Model.train's graphs at jit level {self.default_jit_level} "
            + ("(GE graph sink)" if self.default_jit_level == "O2" else "(kernel by kernel)")
            + " unless runtime.jit_level sets one"
        )


def chip_profile(
    soc: str,
    classic: bool,
    hq_dtype: bool,
    overflow_mode: str | None,
    jit_o2_default: bool | None = None,
) -> ChipProfile:
    """The profile of a chip from MindSpore's answers to :data:`SOC_CLASSIC_OVERFLOW`,
    :data:`SOC_A2` and :data:`SOC_JIT_O2_DEFAULT` (None: as ``classic``, the SoC MindSpore
    2.10 gives both features), and the overflow mode set in the environment.

    - A2 and later (``hq_dtype``): NMS on the device (its ``NMSLargeN`` kernel takes
      float32; its static path indexes in float16, so at most 2,048 boxes per call).
    - The Atlas training series (``classic``): NMS on the host; whole graphs through GE
      (jit level O2), MindSpore 2.10's default there.
    - Anything else (an inference chip, a chip MindSpore answers neither for): NMS on the
      host (correct everywhere, slower).

    The operator precision mode is MindSpore's own per-chip default unless
    ``runtime.precision_mode`` sets one (:func:`resolve_precision_mode`).
    """
    cube_fp32 = bool(hq_dtype)
    return ChipProfile(
        soc=soc or "unknown",
        cube_fp32=cube_fp32,
        float_status=float_status_register(bool(classic), bool(hq_dtype), overflow_mode),
        host_nms=not cube_fp32,
        nms_max_boxes=NMS_MAX_BOXES_FLOAT16_INDEX if cube_fp32 else NMS_MAX_BOXES,
        default_jit_level="O2" if (classic if jit_o2_default is None else jit_o2_default) else "O0",
    )


# How MindSpore 2.7-2.9 tell the chips apart: by the SoC's name, where 2.10 asks its SoC
# feature table (MSContext.ascend_soc_supports_feature, which 2.7-2.9 do not have). The names
# are each release's own: mindspore/amp.py (_ascend_910a_target, _ascend_910b_target) and
# nn/wrap/loss_scale.py; MsContext::GetJitLevel defaults "ascend910" to O2 (2.7.2's
# ms_context.cc; "ascend910" is the only SoC name in 2.8.0's and 2.9.0's libmindspore_core.so).
SOC_CLASSIC_BY_NAME = ("ascend910",)

SOC_A2_BY_NAME = {
    (2, 7): ("ascend910b", "ascend910_93"),
    (2, 8): ("ascend910b", "ascend910_93"),
    (2, 9): ("ascend910b", "ascend910_93", "ascend950"),
}

FIRST_SOC_FEATURE_TABLE = (2, 10)  # the first release that answers SoC feature queries


def soc_features(ctx: Any, version: str) -> tuple[str, bool, bool, bool]:
    """(SoC name, classic, A2, jit O2 default) as MindSpore ``version`` decides them for the
    chip its context ``ctx`` (``MSContext.get_instance()``) reports: from its SoC feature
    table from 2.10 on (:data:`SOC_CLASSIC_OVERFLOW`, :data:`SOC_A2`,
    :data:`SOC_JIT_O2_DEFAULT`), from the SoC's name before (:data:`SOC_A2_BY_NAME`)."""
    from msdet.engine.runtime.mindspore_compat import parse_version

    soc = ctx.get_ascend_soc_version()
    release = parse_version(version)[:2]
    if release >= FIRST_SOC_FEATURE_TABLE:
        query = ctx.ascend_soc_supports_feature  # mindspore>=2.10
        return (
            soc,
            bool(query(SOC_CLASSIC_OVERFLOW)),
            bool(query(SOC_A2)),
            bool(query(SOC_JIT_O2_DEFAULT)),
        )
    a2_names = SOC_A2_BY_NAME.get(release, SOC_A2_BY_NAME[max(SOC_A2_BY_NAME)])
    classic = soc in SOC_CLASSIC_BY_NAME
    return soc, classic, soc in a2_names, classic


def ascend_chip(ctx: Any = None, version: str | None = None) -> ChipProfile:
    """:func:`chip_profile` of the Ascend chip MindSpore runs on (after ``set_device``), as
    the installed MindSpore tells it (:func:`soc_features`); ``ctx`` and ``version`` default
    to MindSpore's own context and the installed release."""
    from msdet.engine.runtime.mindspore_compat import TESTED, installed_version

    if ctx is None:
        from mindspore._c_expression import MSContext

        ctx = MSContext.get_instance()
    soc, classic, a2, jit_o2 = soc_features(ctx, version or installed_version() or TESTED)
    return chip_profile(soc, classic, a2, os.environ.get(OVERFLOW_MODE_VAR), jit_o2)


def check_precision_mode(mode: str) -> str:
    """``runtime.precision_mode`` checked against ``auto`` and the modes CANN knows."""
    if mode not in PRECISION_MODES:
        raise ValueError(f"runtime.precision_mode must be one of {PRECISION_MODES}, got {mode!r}")
    return mode


def resolve_precision_mode(requested: Any, chip: ChipProfile) -> str | None:
    """The precision mode to set: None for ``auto`` (MindSpore chooses per chip: keep-dtype
    on A2 and later, ``allow_fp32_to_fp16`` on the Atlas training series, whose cube has no
    float32; setting keep-dtype explicitly on A2 would also turn float32 convolutions from
    HF32 to keep-dtype and stop MindSpore's per-operator switching), else the requested one
    (a keep-dtype request on a chip whose cube has no float32 is honoured, with a warning)."""
    mode = check_precision_mode(str(requested or DEFAULT_PRECISION_MODE))
    if mode == "auto":
        return None
    if mode == KEEP_DTYPE and not chip.cube_fp32:
        log.warning(
            "runtime.precision_mode=%s on %s, whose cube unit has no float32: float32 "
            "convolutions and matmuls will fail or run on the AI CPU (auto leaves "
            "MindSpore's allow_fp32_to_fp16 there)",
            mode,
            chip.soc,
        )
    return mode


def apply_precision_mode(ms: Any, mode: str | None) -> None:
    """Set the Ascend operator precision mode (None: leave MindSpore's default)."""
    if mode is not None:
        ms.device_context.ascend.op_precision.precision_mode(mode)


def precision_mode_in_effect() -> str:
    """The Ascend operator precision mode MindSpore will hand CANN (for reports); empty
    when MindSpore keeps its own per-chip default."""
    from mindspore._c_expression import AscendOpPrecisionConf

    return AscendOpPrecisionConf.get_instance().precision_mode()


@dataclass(frozen=True)
class Backend:
    """How MindSpore compiles and runs one kind of graph: the jit level msdet passes
    (``jit_level``), the backend that runs it (MindSpore's names: ``ms_backend``, kernel by
    kernel, or ``GE``, the whole graph sunk through Graph Engine), and the MindSpore source
    that decides it (``why``). ``whole_graph``: ms_backend compiles the whole graph (a
    rank-table launch forces jit level O2 on every graph)."""

    jit_level: str
    backend: str
    why: str
    whole_graph: bool = False

    @property
    def runs(self) -> str:
        """How the graph runs, in words: GE graph sink, or kernel by kernel."""
        if self.backend == GE:
            return "GE graph sink"
        return "ms_backend, whole graph" if self.whole_graph else "kernel by kernel"

    def describe(self) -> str:
        """``jit level O0, kernel by kernel``."""
        return f"jit level {self.jit_level}, {self.runs}"


GE, MS_BACKEND = "GE", "ms_backend"
# What decides the backend, per MindSpore 2.7.2-2.10.0 (read from the releases' Python sources
# and binaries; no card ran):
# - a graph of Model.train (graph mode) carries no backend: BackendManager::GetBackendType("")
#   asks MsContext::IsKByKExecutorMode, i.e. the global jit level; unset, GetJitLevel gives O2
#   (GE) on ascend910 and O0 elsewhere (engine.runtime.ascend.ChipProfile.default_jit_level);
# - a graph of mindspore.jit carries backend "" unless given one: BackendJitConfig::
#   ParseBackendJitConfig then picks GE on ascend910 whatever the jit level, ms_backend
#   elsewhere; backend="ms_backend" runs it kernel by kernel on every chip;
# - mindspore.data_sink passes its JitConfig's backend on: JitConfig(jit_level="O0"|"O1") adds
#   backend="ms_backend";
# - a rank-table launch (RANK_TABLE_FILE) makes GetJitLevel return O2 for every graph: GE for
#   graphs without a backend (Model.train), ms_backend's whole-graph executor for a graph
#   given backend="ms_backend".
# mindspore.jit refuses jit_level O2 in every release.
WHY_GLOBAL = "MsContext::GetJitLevel (the global jit level; unset: the SoC's default)"
WHY_JIT = 'mindspore.jit(backend="ms_backend"): BackendJitConfig::ParseBackendJitConfig'
WHY_RANK_TABLE = 'MsContext::GetJitLevel: "Set jit level to O2 for rank table startup method"'
JIT_LEVELS = ("O0", "O1", "O2")


def graph_backends(
    loop: str, chip: ChipProfile | None, configured: str | None, rank_table: bool = False
) -> dict[str, Backend]:
    """The jit level and backend of each kind of graph msdet compiles, by loop, chip and
    launch: ``train`` (the training step fed from the host), ``sink`` (the step over a data
    sink) and ``eval`` (the evaluation network and its NMS). ``chip`` None: not Ascend
    (MindSpore's CPU or GPU backend, kernel by kernel). ``configured``:
    ``runtime.jit_level`` (None: the chip's default under ``Model.train``, O0 under the jit
    loop).

    ``loop="model"`` (``Model.train``): every graph at the global jit level msdet sets (the
    configured one, else the chip's default: GE on the 910A, kernel by kernel elsewhere).
    ``loop="jit"``: every ``mindspore.jit`` graph and the data sink are given
    ``backend="ms_backend"``, so they run kernel by kernel on every chip, the 910A included
    (without it mindspore.jit sends the 910A's graphs to GE); O2 is refused there (mindspore.jit
    has no O2). A rank-table launch compiles every graph at O2 (see above)."""
    if configured is not None and str(configured) not in JIT_LEVELS:
        raise ValueError(
            f"runtime.jit_level must be one of {JIT_LEVELS} or null, got {configured!r}"
        )
    if loop == "jit":
        if configured == "O2":
            raise ValueError(
                "runtime.jit_level=O2 (GE's whole-graph sink) goes with runtime.loop=model: "
                "mindspore.jit compiles at O0 or O1 (GE is deprecated since MindSpore 2.9)"
            )
        level = configured or "O0"
        if chip is not None and rank_table:
            one = Backend(level, MS_BACKEND, WHY_RANK_TABLE, whole_graph=True)
        else:
            one = Backend(level, MS_BACKEND, WHY_JIT)
        return {"train": one, "sink": one, "eval": one}
    if chip is None:
        level = configured or "O0"
        one = Backend(level, MS_BACKEND, "not Ascend: MindSpore's own backend")
    elif rank_table:
        one = Backend("O2", GE, WHY_RANK_TABLE)
    else:
        level = configured or chip.default_jit_level
        one = Backend(level, GE if level == "O2" else MS_BACKEND, WHY_GLOBAL)
    return {"train": one, "sink": one, "eval": one}


def float_status_register(classic_soc: bool, a2_soc: bool, overflow_mode: str | None) -> bool:
    """Whether overflow must be read from the float-status register (as MindSpore's own
    loss-scale cell decides): always on the Atlas training series, on A2 only in
    saturation mode; elsewhere inf/NaN reach the gradients and ``all_finite`` sees them."""
    return classic_soc or (a2_soc and overflow_mode == "SATURATION_MODE")


def float_status_ops() -> tuple:
    """(clear, get) primitives of the Ascend float-status register, for
    ``engine.training.step.TrainStep(float_status=...)``; only where ``Runtime.float_status``."""
    from mindspore.ops.operations.math_ops import NPUClearFloatStatusV2, NPUGetFloatStatusV2

    return NPUClearFloatStatusV2(), NPUGetFloatStatusV2()


def device_nms_problem(
    max_boxes: int, num_classes: int = 80, seed: int = 0, settings: dict | None = None
) -> str | None:
    """Check ``NMSWithMask`` on this device before msdet relies on it: one image of
    ``max_boxes`` candidates through :class:`~msdet.ops.nms.BatchedNMS` on the device and
    through :class:`~msdet.ops.nms.HostNMS`; None when both keep the same detections, else
    why not (a failed compile or launch, or other detections), for one log line.
    ``settings``: the NMS's (conf_thresh, iou_thresh, max_det, class_agnostic), default
    YOLOX's evaluation settings."""
    import mindspore as ms
    import numpy as np

    from msdet.ops.nms import BatchedNMS, HostNMS, sample_predictions

    preds = ms.Tensor(sample_predictions(max_boxes, num_classes, seed))
    settings = {"conf_thresh": 0.01, "iou_thresh": 0.65, "max_det": 100, **(settings or {}),
                "pre_nms_topk": max_boxes}  # fmt: skip
    try:
        dets, counts = (t.asnumpy() for t in BatchedNMS(num_classes, **settings)(preds))
    except Exception as err:  # any failure to compile or run here means: not on this device
        first = (str(err).strip().splitlines() or [type(err).__name__])[0]
        return f"NMSWithMask failed on this device ({first[:200]})"
    host_dets, host_counts = HostNMS(num_classes, **settings)(preds)
    if not np.array_equal(counts, host_counts):
        return (
            f"NMSWithMask kept {int(counts.sum())} detections of {max_boxes} candidates where "
            f"the host keeps {int(host_counts.sum())}"
        )
    n = int(counts[0])
    if not np.allclose(dets[0, :n], host_dets[0, :n], rtol=1e-5, atol=1e-3):
        return f"NMSWithMask's detections differ from the host's on {max_boxes} candidates"
    return None


# device_nms_problem's answers in this process, by the evaluation's settings.
_NMS_PROBES: dict[tuple, str | None] = {}


def evaluation_candidates(pre_nms_topk: int, img_size: Any, strides=(8, 16, 32)) -> int:
    """How many candidates the evaluation's NMS gets per image: ``eval.pre_nms_topk``, or
    fewer where the input has fewer anchors (``ops.nms.Candidates``)."""
    h, w = (int(v) for v in img_size)
    return min(int(pre_nms_topk), sum((h // s) * (w // s) for s in strides))


def nms_on_host(rt: Any, eval_cfg: Any, num_classes: int, img_size: Any) -> bool:
    """Whether the evaluation's NMS runs on the host: where the chip's profile says so
    (``rt.host_nms``), else where ``NMSWithMask`` fails :func:`device_nms_problem` on first
    use, with the evaluation's own settings and candidate count
    (:func:`evaluation_candidates`). Probed once per process and settings; with several
    ranks the answer is agreed (one rank's failure sends every rank's NMS to the host), so
    that every rank's detections come from the same NMS."""
    if rt.host_nms or rt.device != "Ascend":
        return bool(rt.host_nms)
    candidates = evaluation_candidates(eval_cfg.pre_nms_topk, img_size)
    settings = {"conf_thresh": float(eval_cfg.conf_thresh), "iou_thresh": float(eval_cfg.nms_iou),
                "max_det": int(eval_cfg.max_det),
                "class_agnostic": bool(eval_cfg.class_agnostic)}  # fmt: skip
    key = (candidates, int(num_classes), *sorted(settings.items()))
    if key not in _NMS_PROBES:
        _NMS_PROBES[key] = device_nms_problem(candidates, int(num_classes), settings=settings)
        if _NMS_PROBES[key]:
            log.warning("%s: NMS runs on the host", _NMS_PROBES[key])
        else:
            log.info("NMSWithMask agrees with the host on %d candidates: NMS on the device",
                     candidates)  # fmt: skip
    failed = _NMS_PROBES[key] is not None
    if rt.distributed:
        from msdet.engine.runtime.distributed import any_rank

        failed = any_rank(failed)
    return failed
