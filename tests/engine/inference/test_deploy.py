"""engine.inference.deploy: the ATC and MindSpore Lite commands built from export.py's record, the
checks on it, and a clear word when the tools are absent (they are, here)."""

from __future__ import annotations

import json

import pytest

from msdet.engine.inference import deploy
from msdet.engine.inference.deploy import DeployError, atc_command, lite_command, plan, read_export


def export_folder(tmp_path, fmt="ONNX", shape=(1, 3, 640, 640), **extra):
    suffix = {"ONNX": ".onnx", "MINDIR": ".mindir"}.get(fmt, ".bin")
    model = tmp_path / f"yolox_s_640x640_b1{suffix}"
    model.write_bytes(b"model")
    record = {"file": str(model), "format": fmt, "input_shape": list(shape), **extra}
    (tmp_path / "export.json").write_text(json.dumps(record))
    return tmp_path, model


def test_atc_and_converter_lite_commands(tmp_path):
    folder, model = export_folder(tmp_path)
    export = read_export(str(folder))
    stem = str(model)[: -len(".onnx")]
    atc = atc_command(export, "Ascend910B1")
    assert atc.line() == (
        f"atc --model={model} --framework=5 --output={stem} --input_format=NCHW "
        "--soc_version=Ascend910B1 --log=error"
    )
    assert atc.output == stem + ".om"
    lite = lite_command(export)
    assert lite.args == (
        "--fmk=ONNX",
        f"--modelFile={model}",
        f"--outputFile={stem}_lite",
        "--optimize=ascend_oriented",
    )
    assert lite_command(export, "cpu").args[-1] == "--optimize=general"
    assert [c.tool for c in plan(export, "both", "Ascend310P3")] == ["atc", "converter_lite"]


def test_mindir_goes_to_lite_and_atc_asks_for_onnx(tmp_path):
    folder, model = export_folder(tmp_path, "MINDIR")
    export = read_export(str(folder))
    assert lite_command(export).args[0] == "--fmk=MINDIR"
    with pytest.raises(DeployError, match="export.format=ONNX"):
        atc_command(export, "Ascend910B1")
    with pytest.raises(DeployError, match="--soc"):
        atc_command({**export, "format": "ONNX"}, "")


@pytest.mark.parametrize(
    ("fmt", "shape", "message"),
    [
        ("AIR", (1, 3, 640, 640), "neither ONNX nor MINDIR"),
        ("ONNX", (1, 3, 600, 640), "multiples of 32"),
        ("ONNX", (1, 1, 640, 640), "3 channels"),
        ("ONNX", (3, 640, 640), "static"),
        ("ONNX", (-1, 3, 640, 640), "static"),
    ],
)
def test_bad_exports_are_named(tmp_path, fmt, shape, message):
    folder, _ = export_folder(tmp_path, fmt, shape)
    with pytest.raises(DeployError, match=message):
        read_export(str(folder))


def test_missing_record_or_file(tmp_path):
    with pytest.raises(DeployError, match="run export.py first"):
        read_export(str(tmp_path))
    folder, model = export_folder(tmp_path)
    model.unlink()
    with pytest.raises(DeployError, match="does not exist"):
        read_export(str(folder))


def test_absent_tools_are_said_and_the_commands_printed(tmp_path, monkeypatch, capsys):
    folder, _ = export_folder(tmp_path)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert deploy.main([str(folder), "--soc", "Ascend910B1"]) == 3
    out = capsys.readouterr().out
    assert "$ atc --model=" in out and "$ converter_lite --fmk=ONNX" in out
    assert "atc is not on PATH: not converted (install the CANN toolkit" in out
    assert "converter_lite is not on PATH" in out
    assert deploy.main([str(folder), "--soc", "Ascend910B1", "--dry-run"]) == 0
    assert deploy.main([str(tmp_path / "nowhere")]) == 2


def test_the_chip_is_taken_as_npu_smi_names_it():
    assert deploy.soc_version("910B1") == "Ascend910B1"
    assert deploy.soc_version("310P3") == "Ascend310P3"
    assert deploy.soc_version("Ascend910B1") == "Ascend910B1"
    assert deploy.soc_version(" ascend310p3 ") == "ascend310p3"


def test_an_export_with_nms_is_refused_for_ascend(tmp_path):
    """NMSWithMask's kernels take [N, 8] boxes, MindSpore builds [N, 5]: the network alone
    is what deploys, NMS on the host."""
    folder, _ = export_folder(tmp_path, with_nms=True)
    with pytest.raises(DeployError, match=r"\[N, 8\].*export.with_nms=false"):
        plan(read_export(str(folder)), "om", "910B1")


def test_the_om_atc_wrote_is_found_under_the_name_it_chose(tmp_path, monkeypatch, capsys):
    """ATC appends the OS and architecture on some installs: <stem>_linux_aarch64.om."""
    folder, model = export_folder(tmp_path)
    tools = tmp_path / "bin"
    tools.mkdir()
    atc = tools / "atc"
    atc.write_text(
        "#!/bin/sh\nfor a; do case $a in --output=*) out=${a#--output=};; esac; done\n"
        'touch "${out}_linux_aarch64.om"\n'
    )
    atc.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tools}:/usr/bin:/bin")
    assert deploy.main([str(folder), "--soc", "910B1", "--target", "om"]) == 0
    out = capsys.readouterr().out
    assert "--soc_version=Ascend910B1" in out
    assert f"wrote {str(model)[: -len('.onnx')]}_linux_aarch64.om" in out


def test_the_report_is_found_from_the_file_or_its_folder(tmp_path):
    """export.py writes <file>.json beside each file: deploy takes the file, its report, or
    a folder holding one export, and names the files when a folder holds several."""
    model = tmp_path / "best_yolox_s_640x640_b1.onnx"
    model.write_bytes(b"model")
    record = {"file": str(model), "format": "ONNX", "input_shape": [1, 3, 640, 640]}
    (tmp_path / (model.name + ".json")).write_text(json.dumps(record))
    for target in (model, tmp_path / (model.name + ".json"), tmp_path):
        assert read_export(str(target))["file"] == str(model)
    other = tmp_path / "last_yolox_s_640x640_b1.mindir"
    other.write_bytes(b"model")
    (tmp_path / (other.name + ".json")).write_text(json.dumps({**record, "file": str(other)}))
    with pytest.raises(
        DeployError, match=r"holds 2 exports \(best_.*onnx.json, last_.*mindir.json\)"
    ):
        read_export(str(tmp_path))
