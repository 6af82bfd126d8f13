"""The IR listing: MindSpore's IR text read into primitives, their input dtypes, shapes and
scopes (a real dump: slow, in a process of its own)."""

from __future__ import annotations

import json
import os

import pytest

from msdet.tools.chip_check.ir import collect, parse_ir_file, prim_name, summarize
from tests.support import run_python


@pytest.mark.slow
def test_the_ir_listing_names_primitives_dtypes_and_scopes(tmp_path):
    stdout = run_python(["-m", "tests.tools.chip_check.ir_probe"], env={**os.environ}, timeout=300)
    rows = json.loads(stdout.strip().splitlines()[-1])
    by_prim = {r[0]: r for r in rows}
    assert {"Conv2D", "Cast", "TopK", "Reshape"} <= set(by_prim)
    assert by_prim["Conv2D"][1][:2] == ["float32", "float32"]
    assert by_prim["TopK"][1][0] == "float16" and by_prim["TopK"][2][0] == [2, 256]
    assert "conv" in by_prim["Conv2D"][4]


# Two compiler-pass files as MindSpore 2.10 writes them (a node, its abstract line, its scope).
VALIDATE_IR = """\
subgraph @1_construct_wrapper.1(%para1_x: <Tensor[Float32], (2, 3, 8, 8)>) {
  %0(CNode_1) = PrimFunc_Conv2D(%para1_x, %para2_w, I64(4)) {instance name: conv2d}
      : (<Tensor[Float32], (2, 3, 8, 8)>, <Ref[Tensor[Float32]], (4, 3, 3, 3)>, <Int64, NoShape>) -> (<Tensor[Float32], (2, 4, 6, 6)>)
      # Fullname with scope: (Default/conv-Conv2d/Conv2D-op1)
  %1(CNode_2) = PrimFunc_Cast(%0, I64(42))
      : (<Tensor[Float32], (2, 4, 6, 6)>, <Int64, NoShape>) -> (<Tensor[Float16], (2, 4, 6, 6)>)
      # Fullname with scope: (Default/Cast-op2)
  %2(CNode_3) = Load(%para2_w, U)
      : (<Ref[Tensor[Float32]], (4, 3, 3, 3)>, <UMonad, NoShape>) -> (<Tensor[Float32], (4, 3, 3, 3)>)
  %3(CNode_4) = PrimFunc_Cast(%1, I64(43))
      : (<Tensor[Float16], (2, 4, 6, 6)>, <Int64, NoShape>) -> (<Tensor[Float32], (2, 4, 6, 6)>)
      # Fullname with scope: (Default/Cast-op3)
  %4(CNode_5) = @2_sub_graph(%3)
      : (<Tensor[Float32], (2, 4, 6, 6)>) -> (<Tensor[Float32], (2, 4, 6, 6)>)
  Return(%4)
      : (<Tensor[Float32], (2, 4, 6, 6)>)
}
"""


def test_an_ir_file_is_read_into_primitives_with_their_input_dtypes_shapes_and_scopes(tmp_path):
    (tmp_path / "12_validate_0012.ir").write_text(VALIDATE_IR)
    (tmp_path / "13_later_pass_0013.ir").write_text(VALIDATE_IR.replace("Conv2D", "Later"))
    nodes = parse_ir_file(str(tmp_path / "12_validate_0012.ir"))
    # The call of a sub-graph is no primitive: not a node.
    assert [n["prim"] for n in nodes] == [
        "PrimFunc_Conv2D",
        "PrimFunc_Cast",
        "Load",
        "PrimFunc_Cast",
    ]
    assert nodes[0]["inputs"] == [("float32", [2, 3, 8, 8]), ("float32", [4, 3, 3, 3]),
                                  ("scalar:int64", None)]  # fmt: skip
    assert nodes[0]["outputs"] == [("float32", [2, 4, 6, 6])]
    assert nodes[0]["scope"] == "Default/conv-Conv2d/Conv2D-op1"
    assert nodes[2]["inputs"][1] == ("monad", None)
    assert [prim_name(n["prim"]) for n in nodes] == ["Conv2D", "Cast", "Load", "Cast"]
    assert prim_name("S_Prim_hyper_map") == "hyper_map" and prim_name("@2_sub_graph") is None
    # Only the validate pass counts; plumbing (Load) is left out.
    rows = collect(str(tmp_path))
    assert rows == [
        ("Cast", ["float16", "scalar:int64"], [[2, 4, 6, 6], None], 1, "Default/Cast-op3"),
        ("Cast", ["float32", "scalar:int64"], [[2, 4, 6, 6], None], 1, "Default/Cast-op2"),
        ("Conv2D", ["float32", "float32", "scalar:int64"], [[2, 3, 8, 8], [4, 3, 3, 3], None], 1,
         "Default/conv-Conv2d/Conv2D-op1"),
    ]  # fmt: skip
    assert summarize(rows) == {
        ("Cast", ("float16", "scalar:int64")): 1,
        ("Cast", ("float32", "scalar:int64")): 1,
        ("Conv2D", ("float32", "float32", "scalar:int64")): 1,
    }
