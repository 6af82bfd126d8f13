"""Reading torch.save files without PyTorch (models.torch_pickle) and the torch-free converter.

The refusal test here is the definitive one for unsafe checkpoints: it proves the
payload's side effect is absent, not only that loading failed.
"""

from __future__ import annotations

import io
import pickle
import subprocess
import sys
import zipfile

import numpy as np
import pytest

from msdet.models.convert_pytorch import ConversionError, load_torch_checkpoint, main
from msdet.models.torch_pickle import TorchCheckpointError, UnsafeCheckpointError, load_torch_file
from msdet.models.yolox import load_model_config, model_names
from tests.support import ROOT
from tests.support.torch_reference import require_torch, require_yolox

BIG = {"yolox_m", "yolox_l", "yolox_x"}


def _torch():
    return require_torch()


class _OpenFilePayload:
    """Unpickling this opens (creates) ``marker``: the side effect a test can look for."""

    def __init__(self, marker: str):
        self.marker = marker

    def __reduce__(self):
        return (open, (self.marker, "w"))


def _write_zip_checkpoint(path, obj) -> None:
    """A torch.save-layout archive whose data.pkl is ``obj`` pickled by the standard library."""
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("evil/data.pkl", pickle.dumps(obj, protocol=2))
        z.writestr("evil/byteorder", "little")
        z.writestr("evil/version", "3\n")


def _assert_same(ours, theirs):
    torch = _torch()
    assert set(ours) == set(theirs)
    for key, ref in theirs.items():
        if isinstance(ref, torch.Tensor):
            ref = ref.numpy()
            assert ours[key].dtype == ref.dtype, key
            assert ours[key].shape == ref.shape, key
            assert ours[key].tobytes() == np.ascontiguousarray(ref).tobytes(), key
        else:
            assert ours[key] == ref, key


@pytest.mark.slow
@pytest.mark.torch
@pytest.mark.parametrize(
    "model",
    [pytest.param(m, marks=pytest.mark.slow) if m in BIG else m for m in model_names()],
)
def test_reference_weights_read_bit_identical_to_torch_load(tmp_path, model):
    require_yolox()
    torch = _torch()
    from msdet.porting.reference import build_torch_yolox

    state = build_torch_yolox(load_model_config(model), 80).state_dict()
    src = tmp_path / f"{model}.pth"
    torch.save({"model": state, "start_epoch": 300}, src)
    ours = load_torch_file(str(src))
    assert ours["start_epoch"] == 300
    _assert_same(ours["model"], torch.load(src, map_location="cpu", weights_only=True)["model"])


@pytest.mark.torch
def test_views_dtypes_parameters_and_trainer_state_match_torch_load(tmp_path):
    torch = _torch()
    base = torch.arange(60, dtype=torch.float32).reshape(3, 4, 5)
    obj = {
        "transposed": base.permute(2, 0, 1),  # strided view of a shared storage
        "slice": base[1:, ::2, 1],  # storage offset and steps
        "same_storage": base,
        "half": torch.linspace(-2, 2, 7, dtype=torch.float16),
        "bf16": torch.tensor([1.5, -3.25, 1e30], dtype=torch.bfloat16),
        "long": torch.tensor([2**40, -1]),
        "bool": torch.tensor([True, False]),
        "empty": torch.zeros(0, 3),
        "scalar": torch.tensor(7.0),
        "param": torch.nn.Parameter(torch.ones(2, 2)),
    }
    src = tmp_path / "mixed.pth"
    torch.save({"tensors": obj, "best_ap": np.float64(0.25), "name": b"raw", "ep": 3}, src)
    ours = load_torch_file(str(src))
    ref = torch.load(src, map_location="cpu", weights_only=False)
    for key, value in ref["tensors"].items():
        expect = value.detach().float().numpy() if key == "bf16" else value.detach().numpy()
        assert ours["tensors"][key].dtype == expect.dtype, key
        np.testing.assert_array_equal(ours["tensors"][key], expect, err_msg=key)
    assert ours["best_ap"] == 0.25 and ours["name"] == b"raw" and ours["ep"] == 3


def test_checkpoint_that_would_run_code_is_refused_and_nothing_runs(tmp_path, capsys):
    marker = tmp_path / "payload_ran.txt"
    src = tmp_path / "evil.pth"
    _write_zip_checkpoint(src, {"model": {"head.x": _OpenFilePayload(str(marker))}})
    # The payload is real: plain pickle would run it.
    pickle.loads(pickle.dumps(_OpenFilePayload(str(marker)), protocol=2)).close()
    assert marker.exists()
    marker.unlink()

    dst = tmp_path / "e.ckpt"
    assert main(["--model", "yolox_nano", "--src", str(src), "--dst", str(dst)]) == 1
    err = capsys.readouterr().err
    assert not marker.exists(), "the checkpoint's payload ran"
    assert str(src) in err and "refused to load io.open" in err
    assert not dst.exists()
    with pytest.raises(UnsafeCheckpointError, match="refused to load io.open"):
        load_torch_file(str(src))
    assert not marker.exists()


@pytest.mark.torch
def test_payload_saved_by_torch_is_refused(tmp_path):
    torch = _torch()
    marker = tmp_path / "payload_ran.txt"
    src = tmp_path / "evil_torch.pth"
    torch.save({"model": {"w": torch.ones(1), "x": _OpenFilePayload(str(marker))}}, src)
    with pytest.raises(ConversionError) as err:
        load_torch_checkpoint(str(src))
    assert str(src) in str(err.value) and "refused to load io.open" in str(err.value)
    assert not marker.exists()


def test_tensor_reaching_outside_its_storage_is_refused(tmp_path):
    # Hand-written pickle: _rebuild_tensor_v2(storage(4 floats), 0, (4,), (100,), ...)
    pkl = (
        b"\x80\x02ctorch._utils\n_rebuild_tensor_v2\n("
        b"(X\x07\x00\x00\x00storagectorch\nFloatStorage\nX\x01\x00\x00\x000X\x03\x00\x00\x00cpuK\x04tQ"
        b"K\x00K\x04\x85K\x64\x85\x89ccollections\nOrderedDict\n)RtR."
    )
    src = tmp_path / "oob.pth"
    with zipfile.ZipFile(src, "w") as z:
        z.writestr("oob/data.pkl", pkl)
        z.writestr("oob/data/0", np.arange(4, dtype=np.float32).tobytes())
    with pytest.raises(UnsafeCheckpointError, match=r"oob\.pth.*reaches element 300"):
        load_torch_file(str(src))


def test_missing_damaged_and_foreign_files_name_the_file(tmp_path):
    with pytest.raises(TorchCheckpointError, match="not found: .*nope.pth"):
        load_torch_file(str(tmp_path / "nope.pth"))
    text = tmp_path / "notes.pth"
    text.write_text("hello")
    with pytest.raises(TorchCheckpointError, match="notes.pth is not a PyTorch checkpoint"):
        load_torch_file(str(text))
    cut = tmp_path / "cut.pth"
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("cut/data.pkl", pickle.dumps({"a": 1}, protocol=2))
    cut.write_bytes(buf.getvalue()[:-30])
    with pytest.raises(TorchCheckpointError, match="cut.pth"):
        load_torch_file(str(cut))


@pytest.mark.torch
def test_legacy_format_says_how_to_resave(tmp_path):
    torch = _torch()
    src = tmp_path / "legacy.pth"
    torch.save({"w": torch.ones(2)}, src, _use_new_zipfile_serialization=False)
    with pytest.raises(TorchCheckpointError) as err:
        load_torch_file(str(src))
    msg = str(err.value)
    assert str(src) in msg and "legacy" in msg and "torch.save(torch.load(" in msg


@pytest.mark.slow
@pytest.mark.torch
def test_cli_without_torch_equals_conversion_read_by_torch(tmp_path):
    """python -m msdet.models.convert_pytorch with `import torch` failing writes the same checkpoint."""
    require_yolox()
    torch = _torch()
    import mindspore as ms

    from msdet.models.convert_pytorch import convert_to_network
    from msdet.porting.reference import build_torch_yolox, calibrate

    model = calibrate(build_torch_yolox(load_model_config("yolox_nano"), 80), img_size=64)
    src, dst = tmp_path / "nano.pth", tmp_path / "nano.ckpt"
    torch.save({"model": model.state_dict(), "start_epoch": 300}, src)

    blocked = (
        "import sys; sys.modules['torch'] = None; import runpy; "
        "sys.argv = ['convert', '--model', 'yolox_nano', '--src', sys.argv[1], "
        "'--dst', sys.argv[2]]; runpy.run_module('msdet.models.convert_pytorch', run_name='__main__')"
    )
    proc = subprocess.run(
        [sys.executable, "-c", blocked, str(src), str(dst)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "wrote" in proc.stdout and "538 tensors" in proc.stdout

    via_torch = torch.load(src, map_location="cpu", weights_only=True)["model"]
    reference = tmp_path / "via_torch.ckpt"
    ms.save_checkpoint(convert_to_network(via_torch, "yolox_nano"), str(reference))
    ours, ref = ms.load_checkpoint(str(dst)), ms.load_checkpoint(str(reference))
    weights = [k for k in ref if not k.startswith("msdet_")]
    assert len(weights) == 538
    for key in weights:
        assert ours[key].asnumpy().tobytes() == ref[key].asnumpy().tobytes(), key
