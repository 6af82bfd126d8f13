"""op_select_format emulated on a CANN tree without its compiled parts: the platform's
answers per chip from its own files, and an operator's dtype list as its Python code gives
it for each chip (a small CANN tree written here)."""

from __future__ import annotations

import sys

from msdet.dev.select_format import Emulator, Platform

INI = """[version]
SoC_version={soc}
Short_SoC_version={short}
[SoCInfo]
ai_core_cnt={cores}
[AICoreintrinsicDtypeMap]
1=Intrinsic_vadd|float16,float32
2=Intrinsic_vexp|float16
"""
# CANN's tbe.dsl support map: vadd in float32 everywhere but the 910A.
UTIL = """ASCEND_910 = "Ascend910"
DSL_CHECK_SUPPORT_MAP = {"vadd": {"AllSoc": ("float16", "float32"), ASCEND_910: ("float16",)}}
"""
# An operator whose dtypes depend on the chip, as CANN's op_select_format code does.
IMPL = """import json
from tbe.common.platform import api_check_support, get_soc_spec
from tbe.common.utils import para_check


@para_check.check_op_params(para_check.REQUIRED_INPUT)
def helper():
    pass


def op_select_format(x, y, z, kernel_name="my_add"):
    dtypes = ["float16"]
    if api_check_support("tbe.dsl.vadd", "float32"):
        dtypes.append("float32")
    if get_soc_spec("SHORT_SOC_VERSION") == "Ascend910":
        dtypes.append("int32")
    d = ",".join(dtypes)
    return json.dumps({"input0": {"name": "x", "dtype": d}, "input1": {"name": "y", "dtype": d},
                       "output0": {"name": "z", "dtype": d}})
"""


def cann_tree(root):
    configs = root / "x86_64-linux" / "data" / "platform_config"
    configs.mkdir(parents=True)
    (configs / "Ascend910A.ini").write_text(
        INI.format(soc="Ascend910A", short="Ascend910", cores=32)
    )
    (configs / "Ascend910B2.ini").write_text(
        INI.format(soc="Ascend910B2", short="Ascend910B", cores=24)
    )
    site = root / "python" / "site-packages" / "tbe"
    (site / "common" / "platform").mkdir(parents=True)
    (site / "common" / "platform" / "platform_info.py").write_text('ASCEND_910 = "Ascend910"\n')
    (site / "dsl" / "compute").mkdir(parents=True)
    (site / "dsl" / "compute" / "util.py").write_text(UTIL)
    impl = root / "opp" / "built-in" / "op_impl" / "ai_core" / "tbe" / "impl"
    impl.mkdir(parents=True)
    (impl / "my_add.py").write_text(IMPL)


def test_the_platform_answers_from_the_chips_own_files(tmp_path):
    cann_tree(tmp_path)
    a910 = Platform(str(tmp_path), "ascend910")
    assert a910.get_soc_spec("CORE_NUM") == 32 and a910.get_soc_spec("SOC_VERSION") == "Ascend910A"
    assert a910.get_soc_spec("CUBE_SIZE") == [16, 16, 16]
    assert a910.intrinsic_check_support("Intrinsic_vadd", "float32")
    assert not a910.intrinsic_check_support("Intrinsic_vexp", "float32")
    assert a910.api_check_support("tik.vec_add", "float32")  # through the intrinsic map
    assert not a910.api_check_support("tbe.dsl.vadd", "float32")
    assert Platform(str(tmp_path), "ascend910b").api_check_support("tbe.dsl.vadd", "float32")
    assert a910.get_bit_len("float16") == 16 and a910.get_bit_len("bool") == 8


def test_an_operators_dtypes_per_chip_from_its_own_select_format_code(tmp_path):
    cann_tree(tmp_path)
    emulator = Emulator(str(tmp_path))
    op_info = {"input0": {"paramType": "required"}, "input1": {"paramType": "required"},
               "output0": {"paramType": "required"}}  # fmt: skip
    try:
        on_910a = emulator.run("ascend910", "MyAdd", "my_add", op_info)
        on_910b = emulator.run("ascend910b", "MyAdd", "my_add", op_info)
    finally:
        emulator.close()
    assert on_910a == {"combos": [["float16", "float16"], ["int32", "int32"]],
                       "soc": "Ascend910A.ini"}  # fmt: skip
    assert on_910b == {"combos": [["float16", "float16"], ["float32", "float32"]],
                       "soc": "Ascend910B2.ini"}  # fmt: skip
    assert "impl" not in {m.split(".")[0] for m in sys.modules}  # the stubs are gone
