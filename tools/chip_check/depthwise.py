"""The depthwise rewrite of MindSpore's older Ascend backends, modelled for the chip check.

Older MindSpore Ascend backends ran three passes (``Conv2DUnifyMindIR``,
``Conv2DBackpropInputUnifyMindIR``, ``Conv2DBackpropFilterUnifyMindIR``; source
``mindspore/ccsrc/plugin/device/ascend/optimizer/mindir/conv2d_unify_mindir.cc``) that turn a
depthwise convolution, a ``Conv2D`` whose ``group`` is not 1 and equals its input and output
channels (NCHW), into CANN's depthwise operators:

- ``Conv2D(x, w)`` -> ``DepthwiseConv2dNative(x, Transpose(w, (1, 0, 2, 3)))``;
- ``Conv2DBackpropInput(dout, w, input_sizes)`` -> ``DepthwiseConv2dNativeBackpropInput(
  input_sizes, Transpose(w, (1, 0, 2, 3)), dout)``;
- ``Conv2DBackpropFilter(dout, x, filter_sizes)`` -> ``Transpose(
  DepthwiseConv2dNativeBackpropFilter(x, filter_sizes with dims 0 and 1 swapped, dout),
  (1, 0, 2, 3))``.

MindSpore 2.7.2, 2.8.0, 2.9.0 and 2.10.0 carry none of them: their Ascend backend libraries
hold none of the passes' names, where the control ``BatchNormGradUnifyMindIR`` (a pass of the
same family, same folder in the old source) is found in each, 41 times. There a depthwise
convolution reaches Ascend as a grouped ``Conv2D`` (GE's ``Conv2D`` with ``groups``, kernel by
kernel ``aclnnConvolution``). :func:`rewrite_in_backend` reads the installed MindSpore's
libraries the same way; :func:`rewrite_node` rewrites one node of :mod:`.ir`'s parsed IR as
the passes do. The chip check applies it with ``--depthwise-rewrite on``, or ``auto`` where
the installed backend carries the passes.

What the rewritten operators become on Ascend is the mapping's: MindSpore's GE adapters
(``nn_calculation_ops_declare.cc``, 2.7 source) emit ``DepthwiseConv2D``,
``DepthwiseConv2DBackpropInputD`` and ``DepthwiseConv2DBackpropFilterD`` (the size a constant
attribute); 2.10's adapter library instantiates ``OpAdapter`` for those three only, where it
does for both ``Conv2DBackpropInput`` and ``Conv2DBackpropInputD``. MindSpore's Ascend VM op
adaptation (``reg_ascend_vm_op_adaptation_info.h``, 2.7) names the non-D operators (float16
only in CANN 8.1.RC1's tables, on every chip) only for a size that is not a constant, which
the rewrite never builds.
"""

from __future__ import annotations

import functools
import glob
import mmap
import os
import re
from dataclasses import dataclass

from msdet.tools.chip_check.ir import cell_path, prim_name

SETTINGS = ("auto", "on", "off")
# The passes' class names and their source file's name, as they appear among a library's
# strings (the class names also inside mangled symbols).
PASS_NAMES = ("Conv2DUnifyMindIR", "Conv2DBackpropInputUnifyMindIR",
              "Conv2DBackpropFilterUnifyMindIR", "conv2d_unify_mindir")  # fmt: skip
# A pass of the same family every MindSpore 2.x Ascend backend carries: found, it shows the
# libraries were read and hold such names.
CONTROL_NAMES = ("BatchNormGradUnifyMindIR", "bn_grad_unify_mindir")
# MindSpore's Ascend backend libraries, relative to the package's lib folder.
LIBRARIES = ("plugin/libmindspore_ascend.so*", "libmindspore_ge_backend.so",
             "libmindspore_backend_common.so", "plugin/ascend/*.so")  # fmt: skip
# The rewritten primitives -> (the primitive they replace, which of their inputs is its
# first): the inputs are the same tensors, so their values are measured on the original.
MEASURED_AS = {
    "DepthwiseConv2dNative": ("Conv2D", 0),
    "DepthwiseConv2dNativeBackpropInput": ("Conv2DBackpropInput", 2),
    "DepthwiseConv2dNativeBackpropFilter": ("Conv2DBackpropFilter", 2),
}
PERM = "tuple[scalar:int64*4]"  # the Transposes' (1, 0, 2, 3), as :mod:`.ir` writes a tuple
PERM_SHAPE = "TupleShape(NoShape, NoShape, NoShape, NoShape)"


@dataclass(frozen=True)
class BackendScan:
    """What the installed MindSpore's Ascend backend libraries say of the depthwise passes."""

    lib_dir: str
    version: str
    libraries: tuple[str, ...]  # relative to lib_dir
    found: dict  # pass name -> occurrences, over all libraries
    control: int  # occurrences of CONTROL_NAMES

    @property
    def present(self) -> bool:
        """Whether any of the passes' names is there."""
        return any(self.found.values())


def default_lib_dir() -> str:
    """The installed MindSpore's ``lib`` folder (found, not imported)."""
    import importlib.util

    spec = importlib.util.find_spec("mindspore")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            "no MindSpore installed: --depthwise-rewrite auto reads its Ascend backend; "
            "say on or off instead"
        )
    return os.path.join(list(spec.submodule_search_locations)[0], "lib")


def _version(lib_dir: str) -> str:
    """The MindSpore version of a lib folder, from its package's version.py ('?' without)."""
    path = os.path.join(os.path.dirname(lib_dir), "version.py")
    if not os.path.exists(path):
        return "?"
    with open(path, encoding="utf-8") as f:
        m = re.search(r"__version__\s*=\s*['\"]([^'\"]+)", f.read())
    return m.group(1) if m else "?"


@functools.lru_cache(maxsize=8)
def scan_backend(mindspore_lib_dir: str | None = None) -> BackendScan:
    """Count the passes' and the control's names in the Ascend backend libraries
    (:data:`LIBRARIES`) of MindSpore's ``lib`` folder (default: the installed one's); one
    pass over each file, cached per folder."""
    lib_dir = os.path.abspath(mindspore_lib_dir or default_lib_dir())
    files = sorted({path for pattern in LIBRARIES
                    for path in glob.glob(os.path.join(lib_dir, pattern))})  # fmt: skip
    names = (*PASS_NAMES, *CONTROL_NAMES)
    pattern = re.compile(b"|".join(re.escape(n.encode()) for n in names))
    counts = dict.fromkeys(names, 0)
    for path in files:
        if os.path.getsize(path) == 0:
            continue
        with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
            for match in pattern.finditer(data):
                counts[match.group().decode()] += 1
    return BackendScan(
        lib_dir,
        _version(lib_dir),
        tuple(os.path.relpath(p, lib_dir) for p in files),
        {n: counts[n] for n in PASS_NAMES},
        sum(counts[n] for n in CONTROL_NAMES),
    )


def rewrite_in_backend(mindspore_lib_dir: str | None = None) -> bool:
    """Whether the installed MindSpore's (or ``mindspore_lib_dir``'s) Ascend backend carries
    the depthwise passes; an error when the control is not found either (the libraries were
    not there or not readable: absence would prove nothing)."""
    scan = scan_backend(mindspore_lib_dir)
    if not scan.control:
        raise RuntimeError(
            f"{scan.lib_dir}: none of MindSpore's Ascend backend libraries "
            f"({', '.join(LIBRARIES)}; {len(scan.libraries)} found) holds "
            f"{' or '.join(CONTROL_NAMES)}: cannot tell whether it rewrites depthwise "
            "convolutions; say --depthwise-rewrite on or off"
        )
    return scan.present


def decide(setting: str, mindspore_lib_dir: str | None = None) -> tuple[bool, str]:
    """(whether the chip check applies the rewrite, why) for ``--depthwise-rewrite``
    ``setting``."""
    if setting not in SETTINGS:
        raise ValueError(f"--depthwise-rewrite: {setting!r} is not one of {', '.join(SETTINGS)}")
    if setting == "on":
        return True, (
            "on (--depthwise-rewrite on): depthwise convolutions judged as the "
            "Conv2DUnifyMindIR passes of older MindSpore Ascend backends rewrite them"
        )
    if setting == "off":
        return False, "off (--depthwise-rewrite off): depthwise convolutions judged as Conv2D"
    present = rewrite_in_backend(mindspore_lib_dir)
    scan = scan_backend(mindspore_lib_dir)
    where = (f"the strings of its {len(scan.libraries)} Ascend backend libraries, where the "
             f"control {' / '.join(CONTROL_NAMES)} is found {scan.control} times")  # fmt: skip
    if present:
        found = ", ".join(f"{n} x{c}" for n, c in scan.found.items() if c)
        why = f"on (auto): in MindSpore {scan.version}'s Ascend backend ({found} among {where})"
        return True, why
    return False, (
        f"off (auto): not in MindSpore {scan.version}'s Ascend backend (no "
        f"{', '.join(PASS_NAMES)} among {where}): depthwise convolutions reach Ascend as "
        "grouped Conv2D"
    )


def _int_attr(node: dict, name: str) -> int | None:
    m = re.fullmatch(r"I(?:64|32)\((-?\d+)\)", (node.get("attrs") or {}).get(name, ""))
    return int(m.group(1)) if m else None


def _shape(item) -> list[int] | None:
    shape = item[1] if item else None
    return shape if isinstance(shape, list) and len(shape) == 4 else None


def _swapped(shape: list[int]) -> list[int]:
    return [shape[1], shape[0], *shape[2:]]


def _scoped(scope: str, prim: str) -> str:
    """The original operator's scope with this primitive's name in its last part (MindSpore
    gives the new nodes the convolution's scope)."""
    last = scope.rsplit("/", 1)[-1]
    number = last.rsplit("-", 1)[1] if "-" in last else "op0"
    cells = cell_path(scope)
    return f"{cells}/{prim}-{number}" if cells else f"{prim}-{number}"


def _node(prim: str, inputs: list, outputs: list, scope: str) -> dict:
    return {"prim": prim, "inputs": inputs, "outputs": outputs, "scope": _scoped(scope, prim),
            "attrs": {}}  # fmt: skip


def _transpose(item: tuple, scope: str) -> dict:
    """The rewrite's Transpose of a 4-D tensor, perm (1, 0, 2, 3)."""
    dtype, shape = item
    return _node("Transpose", [item, (PERM, PERM_SHAPE)], [(dtype, _swapped(shape))], scope)


def is_depthwise(node: dict) -> bool:
    """The passes' condition: ``group`` is not 1 and equals the convolution's input and output
    channels (for the gradients: the forward convolution's), NCHW, 4-D."""
    name = prim_name(node["prim"])
    ins, outs = node["inputs"], node["outputs"]
    group = _int_attr(node, "group")
    fmt = (node.get("attrs") or {}).get("format", '"NCHW"').strip('"')
    if group in (None, 1) or fmt != "NCHW" or not outs:
        return False
    if name == "Conv2D" and len(ins) >= 2:
        x, y = _shape(ins[0]), _shape(outs[0])
    elif name == "Conv2DBackpropInput" and len(ins) >= 2:
        x, y = _shape(outs[0]), _shape(ins[0])
    elif name == "Conv2DBackpropFilter" and len(ins) == 3:
        x, y = _shape(ins[1]), _shape(ins[0])
    else:
        return False
    return x is not None and y is not None and group == x[1] == y[1]


def rewrite_node(node: dict) -> list[dict]:
    """``node`` (:func:`.ir.parse_ir_file`'s) as the depthwise passes leave it: the nodes it
    becomes, with their inputs' and outputs' dtypes and shapes, in the order MindSpore's
    passes give them; ``[node]`` when it is not a depthwise convolution."""
    if not is_depthwise(node):
        return [node]
    name, scope = prim_name(node["prim"]), node["scope"]
    ins, outs = node["inputs"], node["outputs"]
    if name == "Conv2D":
        weights = _transpose(ins[1], scope)
        conv = _node("DepthwiseConv2dNative", [ins[0], weights["outputs"][0]], outs, scope)
        return [weights, conv]
    if name == "Conv2DBackpropInput":
        weights = _transpose(ins[1], scope)
        sizes = ins[2:3]  # a constant input; in PyNative it may be an attribute instead
        grad = _node("DepthwiseConv2dNativeBackpropInput",
                     [*sizes, weights["outputs"][0], ins[0]], outs, scope)  # fmt: skip
        return [weights, grad]
    dtype, shape = outs[0]
    grad = _node("DepthwiseConv2dNativeBackpropFilter", [ins[1], ins[2], ins[0]],
                 [(dtype, _swapped(shape))], scope)  # fmt: skip
    return [grad, _transpose(grad["outputs"][0], scope)]


def measured_as(prim: str, shapes: list) -> tuple[str, object]:
    """(the primitive whose measured input values a row of ``prim`` takes, its first input's
    shape): a rewritten operator's are its original convolution's."""
    if prim not in MEASURED_AS:
        return prim, shapes[0] if shapes else None
    original, first = MEASURED_AS[prim]
    return original, shapes[first] if len(shapes) > first else None


def way_out(dtypes: list[str]) -> str:
    """What avoids a failing rewritten operator, said after its verdict's reason."""
    ways = ["model.depthwise=false (plain convolutions: another model)"]
    if "float32" in dtypes:
        ways.append("runtime.amp=O2 (float16 convolutions, msdet's default on Ascend)")
    return f"; as Conv2DUnifyMindIR rewrites a depthwise convolution: {' or '.join(ways)} avoids it"
