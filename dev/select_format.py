"""Best-effort emulation of CANN TBE ``op_select_format`` on a machine without CANN's
compiled parts, to get the dtype combinations of AI Core ops whose table entry has
``"dynamicFormat": {"flag": "true"}`` and no ``dtype`` lists (Conv2D, BNTrainingReduce,
Mul, Add, RealDiv, Select, ConcatD, ...).

How: the op's Python implementation (``opp/built-in/op_impl/ai_core/tbe/impl[/dynamic]/<opFile>.py``)
is imported with every ``tbe`` / ``te`` / ``tvm`` module replaced by a permissive stub,
except the platform queries, which are answered per chip from CANN's own data:
  * ``get_soc_spec``            <- ``<arch>-linux/data/platform_config/<SoC>.ini``
  * ``intrinsic_check_support`` <- the ini's ``[AICoreintrinsicDtypeMap]``
  * ``api_check_support("tbe.dsl.x", dtype)`` <- ``DSL_CHECK_SUPPORT_MAP`` parsed from
    ``python/site-packages/tbe/dsl/compute/util.py`` (static ops run op_select_format
    outside a compute context, so the non-"unify" map applies)
  * ``api_check_support("tik.x", dtype)`` <- ``ONLY_TIK_API_MAP`` / intrinsic map.
Then ``op_select_format(...)`` is called with representative tensors (4-D NCHW float16,
known and unknown shapes) and its JSON answer is parsed.

Limits: anything else the impl asks the stubs (e.g. tiling-related helpers, buildcfg,
shape_util) gets a dummy value; branches depending on those may differ from a real
compile. Treat the answer as "what this op's code lists for this chip", not a guarantee.
Output of a call: {"combos": [[in0_dtype, in1_dtype, ...], ...], "raw": {...}} or
{"error": "..."}.

The stubs themselves are ``dev.cann_stubs``.
"""

from __future__ import annotations

import ast
import configparser
import contextlib
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import inspect
import json
import os
import re
import sys

from msdet.dev.cann_stubs import REAL, REAL_MODULES, SPECIAL, StubFinder, StubModule

CHIP_INI = {  # representative SoC per table folder
    "ascend910": "Ascend910A.ini",
    "ascend910b": "Ascend910B2.ini",
    "ascend910_93": "Ascend910_9372.ini",
    "ascend310p": "Ascend310P3.ini",
    "ascend310b": "Ascend310B1.ini",
}


# --------------------------------------------------------------------------- platform


def _consts_from(path, names_re=r"^[A-Z][A-Z0-9_]*$"):
    """Module-level NAME = <literal or expression of earlier names> from a .py file."""
    ns = {}
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read())
    for node in tree.body:
        if (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
        ):
            name = node.targets[0].id
            if not re.match(names_re, name):
                continue
            # A constant of CANN's own source; one its earlier names cannot evaluate is skipped.
            with contextlib.suppress(Exception):
                ns[name] = eval(compile(ast.Expression(node.value), path, "eval"), {}, ns)
    return ns


class Platform:
    def __init__(self, cann_ver_dir, chip):
        self.chip = chip
        ini = None
        for arch in ("aarch64-linux", "x86_64-linux", "arm64-linux"):
            p = os.path.join(cann_ver_dir, arch, "data", "platform_config", CHIP_INI[chip])
            if os.path.exists(p):
                ini = p
                break
        if ini is None:
            raise FileNotFoundError(f"platform_config/{CHIP_INI[chip]} under {cann_ver_dir}")
        self.ini_path = ini
        cp = configparser.ConfigParser(strict=False, interpolation=None)
        cp.optionxform = str
        cp.read(ini)
        self.cp = cp
        self.flat = {}
        for sec in cp.sections():
            for k, v in cp.items(sec):
                self.flat.setdefault(k.lower(), v)
        self.intr = {}
        if cp.has_section("AICoreintrinsicDtypeMap"):
            for _, v in cp.items("AICoreintrinsicDtypeMap"):
                if "|" in v:
                    name, dts = v.split("|", 1)
                    self.intr[name.strip()] = [d.strip() for d in dts.split(",") if d.strip()]
        site = os.path.join(cann_ver_dir, "python", "site-packages")
        self.pconst = _consts_from(
            os.path.join(site, "tbe", "common", "platform", "platform_info.py")
        )
        util = os.path.join(site, "tbe", "dsl", "compute", "util.py")
        ns = dict(self.pconst)
        with open(util, encoding="utf-8") as f:
            tree = ast.parse(f.read())
        for node in tree.body:
            if (
                isinstance(node, ast.Assign)
                and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name)
            ):
                with contextlib.suppress(Exception):
                    ns[node.targets[0].id] = eval(
                        compile(ast.Expression(node.value), util, "eval"), {}, ns
                    )
        self.dsl_map = ns.get("DSL_CHECK_SUPPORT_MAP", {})
        self.dsl_same = ns.get("DSL_SAME_API_MAP", {})
        self.shisi = ns.get("ASCEND_SHISI", "smallhisi")
        tikmap = os.path.join(site, "tbe", "tik", "common", "tik_api_map.py")
        self.tik_map = (
            _consts_from(tikmap).get("ONLY_TIK_API_MAP", {}) if os.path.exists(tikmap) else {}
        )
        self.asked = set()

    # -- the API the impls call
    def get_soc_spec(self, key):
        self.asked.add(("get_soc_spec", key))
        v = self.cp.get("version", "SoC_version")
        k = str(key)
        table = {
            "SHORT_SOC_VERSION": self.cp.get("version", "Short_SoC_version"),
            "SOC_VERSION": v,
            "FULL_SOC_VERSION": v,
            "AICORE_TYPE": "AiCore",
            "CORE_NUM": self.flat.get("ai_core_cnt"),
            "CUBE_CORE_CNT": self.flat.get("cube_core_cnt", self.flat.get("ai_core_cnt")),
            "VECTOR_CORE_CNT": self.flat.get("vector_core_cnt"),
            "UB_SIZE": self.flat.get("ub_size"),
            "L1_SIZE": self.flat.get("l1_size"),
            "L2_SIZE": self.flat.get("l2_size"),
            "L0A_SIZE": self.flat.get("l0_a_size"),
            "L0B_SIZE": self.flat.get("l0_b_size"),
            "L0C_SIZE": self.flat.get("l0_c_size"),
            "CUBE_SIZE": "16,16,16",
            "ubblock_size": self.flat.get("ubblock_size", "32"),
            "Compiler_arch": self.flat.get("ccec_aic_version", ""),
            "CUBE_VECTOR_SPLIT": "1" if self.flat.get("cube_vector_combine") == "split" else "0",
            "CORE_TYPE_LIST": self.flat.get("core_type_list", "AICore"),
        }
        val = table.get(k, self.flat.get(k.lower(), ""))
        ints = {
            "CORE_NUM",
            "CUBE_CORE_CNT",
            "VECTOR_CORE_CNT",
            "UB_SIZE",
            "L1_SIZE",
            "L2_SIZE",
            "L0A_SIZE",
            "L0B_SIZE",
            "L0C_SIZE",
            "ubblock_size",
            "CUBE_VECTOR_SPLIT",
        }
        if k in ints:
            try:
                return int(val)
            except (TypeError, ValueError):
                return 0
        if k == "CUBE_SIZE":
            return [16, 16, 16]
        if k == "CORE_TYPE_LIST":
            return str(val).split(",")
        return val

    def intrinsic_check_support(self, intrinsic, dtype=""):
        self.asked.add(("intrinsic", intrinsic, dtype))
        lst = self.intr.get(intrinsic)
        if lst is None:
            return False
        return True if not dtype else dtype in lst

    def api_check_support(self, api, dtype=""):
        self.asked.add(("api", api, dtype))
        if api.startswith("tik."):
            instr = api[4:]
            soc = self.cp.get("version", "Short_SoC_version") + "AiCore"
            if instr in self.tik_map:
                d = self.tik_map[instr].get(soc)
                return d is not None and (dtype == "" or dtype in d)
            if instr.startswith("vec_"):
                instr = "v" + instr[4:]
            return self.intrinsic_check_support("Intrinsic_" + instr, dtype)
        if api.startswith("te.lang.cce.") or api.startswith("tbe.dsl."):
            name = api.split(".")[-1]
            name = self.dsl_same.get(name, name)
            sup = self.dsl_map.get(name)
            if sup is None:
                return False
            soc = self.cp.get("version", "Short_SoC_version")
            if soc in ("Hi3796CV300CS", "Hi3796CV300ES", "SD3403"):
                soc = self.shisi
            s = sup.get(soc, sup.get("AllSoc"))
            if s is None:
                return False
            return dtype in ("", None) or dtype in s
        return False

    def get_bit_len(self, dtype):
        m = re.search(r"(\d+)$", str(dtype))
        return int(m.group(1)) if m else (8 if dtype == "bool" else 32)

    def get_block_size(self):
        return 32

    def module(self, name):
        m = StubModule(name)
        m.__path__ = []
        for k, v in self.pconst.items():
            setattr(m, k, v)
        for f in (
            "get_soc_spec",
            "intrinsic_check_support",
            "api_check_support",
            "get_bit_len",
            "get_block_size",
        ):
            setattr(m, f, getattr(self, f))
        m.CUBE_MKN = {
            "float16": {"mac": [16, 16, 16]},
            "float32": {"mac": [16, 8, 16]},
            "int8": {"mac": [16, 32, 16]},
            "bfloat16": {"mac": [16, 16, 16]},
        }
        m.set_current_compile_soc_info = lambda *a, **k: "success"
        m.get_align_factor = lambda dt: (
            (32, 1) if dt in ("int8", "uint8") else ((16, 2) if "16" in dt else (8, 4))
        )
        return m


# --------------------------------------------------------------------------- driver


def _tensor(shape, dtype="float16", fmt="NCHW"):
    return {
        "shape": list(shape),
        "ori_shape": list(shape),
        "format": fmt,
        "ori_format": fmt,
        "dtype": dtype,
        "range": [[1, None] if s == -1 else [s, s] for s in shape],
    }


DEFAULT_SHAPES = {  # op -> list of input shapes (known-shape probe); outputs get shape[0]
    "Conv2D": [[8, 32, 40, 40], [64, 32, 3, 3], [64], None],
    "DepthwiseConv2D": [[8, 32, 40, 40], [3, 3, 32, 1], None, None],
    "BNTrainingReduce": [[8, 32, 40, 40]],
    "BNTrainingUpdate": [[8, 32, 40, 40], [32], [32], [32], [32], [32], [32]],
    "BNTrainingUpdateV2": [[8, 32, 40, 40], [32], [32], [32], [32]],
    "BNTrainingUpdateGrad": [[8, 32, 40, 40], [8, 32, 40, 40], [32], [32]],
    "BNTrainingReduceGrad": [[8, 32, 40, 40], [8, 32, 40, 40], [32], [32], [32], [32], [32]],
    "MatMulV2": [[64, 32], [32, 16], None, None],
    "BatchMatMul": [[8, 64, 32], [8, 32, 16], None],
    "BatchMatMulV2": [[8, 64, 32], [8, 32, 16], None, None],
}
DEFAULT_ATTRS = {
    "strides": [1, 1, 1, 1],
    "pads": [1, 1, 1, 1],
    "dilations": [1, 1, 1, 1],
    "groups": 1,
    "data_format": "NCHW",
    "offset_x": 0,
    "epsilon": 1e-5,
    "factor": 0.1,
    "axis": 1,
    "concat_dim": 1,
    "split_dim": 1,
    "num_split": 2,
    "size_splits": [1, 1],
    "N": 2,
    "ksize": [1, 1, 3, 3],
    "padding": "SAME",
    "multiples": [1, 1, 2, 2],
    "begin": [0, 0, 0, 0],
    "end": [1, 1, 1, 1],
    "offsets": [0, 0, 0, 0],
    "size": [1, 1, 1, 1],
    "adj_x1": False,
    "adj_x2": False,
    "transpose_x1": False,
    "transpose_x2": False,
}


class Emulator:
    def __init__(self, cann_ver_dir):
        self.ver = os.path.abspath(cann_ver_dir)
        self.impl_root = os.path.join(self.ver, "opp", "built-in", "op_impl", "ai_core", "tbe")
        if not os.path.isdir(os.path.join(self.impl_root, "impl")):
            raise FileNotFoundError(f"no impl/ under {self.impl_root}")

    def _setup(self, chip):
        plat = Platform(self.ver, chip)
        special = {
            n: plat.module(n)
            for n in (
                "tbe.common.platform",
                "tbe.common.platform.platform_info",
                "te.platform",
                "te.platform.cce_conf",
            )
        }
        SPECIAL.clear()
        SPECIAL.update(special)
        site = os.path.join(self.ver, "python", "site-packages")
        REAL.clear()
        for n, src in REAL_MODULES.items():
            f = os.path.join(site, *src.split(".")) + ".py"
            if os.path.exists(f):
                REAL[n] = f
        finder = StubFinder(
            {
                "tbe",
                "te",
                "tvm",
                "te_fusion",
                "topi",
                "decorator",
                "tbe_platform",
                "op_test_frame",
                "register",
                "auto_tune",
                "schedule_search",
            },
            special,
        )
        saved = {
            k: v
            for k, v in sys.modules.items()
            if k.split(".")[0] in ("impl", "tbe", "te", "tvm", "te_fusion", "topi", "decorator")
        }
        for k in saved:
            del sys.modules[k]
        sys.meta_path.insert(0, finder)
        sys.path.insert(0, self.impl_root)
        return plat, finder, saved

    def _teardown(self, finder, saved):
        sys.meta_path.remove(finder)
        sys.path.remove(self.impl_root)
        for k in list(sys.modules):
            if k.split(".")[0] in ("impl", "tbe", "te", "tvm", "te_fusion", "topi", "decorator"):
                del sys.modules[k]
        sys.modules.update(saved)

    _state = None  # (chip, plat, finder, saved): kept while consecutive calls use one chip

    def close(self):
        if self._state:
            self._teardown(self._state[2], self._state[3])
            self._state = None

    def run(self, chip, op, op_file, op_info, dtype="float16"):
        if not self._state or self._state[0] != chip:
            self.close()
            self._state = (chip, *self._setup(chip))
        plat = self._state[1]
        if True:
            mod = None
            errs = []
            for modname in (f"impl.dynamic.{op_file}", f"impl.{op_file}"):
                try:
                    mod = importlib.import_module(modname)
                    if hasattr(mod, "op_select_format"):
                        break
                    mod = None
                except Exception as e:  # noqa: BLE001
                    errs.append(f"{modname}: {type(e).__name__}: {e}")
            if mod is None:
                return {"error": "; ".join(errs) or "no op_select_format"}
            fn = mod.op_select_format
            return self._call(fn, op, op_info, dtype, plat)

    def _call(self, fn, op, op_info, dtype, plat):
        n_in = len([k for k in op_info if re.fullmatch(r"input\d+", k)])
        n_out = len([k for k in op_info if re.fullmatch(r"output\d+", k)])
        shapes = DEFAULT_SHAPES.get(op, [[8, 32, 40, 40]] * n_in)
        results, errors = [], []
        for unknown in (False, True):
            args, kwargs = [], {}
            params = list(inspect.signature(fn).parameters.values())
            tens = []
            for i in range(n_in):
                shp = shapes[i] if i < len(shapes) else [8, 32, 40, 40]
                if shp is None:
                    tens.append(None)
                    continue
                if unknown:
                    shp = [-1] * len(shp)
                tens.append(_tensor(shp, dtype, "NCHW" if len(shp) == 4 else "ND"))
            out_shape = shapes[0] if shapes and shapes[0] else [8, 32, 40, 40]
            if unknown:
                out_shape = [-1] * len(out_shape)
            outs = [
                _tensor(out_shape, dtype, "NCHW" if len(out_shape) == 4 else "ND")
                for _ in range(n_out)
            ]
            pos = 0
            io_vals = tens + outs
            for p in params:
                if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
                    continue
                if p.name == "kernel_name":
                    continue
                if pos < len(io_vals):
                    v = io_vals[pos]
                    pos += 1
                    key = f"input{pos - 1}" if pos - 1 < n_in else f"output{pos - 1 - n_in}"
                    ptype = (op_info.get(key) or {}).get("paramType")
                    if ptype == "dynamic" and v is not None:
                        v = [v, v]
                    args.append(v)
                    continue
                if p.default is not inspect.Parameter.empty:
                    continue
                a = op_info.get(f"attr_{p.name}", {})
                if p.name in DEFAULT_ATTRS:
                    args.append(DEFAULT_ATTRS[p.name])
                elif "defaultValue" in a:
                    args.append(_parse_default(a))
                else:
                    args.append(_guess(a.get("type")))
            try:
                res = fn(*args, **kwargs)
                if isinstance(res, str):
                    res = json.loads(res)
                results.append(res)
            except Exception as e:  # noqa: BLE001
                errors.append(
                    f"{'unknown' if unknown else 'known'} shape: {type(e).__name__}: {str(e)[:200]}"
                )
        combos = []
        for res in results:
            ins = [res.get(f"input{i}") for i in range(n_in)]
            lists = [
                [d.strip() for d in (x or {}).get("dtype", "").split(",") if d.strip()]
                if x
                else None
                for x in ins
            ]
            n = max((len(values) for values in lists if values), default=0)
            for k in range(n):
                picked = [values[k] if values and k < len(values) else None for values in lists]
                c = ["float32" if d == "float" else d for d in picked]
                if c not in combos:
                    combos.append(c)
        out = {"combos": combos}
        if errors:
            out["errors"] = errors
        if not results:
            out = {"error": "; ".join(errors)}
        out["soc"] = os.path.basename(plat.ini_path)
        return out


def _parse_default(a):
    t, v = a.get("type"), a.get("defaultValue")
    try:
        if t in ("int",):
            return int(v)
        if t in ("float",):
            return float(v)
        if t in ("bool",):
            return str(v).lower() == "true"
        if t and t.startswith("list"):
            return json.loads(v)
    except Exception:  # noqa: BLE001
        pass
    return v


def _guess(t):
    return {
        "int": 1,
        "float": 1.0,
        "bool": False,
        "str": "NCHW",
        "listInt": [1, 1, 1, 1],
        "listFloat": [1.0],
        "type": 1,
    }.get(t)
