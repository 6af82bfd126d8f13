"""train.pretrained=<model name>: the official weights, downloaded once into the cache, checked,
converted and loaded; every failure one clear error. The release site is a local server."""

from __future__ import annotations

import hashlib
import io
import os
import socket

import numpy as np
import pytest

from msdet.models.description import COCO_NAMES
from msdet.models.pretrained import load_pretrained
from msdet.models.release_weights import (
    RELEASE_FILES,
    ReleaseFile,
    ReleaseWeightsError,
    cached_path,
    fetch_release_weights,
    release_for,
    release_url,
    weights_cache_dir,
)
from msdet.models.yolox import build_model, load_model_config
from tests.support.web import FileServer

NANO = load_model_config("yolox_nano")
CLS = [f"head.cls_preds.{k}.{leaf}" for k in range(3) for leaf in ("weight", "bias")]


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """An empty msdet cache folder of its own."""
    monkeypatch.setenv("MSDET_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.fixture
def site(cache, monkeypatch):
    """A local stand-in for the release page, named by $MSDET_WEIGHTS_URL."""
    with FileServer() as server:
        monkeypatch.setenv("MSDET_WEIGHTS_URL", server.url)
        yield server


def _release_bytes(model_cfg, num_classes: int = 80) -> tuple[bytes, dict[str, np.ndarray]]:
    """A release-style file of the PyTorch original ({"model": ..., "optimizer": ...}) and
    its state dict as numpy arrays."""
    from tests.support.torch_reference import require_torch, require_yolox

    torch = require_torch()
    require_yolox()
    from msdet.porting.reference import build_torch_yolox

    model = build_torch_yolox(model_cfg, num_classes)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, nesterov=True)
    for p in model.parameters():  # momentum buffers, as a training checkpoint holds
        p.grad = torch.ones_like(p)
    optimizer.step()
    buffer = io.BytesIO()
    torch.save(
        {"start_epoch": 300, "model": model.state_dict(), "optimizer": optimizer.state_dict()},
        buffer,
    )
    return buffer.getvalue(), {k: v.numpy().copy() for k, v in model.state_dict().items()}


@pytest.fixture(scope="module")
def nano_release():
    return _release_bytes(NANO)


def _publish(monkeypatch, model: str, body: bytes | None) -> None:
    """Make ``body``'s sha256 the published one for ``model`` (None: none published)."""
    digest = hashlib.sha256(body).hexdigest() if body is not None else None
    monkeypatch.setitem(RELEASE_FILES, model, ReleaseFile(RELEASE_FILES[model].filename, digest))


def _nothing_cached(cache) -> bool:
    folder = cache / "weights"
    return not folder.exists() or os.listdir(folder) == []


@pytest.mark.torch
def test_download_is_cached_converted_and_loaded_with_classes_by_name(
    site, cache, monkeypatch, nano_release, caplog
):
    body, state = nano_release
    site.files["yolox_nano.pth"] = body
    _publish(monkeypatch, "yolox_nano", body)
    with caplog.at_level("INFO"):
        path = fetch_release_weights("yolox_nano")
    assert path == str(cache / "weights" / "yolox_nano.pth") == cached_path("yolox_nano")
    assert _read(path) == body and os.listdir(cache / "weights") == ["yolox_nano.pth"]
    assert site.requests == ["/yolox_nano.pth"]
    assert f"sha256 {hashlib.sha256(body).hexdigest()} matches the published one" in caplog.text

    names = ["car", "widget", "person"]
    net = build_model(NANO, len(names))
    fresh = {p.name: p.asnumpy().copy() for p in net.get_parameters()}
    report = load_pretrained(net, path, names)
    after = {p.name: p.asnumpy() for p in net.get_parameters()}
    assert report.kept_classes == ["car", "person"] and report.new_classes == ["widget"]
    assert "(the checkpoint's classes: the 80 COCO classes" in report.classes_line()
    assert len(report.loaded) == len(after) - 6 and report.skipped == []
    np.testing.assert_array_equal(
        after["backbone.backbone.stem.conv.bn.moving_variance"],
        state["backbone.backbone.stem.conv.bn.running_var"],
    )
    np.testing.assert_array_equal(
        after["head.reg_preds.1.weight"], state["head.reg_preds.1.weight"]
    )
    car, person = COCO_NAMES.index("car"), COCO_NAMES.index("person")
    for name in CLS:
        np.testing.assert_array_equal(after[name][0], state[name][car])
        np.testing.assert_array_equal(after[name][2], state[name][person])
        np.testing.assert_array_equal(after[name][1], fresh[name][1])

    # Used again: from the cache, no request.
    assert fetch_release_weights("yolox_nano") == path
    assert site.requests == ["/yolox_nano.pth"]


def test_missing_file_is_one_error_naming_the_url_and_the_folder(site, cache):
    with pytest.raises(ReleaseWeightsError) as err:
        fetch_release_weights("yolox_nano")
    text = str(err.value)
    url = f"{site.url}/yolox_nano.pth"
    assert url == release_url("yolox_nano")
    assert f"could not download {url} (HTTP 404 " in text
    assert f"put it in {weights_cache_dir()}{os.sep} as yolox_nano.pth" in text
    assert "train.pretrained=path/to/yolox_nano.pth" in text and "\n" not in text
    assert isinstance(err.value, OSError) and _nothing_cached(cache)


def test_no_network_is_the_same_error(cache, monkeypatch):
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    monkeypatch.setenv("MSDET_WEIGHTS_URL", f"http://127.0.0.1:{port}")
    with pytest.raises(
        ReleaseWeightsError,
        match=r"could not download http://127\.0\.0\.1:\d+/yolox_s\.pth \(.*refused",
    ):
        fetch_release_weights("yolox_s")
    assert _nothing_cached(cache)


@pytest.mark.torch
def test_truncated_download_fails_the_checksum_and_is_not_kept(
    site, cache, monkeypatch, nano_release
):
    body, _ = nano_release
    _publish(monkeypatch, "yolox_nano", body)
    site.files["yolox_nano.pth"] = body[: len(body) // 2]
    with pytest.raises(ReleaseWeightsError) as err:
        fetch_release_weights("yolox_nano")
    text = str(err.value)
    assert (
        "has sha256 " in text
        and f"the published yolox_nano.pth has {hashlib.sha256(body).hexdigest()}" in text
    )
    assert "nothing was saved" in text and release_url("yolox_nano") in text
    assert _nothing_cached(cache)


@pytest.mark.torch
def test_without_a_published_checksum_a_damaged_file_is_refused(
    site, cache, monkeypatch, nano_release
):
    body, _ = nano_release
    _publish(monkeypatch, "yolox_nano", None)
    site.files["yolox_nano.pth"] = body[: len(body) // 2]
    with pytest.raises(
        ReleaseWeightsError,
        match=r"cannot be used \(it is not a PyTorch checkpoint \(not a torch\.save file\)\): nothing",
    ):
        fetch_release_weights("yolox_nano", _shapes(NANO))
    site.files["yolox_nano.pth"] = b""
    with pytest.raises(ReleaseWeightsError, match=r"cannot be used \(it is empty\)"):
        fetch_release_weights("yolox_nano", _shapes(NANO))
    assert _nothing_cached(cache)


@pytest.mark.torch
def test_without_a_published_checksum_the_file_is_checked_and_its_sha256_logged(
    site, cache, monkeypatch, nano_release, caplog
):
    body, _ = nano_release
    _publish(monkeypatch, "yolox_nano", None)
    site.files["yolox_nano.pth"] = body
    with caplog.at_level("INFO"):
        path = fetch_release_weights("yolox_nano", _shapes(NANO))
    assert _read(path) == body
    assert f"sha256 {hashlib.sha256(body).hexdigest()} (msdet knows no published" in caplog.text


@pytest.mark.torch
def test_another_models_weights_are_refused_and_not_kept(site, cache, monkeypatch):
    body, _ = _release_bytes(load_model_config("yolox_tiny"))
    _publish(monkeypatch, "yolox_nano", None)
    site.files["yolox_nano.pth"] = body
    with pytest.raises(ReleaseWeightsError) as err:
        fetch_release_weights("yolox_nano", _shapes(NANO))
    text = str(err.value)
    assert "it is not yolox_nano's weights: PyTorch keys with no MindSpore parameter: " in text
    assert "backbone.backbone.dark2.0.conv.weight" in text and " ..." in text  # shortened
    assert _nothing_cached(cache)


@pytest.mark.torch
def test_a_cached_file_that_is_not_the_published_one_is_an_error(
    site, cache, monkeypatch, nano_release
):
    body, _ = nano_release
    _publish(monkeypatch, "yolox_nano", body)
    os.makedirs(cache / "weights")
    (cache / "weights" / "yolox_nano.pth").write_bytes(body[:-1])
    with pytest.raises(
        ReleaseWeightsError, match=f"the cached {cached_path('yolox_nano')} has sha256 .*: delete"
    ):
        fetch_release_weights("yolox_nano")
    assert site.requests == []


def test_what_killed_downloads_left_is_removed_and_a_fresh_one_kept(site, cache, monkeypatch):
    folder = cache / "weights"
    os.makedirs(folder)
    stale, fresh = folder / "yolox_s.pth.abc.part", folder / "yolox_s.pth.def.part"
    stale.write_bytes(b"killed")
    fresh.write_bytes(b"another rank is writing")
    os.utime(stale, (1e9, 1e9))
    with pytest.raises(ReleaseWeightsError):  # the site has no file: 404
        fetch_release_weights("yolox_s")
    assert sorted(os.listdir(folder)) == [fresh.name]


def test_a_file_placed_in_the_cache_by_hand_is_used_without_a_request(site, cache, monkeypatch):
    body = b"any bytes: only the checksum is compared"
    _publish(monkeypatch, "yolox_m", body)
    os.makedirs(cache / "weights")
    (cache / "weights" / "yolox_m.pth").write_bytes(body)
    assert fetch_release_weights("yolox_m") == str(cache / "weights" / "yolox_m.pth")
    assert site.requests == []


def test_every_model_has_a_release_file_with_a_published_sha256():
    from msdet.models.yolox import model_names

    assert sorted(RELEASE_FILES) == model_names()
    assert RELEASE_FILES["yolox_darknet53"].filename == "yolox_darknet.pth"
    for release in RELEASE_FILES.values():
        assert len(release.sha256) == 64 and int(release.sha256, 16) >= 0


def test_release_for_a_changed_architecture_is_none():
    from omegaconf import OmegaConf

    assert release_for(NANO) == "yolox_nano"
    assert release_for(load_model_config("yolox_darknet53")) == "yolox_darknet53"
    assert release_for(OmegaConf.merge(load_model_config("yolox_s"), {"depth": 0.5})) is None
    assert release_for(OmegaConf.merge(NANO, {"name": "my_nano"})) is None


def _shapes(model_cfg) -> dict[str, tuple[int, ...]]:
    net = build_model(model_cfg, 80)
    return {p.name: tuple(p.shape) for p in net.get_parameters()}


def _read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def test_an_unusable_cache_names_the_variable_the_path_and_the_reason(tmp_path, monkeypatch):
    """Issue: MSDET_CACHE_DIR read-only, full or a file gave bare errno messages; a folder
    where the weights file should be, and MSDET_WEIGHTS_URL=notaurl, were not named."""
    import errno

    from msdet.common.cache import CacheFolderError

    (tmp_path / "afile").write_text("")
    monkeypatch.setenv("MSDET_CACHE_DIR", str(tmp_path / "afile"))
    monkeypatch.setenv("MSDET_WEIGHTS_URL", "http://127.0.0.1:9")
    with pytest.raises(CacheFolderError) as err:
        fetch_release_weights("yolox_nano")
    assert (
        f"cannot write {tmp_path / 'afile' / 'weights'} (a file is where a folder should be"
        in str(err.value)
    )
    assert f"MSDET_CACHE_DIR={tmp_path / 'afile'}; point that at a writable folder" in str(
        err.value
    )

    monkeypatch.setenv("MSDET_CACHE_DIR", str(tmp_path / "cache"))
    os.makedirs(cached_path("yolox_nano"))
    with pytest.raises(
        ReleaseWeightsError, match=r"yolox_nano.pth is a folder, where the cache keeps"
    ):
        fetch_release_weights("yolox_nano")
    os.rmdir(cached_path("yolox_nano"))

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr("msdet.models.release_weights._download", full)
    with pytest.raises(
        CacheFolderError, match=r"yolox_nano.pth \(the disk is full\): .*MSDET_CACHE_DIR="
    ):
        fetch_release_weights("yolox_nano")

    monkeypatch.setenv("MSDET_WEIGHTS_URL", "notaurl")
    with pytest.raises(ReleaseWeightsError, match=r"MSDET_WEIGHTS_URL=notaurl is not a URL"):
        fetch_release_weights("yolox_nano")
