"""Read PyTorch checkpoints (``torch.save`` zip files) without PyTorch.

Since PyTorch 1.6 ``torch.save`` writes a zip archive: ``<name>/data.pkl`` (a pickle of
the saved object in which every tensor refers to a storage by key) and one raw
little-endian file per storage, ``<name>/data/<key>``. This module reads that layout
with the standard library and numpy, so converting weights needs no PyTorch install.

Unpickling can run arbitrary code; here it cannot. :class:`RestrictedUnpickler`
resolves only the tensor-rebuild functions, the storage types and plain containers, and
refuses every other global *before* anything is called, so a checkpoint that would run
code stops with :class:`UnsafeCheckpointError` and nothing of it has run.
"""

from __future__ import annotations

import collections
import io
import os
import pickle
import zipfile
from collections.abc import Callable
from typing import Any

import numpy as np

# Storage class name (as ``torch.save`` pickles it) -> numpy dtype of its elements.
# bfloat16 has no numpy dtype: it is widened to float32 exactly (see _bfloat16_to_float32).
STORAGE_DTYPES: dict[str, np.dtype] = {
    "DoubleStorage": np.dtype(np.float64),
    "FloatStorage": np.dtype(np.float32),
    "HalfStorage": np.dtype(np.float16),
    "BFloat16Storage": np.dtype(np.uint16),
    "LongStorage": np.dtype(np.int64),
    "IntStorage": np.dtype(np.int32),
    "ShortStorage": np.dtype(np.int16),
    "CharStorage": np.dtype(np.int8),
    "ByteStorage": np.dtype(np.uint8),
    "BoolStorage": np.dtype(np.bool_),
    "ComplexFloatStorage": np.dtype(np.complex64),
    "ComplexDoubleStorage": np.dtype(np.complex128),
    "UntypedStorage": np.dtype(np.uint8),
}

LEGACY_HINT = (
    "it was written in PyTorch's legacy (pre-1.6) format, which cannot be read without "
    "PyTorch. Re-save it once where PyTorch is installed: "
    "python -c \"import torch; torch.save(torch.load('OLD.pth', map_location='cpu', "
    "weights_only=True), 'NEW.pth')\""
)


class TorchCheckpointError(ValueError):
    """A file cannot be read as a PyTorch checkpoint."""


class UnsafeCheckpointError(TorchCheckpointError):
    """The checkpoint's pickle refers to something other than tensors and containers."""


class _StorageType:
    """Stands for ``torch.<X>Storage`` inside the pickle: only its element dtype matters."""

    def __init__(self, name: str):
        self.name = name
        self.dtype = STORAGE_DTYPES[name]


class _Storage:
    """One storage of the archive, read lazily as a flat numpy array of its elements."""

    def __init__(self, data: np.ndarray, type_name: str):
        self.data = data
        self.type_name = type_name


def is_storage(value: Any) -> bool:
    """Whether ``value`` is a storage on its own (``torch.save`` of ``tensor.storage()``):
    a tensor's raw elements, without the shape that makes them a tensor."""
    return isinstance(value, _Storage)


def _check_int_tuple(value: Any, what: str) -> tuple[int, ...]:
    if not isinstance(value, tuple) or not all(
        isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value
    ):
        raise UnsafeCheckpointError(f"tensor {what} must be a tuple of non-negative ints")
    return value


def _bfloat16_to_float32(bits: np.ndarray) -> np.ndarray:
    # bfloat16 is the upper half of a float32: widening it is exact.
    return (bits.astype(np.uint32) << 16).view(np.float32)


def _rebuild_tensor(storage: Any, offset: Any, size: Any, stride: Any, *_rest: Any) -> np.ndarray:
    """A tensor's elements as a new C-contiguous array (``torch._utils._rebuild_tensor_v2``).

    Offsets and strides are checked against the storage so that a crafted file cannot
    make numpy read outside it.
    """
    if not isinstance(storage, _Storage):
        raise UnsafeCheckpointError("a tensor refers to something that is not a storage")
    if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0:
        raise UnsafeCheckpointError("tensor storage offset must be a non-negative int")
    size = _check_int_tuple(size, "size")
    stride = _check_int_tuple(stride, "stride")
    if len(size) != len(stride):
        raise UnsafeCheckpointError("tensor size and stride differ in length")
    flat = storage.data
    if any(s == 0 for s in size):
        out = np.empty(size, dtype=flat.dtype)
    else:
        last = offset + sum((n - 1) * st for n, st in zip(size, stride))
        if last >= flat.size:
            raise UnsafeCheckpointError(
                f"tensor reaches element {last} of a storage of {flat.size} elements"
            )
        item = flat.dtype.itemsize
        view = np.lib.stride_tricks.as_strided(
            flat[offset:], shape=size, strides=tuple(st * item for st in stride), writeable=False
        )
        out = np.array(view, order="C")
    if storage.type_name == "BFloat16Storage":
        out = _bfloat16_to_float32(out)
    return out


def _rebuild_parameter(data: Any, _requires_grad: Any = None, *_rest: Any) -> np.ndarray:
    """``torch._utils._rebuild_parameter*``: a Parameter is its data here."""
    if not isinstance(data, np.ndarray):
        raise UnsafeCheckpointError("a parameter wraps something that is not a tensor")
    return data


def _encode(text: Any, encoding: str = "utf-8") -> bytes:
    """``_codecs.encode``, which protocol-2 pickles use for bytes; text codecs only."""
    if not isinstance(text, str) or encoding not in ("latin1", "latin-1", "utf-8", "utf8"):
        raise UnsafeCheckpointError(f"refused _codecs.encode with encoding {encoding!r}")
    return text.encode(encoding)


def _ordered_dict(*args: Any) -> collections.OrderedDict:
    # Called with no arguments by pickle; items and attributes (_metadata) follow.
    return collections.OrderedDict(*args)


def _numpy_dtype(name: Any, align: Any = False, copy: Any = False) -> np.dtype:
    """``numpy.dtype`` for the plain number types a numpy scalar in a checkpoint uses."""
    dtype = np.dtype(name) if isinstance(name, str) else None
    if dtype is None or dtype.kind not in "biufc":
        raise UnsafeCheckpointError(f"refused numpy dtype {name!r:.40}")
    return dtype


def _numpy_scalar(dtype: Any, data: Any = None) -> Any:
    """``numpy.core.multiarray.scalar``: e.g. a ``best_ap`` numpy float saved by a trainer."""
    if not isinstance(dtype, np.dtype) or not isinstance(data, bytes):
        raise UnsafeCheckpointError("malformed numpy scalar")
    if len(data) != dtype.itemsize:
        raise UnsafeCheckpointError("numpy scalar of the wrong size")
    return np.frombuffer(data, dtype=dtype)[0]


# The only globals a checkpoint may name: module.name -> what it becomes here.
ALLOWED_GLOBALS: dict[str, Callable[..., Any]] = {
    "collections.OrderedDict": _ordered_dict,
    "torch._utils._rebuild_tensor": _rebuild_tensor,
    "torch._utils._rebuild_tensor_v2": _rebuild_tensor,
    "torch._utils._rebuild_parameter": _rebuild_parameter,
    "torch._utils._rebuild_parameter_with_state": _rebuild_parameter,
    "_codecs.encode": _encode,
    "builtins.set": set,
    "builtins.frozenset": frozenset,
    "builtins.bytearray": bytearray,
    "numpy.dtype": _numpy_dtype,
    "numpy.core.multiarray.scalar": _numpy_scalar,
    "numpy._core.multiarray.scalar": _numpy_scalar,
}


class RestrictedUnpickler(pickle.Unpickler):
    """Unpickles ``data.pkl``: tensors become numpy arrays, anything else is refused."""

    def __init__(self, file: io.BufferedIOBase, load_storage: Callable[[str, str], _Storage]):
        super().__init__(file)
        self._load_storage = load_storage
        self._storages: dict[str, _Storage] = {}

    def find_class(self, module: str, name: str) -> Any:
        qualified = f"{module}.{name}"
        if qualified in ALLOWED_GLOBALS:
            return ALLOWED_GLOBALS[qualified]
        if module == "torch" and name in STORAGE_DTYPES:
            return _StorageType(name)
        if qualified == "torch.storage.UntypedStorage":
            return _StorageType("UntypedStorage")
        raise UnsafeCheckpointError(
            f"refused to load {qualified}: a weights checkpoint holds only tensors and "
            "plain containers, and loading this one would call other code"
        )

    def persistent_load(self, pid: Any) -> _Storage:
        # ("storage", storage type, key, location, number of elements)
        if not (isinstance(pid, tuple) and len(pid) == 5 and pid[0] == "storage"):
            raise UnsafeCheckpointError(f"unexpected persistent id {pid!r:.80}")
        storage_type, key, numel = pid[1], pid[2], pid[4]
        if not isinstance(storage_type, _StorageType) or not isinstance(key, str):
            raise UnsafeCheckpointError(f"malformed storage reference {pid!r:.80}")
        if key not in self._storages:
            storage = self._load_storage(key, storage_type.name)
            if isinstance(numel, int) and storage.data.size < numel:
                raise TorchCheckpointError(
                    f"storage {key} holds {storage.data.size} elements, the pickle says {numel}"
                )
            self._storages[key] = storage
        return self._storages[key]


def _is_legacy(path: str) -> bool:
    # Legacy files are a pickle stream starting with a magic number (protocol 2: 0x80 0x02),
    # or a tar archive (PyTorch < 0.4).
    with open(path, "rb") as f:
        head = f.read(512)
    return head[:1] == b"\x80" or head[257:262] == b"ustar"


def load_torch_file(path: str) -> Any:
    """The object ``torch.save`` wrote to ``path``, with every tensor as a numpy array.

    Raises :class:`TorchCheckpointError` (naming ``path``) for a missing, legacy-format or
    damaged file and :class:`UnsafeCheckpointError` for one whose pickle would call code.
    """
    if not os.path.isfile(path):
        raise TorchCheckpointError(f"PyTorch checkpoint not found: {path}")
    if not zipfile.is_zipfile(path):
        if _is_legacy(path):
            raise TorchCheckpointError(f"cannot read {path}: {LEGACY_HINT}")
        raise TorchCheckpointError(f"{path} is not a PyTorch checkpoint (not a torch.save file)")
    try:
        with zipfile.ZipFile(path) as archive:
            pickles = [n for n in archive.namelist() if n.endswith("data.pkl")]
            if not pickles:
                raise TorchCheckpointError(f"{path}: a zip file without data.pkl")
            prefix = pickles[0][: -len("data.pkl")]
            byteorder = "little"
            if prefix + "byteorder" in archive.namelist():
                byteorder = archive.read(prefix + "byteorder").decode("ascii").strip()

            def load_storage(key: str, type_name: str) -> _Storage:
                dtype = STORAGE_DTYPES[type_name].newbyteorder(
                    "<" if byteorder == "little" else ">"
                )
                try:
                    raw = archive.read(f"{prefix}data/{key}")
                except KeyError as err:
                    raise TorchCheckpointError(f"{path}: storage data/{key} is missing") from err
                # A read-only view of the bytes (tensors copy out of it); swapped only when
                # the file's byte order is not the machine's.
                data = np.frombuffer(raw, dtype=dtype, count=len(raw) // dtype.itemsize)
                if not data.dtype.isnative:
                    data = data.astype(dtype.newbyteorder("="))
                return _Storage(data, type_name)

            unpickler = RestrictedUnpickler(io.BytesIO(archive.read(pickles[0])), load_storage)
            return unpickler.load()
    except UnsafeCheckpointError as err:
        raise UnsafeCheckpointError(f"{path}: {err}") from None
    except TorchCheckpointError as err:
        if str(path) in str(err):
            raise
        raise TorchCheckpointError(f"{path}: {err}") from None
    except (zipfile.BadZipFile, pickle.UnpicklingError, EOFError, ValueError, TypeError) as err:
        raise TorchCheckpointError(f"{path} is damaged or not a PyTorch checkpoint: {err}") from err
