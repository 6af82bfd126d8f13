"""The derivation of the MindSpore-to-CANN mapping from MindSpore's sources, on a small
source tree written here: names of primitives, GE adapters, input maps, aclnn dispatch."""

from __future__ import annotations

import os

from msdet.dev import ms_mapping

HEADER = """
constexpr auto kNameTopK = "TopK";
constexpr const char kSoftmax[] = "Softmax";
GVAR_DEF(PrimitivePtr, kPrimTopK, std::make_shared<Primitive>(kNameTopK));
GVAR_DEF(PrimitivePtr, kPrimNeg, std::make_shared<Primitive>("Neg"));
"""
ADAPTERS = """
// TopKV2
INPUT_MAP(TopKV2) = {{1, INPUT_DESC(x)}, {2, INPUT_DESC(k)}};
INPUT_ATTR_MAP(TopKV2) = {{kIndex3, ATTR_DESC(sorted, AnyTraits<bool>())}};
REG_ADPT_DESC(TopKV2, kNameTopK, ADPT_DESC(TopKV2))

// Neg
REG_ADPT_DESC(Neg, prim::kPrimNeg->name(), ADPT_DESC(Neg, NegInfer))
REG_ADPT_DESC(Unnamed, kSomethingElse, ADPT_DESC(Unnamed))
"""
YAML = """
neg:
  args:
    input:
      dtype: tensor
  dispatch:
    enable: True
    Ascend: NegAscend
top_k:
  class:
    name: TopK
"""


def source_tree(root):
    include = root / "include"
    include.mkdir()
    (include / "ops.h").write_text(HEADER)
    adapters = root / ms_mapping.ADAPTER_DIRS[1]
    adapters.mkdir(parents=True)
    (adapters / "nn_ops.cc").write_text(ADAPTERS)
    yaml_dir = root / "mindspore" / "ops" / "op_def" / "yaml"
    yaml_dir.mkdir(parents=True)
    (yaml_dir / "neg_op.yaml").write_text(YAML)
    return str(include)


def test_primitive_names_come_from_the_headers_constants_and_definitions(tmp_path):
    include = source_tree(tmp_path)
    consts = ms_mapping.string_constants([include])
    assert consts == {"kNameTopK": "TopK", "kSoftmax": "Softmax"}
    prims = ms_mapping.prim_defs([include], consts)
    assert prims == {"kPrimTopK": "TopK", "kPrimNeg": "Neg"}
    names = ['"Abs"', "prim::kPrimTopK->name()", "kPrimUnknown->name()", "ops::kSoftmax",
             "kNameFoo", "something"]  # fmt: skip
    assert [ms_mapping.resolve_name(n, consts, prims) for n in names] == [
        "Abs", "TopK", "Unknown", "Softmax", "Foo", None]  # fmt: skip


def test_ge_adapters_input_maps_and_dispatch_are_read_from_the_sources(tmp_path):
    include = source_tree(tmp_path)
    consts = ms_mapping.string_constants([include])
    prims = ms_mapping.prim_defs([include], consts)
    adapters = ms_mapping.ge_adapters(str(tmp_path), consts, prims)
    where = os.path.join(ms_mapping.ADAPTER_DIRS[1], "nn_ops.cc")
    assert adapters == {
        "TopK": {"train": "TopKV2", "infer": "TopKV2", "file": where, "reg": "TopKV2"},
        "Neg": {"train": "Neg", "infer": "NegInfer", "file": where, "reg": "Neg"},
    }  # an adapter whose MindSpore name cannot be resolved is left out
    assert ms_mapping.input_maps(str(tmp_path)) == {
        "TopKV2": {"inputs": {1: "x", 2: "k"}, "dyn_inputs": {}, "attr_inputs": {3: "sorted"}}
    }
    dispatch = ms_mapping.yaml_dispatch(str(tmp_path))
    assert dispatch["Neg"] == {"enable": True, "op": "neg", "ascend": "NegAscend",
                               "yaml": "mindspore/ops/op_def/yaml/neg_op.yaml"}  # fmt: skip
    assert dispatch["TopK"]["enable"] is False and dispatch["TopK"]["ascend"] is None
    assert ms_mapping.snake("BatchNorm") == "batch_norm"
