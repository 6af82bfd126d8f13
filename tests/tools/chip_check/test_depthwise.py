"""The depthwise rewrite of older MindSpore Ascend backends, modelled by the chip check: whether
the installed backend carries it, the IR nodes it turns a depthwise convolution into, their
verdicts on the 910A and the 910B, and the chip check's option and report."""

from __future__ import annotations

import importlib.metadata
import json

import pytest

from msdet.tools.chip_check import __main__ as chip_check
from msdet.tools.chip_check import depthwise, graphs
from msdet.tools.chip_check.cann_tables import load_tables
from msdet.tools.chip_check.ir import Row, collect, parse_ir_file
from msdet.tools.chip_check.mapping import load_mapping
from msdet.tools.chip_check.values import value_key
from msdet.tools.chip_check.verdict import FAILING, judge

TABLES, MAPPING = load_tables(), load_mapping()

# The convolutions of a MindSpore 2.10 validate dump (CPU, graph mode) of the weight gradients
# of x -> pw (1x1, group 1) -> dw (3x3, group 8 = channels: depthwise) -> gc (3x3, group 2:
# grouped, not depthwise), 8 channels, a batch of 2 at 6x6; the cnode attributes left out.
CONVOLUTIONS = """\
subgraph @1_construct_wrapper.1() {
  %1(equiv_7_output) = Conv2D(%para1_x, %0) {instance name: conv2d} primitive_attrs: {kernel_size: (1, 1), mode: I64(1), out_channel: I64(8), input_names: [x, w], pad: (0, 0, 0, 0), pad_mode: I64(1), format: "NCHW", pad_list: (0, 0, 0, 0), groups: I64(1), stride: (1, 1, 1, 1), group: I64(1), dilation: (1, 1, 1, 1), output_names: [output]}
      : (<Tensor[Float32], (2, 8, 6, 6)>, <Tensor[Float32], (8, 8, 1, 1)>) -> (<Tensor[Float32], (2, 8, 6, 6)>)
      # Fullname with scope: (Default/n-N/pw-Conv2d/Conv2D-op0)
  %3(equiv_4_output) = Conv2D(%1, %2) {instance name: conv2d} primitive_attrs: {kernel_size: (3, 3), mode: I64(1), out_channel: I64(8), input_names: [x, w], pad: (1, 1, 1, 1), pad_mode: I64(0), format: "NCHW", pad_list: (1, 1, 1, 1), groups: I64(8), stride: (1, 1, 1, 1), group: I64(8), dilation: (1, 1, 1, 1), output_names: [output]}
      : (<Tensor[Float32], (2, 8, 6, 6)>, <Tensor[Float32], (8, 1, 3, 3)>) -> (<Tensor[Float32], (2, 8, 6, 6)>)
      # Fullname with scope: (Default/n-N/dw-Conv2d/Conv2D-op0)
  %5(equiv_2_output) = Conv2D(%3, %4) {instance name: conv2d} primitive_attrs: {kernel_size: (3, 3), mode: I64(1), out_channel: I64(8), input_names: [x, w], pad: (1, 1, 1, 1), pad_mode: I64(0), format: "NCHW", pad_list: (1, 1, 1, 1), groups: I64(2), stride: (1, 1, 1, 1), group: I64(2), dilation: (1, 1, 1, 1), output_names: [output]}
      : (<Tensor[Float32], (2, 8, 6, 6)>, <Tensor[Float32], (8, 4, 3, 3)>) -> (<Tensor[Float32], (2, 8, 6, 6)>)
      # Fullname with scope: (Default/n-N/gc-Conv2d/Conv2D-op0)
  %9(CNode_179) = Conv2DBackpropInput(%8, %4, (I64(2), I64(8), I64(6), I64(6))) primitive_attrs: {kernel_size: (3, 3), mode: I64(1), out_channel: I64(8), input_names: (out_backprop, filter, input_sizes), pad: (1, 1, 1, 1), pad_mode: I64(0), format: "NCHW", pad_list: (1, 1, 1, 1), groups: I64(2), stride: (1, 1, 1, 1), group: I64(2), dilation: (1, 1, 1, 1), data_format: "NCHW", output_names: (output)}
      : (<Tensor[Float32], (2, 8, 6, 6)>, <Tensor[Float32], (8, 4, 3, 3)>, <Tuple[Int64*4], TupleShape(NoShape, NoShape, NoShape, NoShape), elements_use_flags={[const vector]{1, 1, 1, 1}}>) -> (<Tensor[Float32], (2, 8, 6, 6)>)
      # Fullname with scope: (Gradients/Default/n-N/gc-Conv2d/Grad_Conv2D/Conv2DBackpropInput-op0)
  %10(CNode_180) = Conv2DBackpropFilter(%9, %1, (I64(8), I64(1), I64(3), I64(3))) primitive_attrs: {kernel_size: (3, 3), mode: I64(1), out_channel: I64(8), input_names: (out_backprop, input, filter_sizes), pad: (1, 1, 1, 1), pad_mode: I64(0), format: "NCHW", pad_list: (1, 1, 1, 1), groups: I64(8), stride: (1, 1, 1, 1), group: I64(8), dilation: (1, 1, 1, 1), data_format: "NCHW", output_names: (output)}
      : (<Tensor[Float32], (2, 8, 6, 6)>, <Tensor[Float32], (2, 8, 6, 6)>, <Tuple[Int64*4], TupleShape(NoShape, NoShape, NoShape, NoShape), elements_use_flags={[const vector]{1, 1, 1, 1}}>) -> (<Tensor[Float32], (8, 1, 3, 3)>)
      # Fullname with scope: (Gradients/Default/n-N/dw-Conv2d/Grad_Conv2D/Conv2DBackpropFilter-op0)
  %11(CNode_181) = Conv2DBackpropFilter(%8, %3, (I64(8), I64(4), I64(3), I64(3))) primitive_attrs: {kernel_size: (3, 3), mode: I64(1), out_channel: I64(8), input_names: (out_backprop, input, filter_sizes), pad: (1, 1, 1, 1), pad_mode: I64(0), format: "NCHW", pad_list: (1, 1, 1, 1), groups: I64(2), stride: (1, 1, 1, 1), group: I64(2), dilation: (1, 1, 1, 1), data_format: "NCHW", output_names: (output)}
      : (<Tensor[Float32], (2, 8, 6, 6)>, <Tensor[Float32], (2, 8, 6, 6)>, <Tuple[Int64*4], TupleShape(NoShape, NoShape, NoShape, NoShape), elements_use_flags={[const vector]{1, 1, 1, 1}}>) -> (<Tensor[Float32], (8, 4, 3, 3)>)
      # Fullname with scope: (Gradients/Default/n-N/gc-Conv2d/Grad_Conv2D/Conv2DBackpropFilter-op0)
  %12(CNode_182) = Conv2DBackpropInput(%9, %2, (I64(2), I64(8), I64(6), I64(6))) primitive_attrs: {kernel_size: (3, 3), mode: I64(1), out_channel: I64(8), input_names: (out_backprop, filter, input_sizes), pad: (1, 1, 1, 1), pad_mode: I64(0), format: "NCHW", pad_list: (1, 1, 1, 1), groups: I64(8), stride: (1, 1, 1, 1), group: I64(8), dilation: (1, 1, 1, 1), data_format: "NCHW", output_names: (output)}
      : (<Tensor[Float32], (2, 8, 6, 6)>, <Tensor[Float32], (8, 1, 3, 3)>, <Tuple[Int64*4], TupleShape(NoShape, NoShape, NoShape, NoShape), elements_use_flags={[const vector]{1, 1, 1, 1}}>) -> (<Tensor[Float32], (2, 8, 6, 6)>)
      # Fullname with scope: (Gradients/Default/n-N/dw-Conv2d/Grad_Conv2D/Conv2DBackpropInput-op0)
  %13(CNode_183) = Conv2DBackpropFilter(%12, %para1_x, (I64(8), I64(8), I64(1), I64(1))) primitive_attrs: {kernel_size: (1, 1), mode: I64(1), out_channel: I64(8), input_names: (out_backprop, input, filter_sizes), pad: (0, 0, 0, 0), pad_mode: I64(1), format: "NCHW", pad_list: (0, 0, 0, 0), groups: I64(1), stride: (1, 1, 1, 1), group: I64(1), dilation: (1, 1, 1, 1), data_format: "NCHW", output_names: (output)}
      : (<Tensor[Float32], (2, 8, 6, 6)>, <Tensor[Float32], (2, 8, 6, 6)>, <Tuple[Int64*4], TupleShape(NoShape, NoShape, NoShape, NoShape), elements_use_flags={[const vector]{1, 1, 1, 1}}>) -> (<Tensor[Float32], (8, 8, 1, 1)>)
      # Fullname with scope: (Gradients/Default/n-N/pw-Conv2d/Grad_Conv2D/Conv2DBackpropFilter-op0)
  Return(%13)
      : (<Tensor[Float32], (8, 8, 1, 1)>)
}
"""


def rows(tmp_path, rewrite=None, dtype="Float32") -> list[Row]:
    """The dump's rows as the chip check lists them (per cell), ``dtype`` its tensors' type."""
    folder = tmp_path / f"ir_{dtype}"
    folder.mkdir(exist_ok=True)
    text = CONVOLUTIONS.replace("Tensor[Float32]", f"Tensor[{dtype}]")
    (folder / "21_validate_0076.ir").write_text(text)
    listed = collect(str(folder), by_cell=True, rewrite=rewrite)
    return [Row("train", *row) for row in listed]


def by_prim(listed: list[Row]) -> dict[str, list[Row]]:
    out: dict[str, list[Row]] = {}
    for row in listed:
        out.setdefault(row.prim, []).append(row)
    return out


def test_the_installed_mindspore_has_no_depthwise_rewrite_and_the_control_is_found():
    scan = depthwise.scan_backend()
    assert scan.version == importlib.metadata.version("mindspore")
    assert scan.control > 0 and "libmindspore_ge_backend.so" in scan.libraries
    assert scan.found == dict.fromkeys(depthwise.PASS_NAMES, 0)
    assert depthwise.rewrite_in_backend() is False
    applied, why = depthwise.decide("auto")
    assert not applied
    assert f"not in MindSpore {scan.version}'s Ascend backend" in why
    assert f"is found {scan.control} times" in why


def test_a_backend_with_the_pass_is_seen_and_one_without_the_control_is_refused(tmp_path):
    def mindspore(name: str, strings: list[bytes]) -> str:
        lib = tmp_path / name / "lib"
        (lib / "plugin").mkdir(parents=True)
        (lib / "plugin" / "libmindspore_ascend.so.2").write_bytes(
            b"\x7fELF\0" + b"\0".join(strings) + b"\0"
        )
        (lib.parent / "version.py").write_text("__version__ = '2.2.14'\n")
        return str(lib)

    old = mindspore("old", [b"N9mindspore3opt24BatchNormGradUnifyMindIRE",
                            b"N9mindspore3opt17Conv2DUnifyMindIRE"])  # fmt: skip
    assert depthwise.rewrite_in_backend(old) is True
    applied, why = depthwise.decide("auto", old)
    assert applied and "in MindSpore 2.2.14's Ascend backend (Conv2DUnifyMindIR x1" in why
    new = mindspore("new", [b"N9mindspore3opt24BatchNormGradUnifyMindIRE"])
    assert depthwise.rewrite_in_backend(new) is False
    unread = mindspore("unread", [b"N9mindspore3opt17Conv2DUnifyMindIRE"])
    with pytest.raises(RuntimeError, match="cannot tell"):
        depthwise.rewrite_in_backend(unread)
    assert depthwise.decide("on", unread)[0] and not depthwise.decide("off", old)[0]
    with pytest.raises(ValueError, match="--depthwise-rewrite"):
        depthwise.decide("yes")


def test_a_node_keeps_its_primitive_attributes(tmp_path):
    (tmp_path / "21_validate_0076.ir").write_text(CONVOLUTIONS)
    nodes = parse_ir_file(str(tmp_path / "21_validate_0076.ir"))
    assert [(n["prim"], n["attrs"]["group"]) for n in nodes][:3] == [
        ("Conv2D", "I64(1)"), ("Conv2D", "I64(8)"), ("Conv2D", "I64(2)")]  # fmt: skip
    assert nodes[0]["attrs"]["format"] == '"NCHW"'
    assert nodes[3]["attrs"]["input_names"] == "(out_backprop, filter, input_sizes)"


def test_depthwise_convolutions_become_cann_depthwise_operators_as_mindspore_rewrote_them(
    tmp_path,
):
    plain = by_prim(rows(tmp_path))
    assert {p: len(r) for p, r in plain.items()} == {
        "Conv2D": 3, "Conv2DBackpropFilter": 3, "Conv2DBackpropInput": 2}  # fmt: skip
    got = by_prim(rows(tmp_path, depthwise.rewrite_node))
    # The 1x1 (group 1) and the grouped 3x3 (group 2 of 8 channels) stay convolutions.
    assert sorted(r.scope for r in got["Conv2D"]) == [
        "Default/n-N/gc-Conv2d/Conv2D-op0", "Default/n-N/pw-Conv2d/Conv2D-op0"]  # fmt: skip
    assert [r.scope for r in got["Conv2DBackpropInput"]] == [
        "Gradients/Default/n-N/gc-Conv2d/Grad_Conv2D/Conv2DBackpropInput-op0"
    ]
    assert len(got["Conv2DBackpropFilter"]) == 2
    tuple4 = ("tuple[scalar:int64*4]", "TupleShape(NoShape, NoShape, NoShape, NoShape)")
    (forward,) = got["DepthwiseConv2dNative"]
    assert (forward.dtypes, forward.shapes) == (
        ["float32", "float32"],
        [[2, 8, 6, 6], [1, 8, 3, 3]],
    )
    assert forward.scope == "Default/n-N/dw-Conv2d/DepthwiseConv2dNative-op0"
    (grad_in,) = got["DepthwiseConv2dNativeBackpropInput"]  # (input_sizes, filter^T, dout)
    assert grad_in.dtypes == [tuple4[0], "float32", "float32"]
    assert grad_in.shapes == [tuple4[1], [1, 8, 3, 3], [2, 8, 6, 6]]
    (grad_w,) = got["DepthwiseConv2dNativeBackpropFilter"]  # (x, filter_size swapped, dout)
    assert grad_w.dtypes == ["float32", tuple4[0], "float32"]
    assert grad_w.shapes == [[2, 8, 6, 6], tuple4[1], [2, 8, 6, 6]]
    # Three Transposes (1, 0, 2, 3): the weights forward and backward, and the filter
    # gradient's [1, 8, 3, 3] back to the weights' [8, 1, 3, 3].
    transposes = sorted((r.shapes[0], r.scope.split("/")[-2]) for r in got["Transpose"])
    assert transposes == [([1, 8, 3, 3], "Grad_Conv2D"), ([8, 1, 3, 3], "Grad_Conv2D"),
                          ([8, 1, 3, 3], "dw-Conv2d")]  # fmt: skip
    assert all(r.dtypes == ["float32", tuple4[0]] for r in got["Transpose"])


def verdicts(listed, chip, mode, backend) -> dict[str, tuple[str, str]]:
    out = {}
    for row in listed:
        if row.prim.startswith("Depthwise") or row.prim == "Transpose":
            f = judge(row, chip, mode, TABLES, MAPPING, backend=backend)
            out[row.prim] = (f.verdict, f.cann_op)
    return out


def test_the_rewritten_operators_verdicts_on_both_chips_at_o0_and_o2(tmp_path):
    fp32 = rows(tmp_path, depthwise.rewrite_node)
    fp16 = rows(tmp_path, depthwise.rewrite_node, "Float16")
    # The 910A (GE, float32 run in float16): every depthwise kernel is float16 only there.
    assert verdicts(fp32, "ascend910", "allow_fp32_to_fp16", "ge") == {
        "DepthwiseConv2dNative": ("aicore(fp16)", "DepthwiseConv2D"),
        "DepthwiseConv2dNativeBackpropInput": ("aicore(fp16)", "DepthwiseConv2DBackpropInputD"),
        "DepthwiseConv2dNativeBackpropFilter": ("aicore(fp16)", "DepthwiseConv2DBackpropFilterD"),
        "Transpose": ("aicore", "Transpose"),
    }
    assert {v for v, _ in verdicts(fp16, "ascend910", "allow_fp32_to_fp16", "ge").values()} == {
        "aicore"}  # fmt: skip
    # Keeping float32 on the 910A leaves no kernel for them.
    kept = verdicts(fp32, "ascend910", "must_keep_origin_dtype", "ge")
    assert {p: v for p, (v, _) in kept.items() if p != "Transpose"} == {
        "DepthwiseConv2dNative": "none", "DepthwiseConv2dNativeBackpropInput": "none",
        "DepthwiseConv2dNativeBackpropFilter": "none"}  # fmt: skip
    # The 910B (kernel by kernel: no aclnn dispatch for them, the GE operators compiled
    # alone): the D kernels take float32, float16 and bfloat16.
    for listed in (fp32, fp16):
        b = verdicts(listed, "ascend910b", "must_keep_origin_dtype", "kbk")
        assert {p: v for p, (v, _) in b.items() if p != "Transpose"} == {
            "DepthwiseConv2dNative": "aicore", "DepthwiseConv2dNativeBackpropInput": "aicore",
            "DepthwiseConv2dNativeBackpropFilter": "aicore"}  # fmt: skip
    # Run in float16 on the 910A, a rewritten operator's inputs are its convolution's, measured
    # on CPU at that convolution's instance (the same tensors, the weights transposed).
    (grad_in,) = by_prim(fp32)["DepthwiseConv2dNativeBackpropInput"]
    cell = "Gradients/Default/n-N/dw-Conv2d/Grad_Conv2D"
    largest = {value_key("Conv2DBackpropInput", [2, 8, 6, 6], cell): 7e4,
               value_key("Conv2DBackpropInput", [2, 8, 6, 6]): 10.0}  # fmt: skip
    finding = judge(grad_in, "ascend910", "allow_fp32_to_fp16", TABLES, MAPPING, largest)
    assert (finding.verdict, finding.largest) == ("overflows", 7e4)
    assert finding.notes == ["inputs measured at its Conv2DBackpropInput's instance"]
    # What a mapping to the non-D kernels (a size that is not a constant) would meet instead:
    for op, size in (("DepthwiseConv2DBackpropFilter", 1), ("DepthwiseConv2DBackpropInput", 0)):
        combos = TABLES[op]["ascend910b"]["aicore"]["combos"]
        assert len(combos) == 1 and combos[0][size] == "int32"
        assert {d for i, d in enumerate(combos[0]) if i != size} == {"float16"}


def test_the_option_applies_the_rewrite_and_the_report_says_which_and_why(
    monkeypatch, tmp_path, capsys
):
    def graph_rows(cfg, rt, chip, img=128, cards=1, rewrite=None):
        return rows(tmp_path, rewrite)

    monkeypatch.setattr(graphs, "graph_rows", graph_rows)
    report = tmp_path / "report.json"
    common = ["--chips", "ascend910,ascend910b", "--no-values", "--cards", "1", "--json",
              str(report)]  # fmt: skip
    assert chip_check.main(common) == 0
    result = json.loads(report.read_text())
    assert result["depthwise_rewrite"]["setting"] == "auto"
    assert result["depthwise_rewrite"]["applied"] is False
    assert "not in MindSpore" in result["depthwise_rewrite"]["why"]
    assert result["chips"]["ascend910"]["depthwise_rewrite"] is False
    assert "Conv2D" in result["chips"]["ascend910"]["primitives"]["train"]
    out = capsys.readouterr().out
    said = [line for line in out.splitlines() if line.startswith("depthwise rewrite")]
    assert len(said) == 1 and said[0].startswith("depthwise rewrite off (auto): not in MindSpore")
    assert "kernel by kernel; depthwise rewrite off) ==" in out

    status = chip_check.main([*common, "--depthwise-rewrite", "on",
                              "runtime.precision_mode=must_keep_origin_dtype"])  # fmt: skip
    result = json.loads(report.read_text())
    assert status == 1
    assert result["depthwise_rewrite"]["applied"] is True
    assert result["chips"]["ascend910b"]["primitives"]["train"]["DepthwiseConv2dNative"] == 1
    assert "GE graph sink; depthwise rewrite on) ==" in capsys.readouterr().out
    failing = {(f["chip"], f["prim"]): f["reason"] for f in result["findings"]
               if f["verdict"] in FAILING}  # fmt: skip
    assert {p for c, p in failing if c == "ascend910b"} == set()
    for prim in ("DepthwiseConv2dNative", "DepthwiseConv2dNativeBackpropInput",
                 "DepthwiseConv2dNativeBackpropFilter"):  # fmt: skip
        assert "model.depthwise=false" in failing[("ascend910", prim)]
        assert "runtime.amp=O2" in failing[("ascend910", prim)]
    # The plain convolutions fail there too (float32 kept, float16 kernels), without the hint.
    assert "model.depthwise" not in failing[("ascend910", "Conv2D")]
