"""The original's official COCO weights, by model name: ``train.pretrained=yolox_s``.

Megvii's YOLOX release ``0.1.1rc0`` publishes one PyTorch checkpoint per model, trained on
COCO train2017 (80 classes). :func:`fetch_release_weights` downloads a model's file once
into msdet's cache folder (``$MSDET_CACHE_DIR/weights``, else ``~/.cache/msdet/weights``),
to a temporary name renamed into place only when complete and verified, so a partial
file is never used. Training then converts it with the torch-free converter
(:mod:`msdet.models.convert_pytorch`). ``$MSDET_WEIGHTS_URL`` replaces the release URL
(a mirror; the tests serve files on 127.0.0.1).

Verification: the sha256 of every file below is the one published by projects that pin
these exact release files (named beside the table); none was measured on a msdet machine.
A file is accepted when its sha256 matches. For a file without a published sha256 the
checks are what can be checked without one: not empty, its pickle reads without running
code, and its converted state dict has exactly the model's parameter names and shapes; its
sha256 is logged, for comparison with the release page.

Without network (or on any failed download) the error names the URL, the file and the
folder to put it in; a file placed there under its name is used as if downloaded, and
``train.pretrained=path/to/yolox_s.pth`` takes the file from anywhere.
"""

from __future__ import annotations

import contextlib
import hashlib
import http.client
import logging
import os
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from msdet.common.cache import cache_error, make_cache_folder, user_cache_dir
from msdet.common.progress import Progress
from msdet.models.convert_pytorch import ConversionError, convert_state_dict, load_torch_checkpoint
from msdet.models.yolox import architecture, load_model_config

log = logging.getLogger(__name__)

RELEASE_URL = "https://github.com/Megvii-BaseDetection/YOLOX/releases/download/0.1.1rc0"
URL_VAR = "MSDET_WEIGHTS_URL"
RELEASE_CLASSES = 80  # COCO's, in YOLOX's order: models.description.COCO_NAMES
TIMEOUT_S = 60.0  # per network operation (connect, each read), not for the whole file
CHUNK = 1 << 20
STALE_PART_S = 600.0  # a temporary file not written to for this long is a killed download's


@dataclass(frozen=True)
class ReleaseFile:
    """One model's file of the release and its published sha256 (None: none known)."""

    filename: str
    sha256: str | None


# Published sha256 values: nano ... x from boquila/montgomery (src/models/yolox/weights.rs),
# tiny ... x also in sr99622/libonvif (onvif-gui/onvif_gui/panels/video/modules/yolox.py),
# nano also in several fine-tuning projects' READMEs; darknet from InterDigitalInc/
# CompressAI-Vision (its install script under scripts/). Each agreed wherever more than one source had it.
RELEASE_FILES: dict[str, ReleaseFile] = {
    "yolox_nano": ReleaseFile(
        "yolox_nano.pth", "cd28f55fbbc1829f99d9ac9b38a16d259a22889739c8728ea877610201feff7b"
    ),
    "yolox_tiny": ReleaseFile(
        "yolox_tiny.pth", "9de513de589ac98bb92d3bca53b5af7b9acfa9b0bacb831f7999d0f7afaee8f0"
    ),
    "yolox_s": ReleaseFile(
        "yolox_s.pth", "f55ded7181e1b0c13285c56e7790b8f0e8f8db590fe4edb37f0b7f345c913a30"
    ),
    "yolox_m": ReleaseFile(
        "yolox_m.pth", "60076992b32da82951c90cfa7bd6ab70eba9eda243e08b940a396f60ac2d19b6"
    ),
    "yolox_l": ReleaseFile(
        "yolox_l.pth", "1e6b7fa6240375370b2a8a8eab9066b3cdd43fd1d0bfa8d2027fd3a51def2917"
    ),
    "yolox_x": ReleaseFile(
        "yolox_x.pth", "5652330b6ae860043f091b8f550a60c10e1129f416edfdb65c259be6caf355cf"
    ),
    # The original's exps/default/yolov3.py; msdet's yolox_darknet53.
    "yolox_darknet53": ReleaseFile(
        "yolox_darknet.pth", "b5905e9faf500a2608c93991f91a41a6150bcd2dd30986865a73becd94542fa1"
    ),
}


class ReleaseWeightsError(OSError):
    """The official weights could not be downloaded or are not the published file."""


class ReleaseDownloadError(ReleaseWeightsError):
    """The official weights are not in the cache and could not be downloaded (no network,
    an HTTP error, a transfer cut short): they are not at hand."""


def release_names() -> list[str]:
    """The model names with official weights (``train.pretrained=<name>``)."""
    return list(RELEASE_FILES)


def weights_cache_dir() -> str:
    """Where downloaded weights are kept: ``$MSDET_CACHE_DIR/weights`` or
    ``~/.cache/msdet/weights`` (``$XDG_CACHE_HOME``)."""
    return user_cache_dir("weights")


def release_url(model: str) -> str:
    """The URL of ``model``'s file: the release's, or under ``$MSDET_WEIGHTS_URL`` (which
    must be an http, https or file URL: :class:`ReleaseWeightsError` naming it otherwise)."""
    base = os.environ.get(URL_VAR) or RELEASE_URL
    if urllib.parse.urlsplit(base).scheme not in ("http", "https", "file"):
        raise ReleaseWeightsError(
            f"{URL_VAR}={base} is not a URL (http://, https:// or file://): set it to the "
            "folder of a mirror of the release files, or unset it for the release itself"
        )
    return f"{base.rstrip('/')}/{RELEASE_FILES[model].filename}"


def cached_path(model: str) -> str:
    """Where ``model``'s file is (or will be) in the cache folder."""
    return os.path.join(weights_cache_dir(), RELEASE_FILES[model].filename)


def release_for(model_cfg: Any) -> str | None:
    """The model whose official weights fit ``model_cfg``: its ``name``, when that has a
    release file and the config's architecture is that model's (``model=yolox_s
    model.depth=0.5`` is another network, which no release file fits); else None."""
    name = str(model_cfg.name)
    if name not in RELEASE_FILES:
        return None
    return name if architecture(model_cfg) == architecture(load_model_config(name)) else None


def check_release_fits(model: str, model_cfg: Any) -> None:
    """A clear error, before any download, when ``train.pretrained=<model>`` names weights
    of another network than ``model_cfg``'s."""
    if release_for(model_cfg) == model:
        return
    shown = dict(architecture(model_cfg))
    raise ValueError(
        f"train.pretrained={model} is the official weights of {model}, but the model is "
        f"{model_cfg.name} ({shown}): choose model={model}, or "
        + (
            f"train.pretrained=auto for {model_cfg.name}'s own weights"
            if release_for(model_cfg)
            else "train.pretrained=null (no official weights fit this architecture)"
        )
    )


def fetch_release_weights(model: str, expected: Mapping[str, tuple[int, ...]] | None = None) -> str:
    """The path of ``model``'s official weights, downloaded into the cache on first use.

    ``expected``: the model's MindSpore parameter names and shapes at 80 classes, checked
    against a file whose sha256 is not published (see the module docstring). Raises
    :class:`ReleaseWeightsError` saying where to get the file and where to put it.
    """
    release = RELEASE_FILES[model]
    path, url = cached_path(model), release_url(model)
    if os.path.isfile(path):
        _verify(model, path, url, expected, cached=True)
        return path
    if os.path.exists(path):
        raise ReleaseWeightsError(
            f"{path} is a folder, where the cache keeps {release.filename}: remove it (msdet "
            "downloads the file there again)"
        )
    make_cache_folder(os.path.dirname(path))
    _remove_stale_parts(os.path.dirname(path), release.filename)
    tmp = ""
    try:
        fd, tmp = tempfile.mkstemp(
            prefix=release.filename + ".", suffix=".part", dir=os.path.dirname(path)
        )
        with os.fdopen(fd, "wb") as out:
            _download(url, out, release.filename)
        _verify(model, tmp, url, expected, cached=False)
        os.replace(tmp, path)  # atomic: the final name only ever holds a whole, checked file
    except ReleaseWeightsError:
        raise
    except OSError as err:  # the cache's disk, not the network: full, read-only
        raise cache_error(path, err) from err
    finally:
        if tmp and os.path.exists(tmp):
            os.remove(tmp)
    log.info("saved %s", path)
    return path


def _remove_stale_parts(folder: str, filename: str) -> None:
    """Delete what killed downloads of ``filename`` left; a download under way (another
    rank's) writes continuously and stays."""
    now = time.time()
    for name in os.listdir(folder):
        part = os.path.join(folder, name)
        if name.startswith(filename + ".") and name.endswith(".part"):
            with contextlib.suppress(OSError):  # another process may remove it first
                if now - os.path.getmtime(part) > STALE_PART_S:
                    os.remove(part)


def _download(url: str, out: Any, filename: str) -> None:
    log.info("downloading %s into %s", url, weights_cache_dir())
    try:
        with urllib.request.urlopen(url, timeout=TIMEOUT_S) as response:
            length = response.headers.get("Content-Length")
            total = int(length) if length and length.isdigit() else None
            got = 0
            with Progress(total // 1024 if total else None, filename, "KiB", logger=log) as bar:
                while chunk := response.read(CHUNK):
                    out.write(chunk)
                    got += len(chunk)
                    bar.update_to(got // 1024)
    except urllib.error.HTTPError as err:
        raise _failed(url, filename, f"HTTP {err.code} {err.reason}") from err
    except urllib.error.URLError as err:
        raise _failed(url, filename, f"{err.reason}") from err
    except (TimeoutError, http.client.HTTPException, ConnectionError) as err:
        raise _failed(url, filename, f"{type(err).__name__}: {err}") from err
    if total is not None and got != total:
        raise _failed(url, filename, f"the transfer ended after {got} of {total} bytes")


def _verify(
    model: str,
    path: str,
    url: str,
    expected: Mapping[str, tuple[int, ...]] | None,
    cached: bool,
) -> None:
    """The published sha256, or without one the checks of the module docstring."""
    release = RELEASE_FILES[model]
    digest = _sha256(path)
    where = f"the cached {path}" if cached else f"the file downloaded from {url}"
    fix = (
        f"delete {path} (or replace it with {release.filename} from {url})"
        if cached
        else f"nothing was saved. {_by_hand(url, release.filename)}"
    )
    if release.sha256 is not None:
        if digest != release.sha256:
            raise ReleaseWeightsError(
                f"{where} has sha256 {digest}, the published {release.filename} has "
                f"{release.sha256}: {fix}"
            )
        if not cached:
            log.info("%s: sha256 %s matches the published one", release.filename, digest)
        return
    problem = None
    if os.path.getsize(path) == 0:
        problem = "it is empty"
    else:
        try:
            state = load_torch_checkpoint(path)
        except ConversionError as err:  # named by its temporary path: say "it" instead
            problem = str(err).replace(path, "it")
        else:
            try:
                if expected is not None:
                    convert_state_dict(state, expected)
            except ConversionError as err:
                problem = f"it is not {model}'s weights: {_shorten(str(err))}"
    if problem:
        raise ReleaseWeightsError(f"{where} cannot be used ({problem}): {fix}")
    log.info(
        "%s: sha256 %s (msdet knows no published sha256 for it: compare with the release's "
        "if in doubt)",
        release.filename,
        digest,
    )


def _sha256(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _failed(url: str, filename: str, reason: str) -> ReleaseDownloadError:
    return ReleaseDownloadError(f"could not download {url} ({reason}). {_by_hand(url, filename)}")


def _by_hand(url: str, filename: str) -> str:
    return (
        f"Download {url} yourself and put it in {weights_cache_dir()}{os.sep} as {filename}, "
        f"or pass train.pretrained=path/to/{filename}; train.pretrained=null trains from scratch"
    )


def _shorten(text: str, limit: int = 400) -> str:
    """A converter's report (which lists every key) cut to fit one error line."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit] + " ..."
