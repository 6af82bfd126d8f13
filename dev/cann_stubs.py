"""Permissive stand-ins for CANN's ``tbe`` / ``te`` / ``tvm`` modules, so an operator's
Python implementation imports on a machine without CANN's compiled parts
(``dev.select_format`` drives them): every attribute is a stub except the modules named in
``SPECIAL`` (emulated platform queries) and ``REAL`` (CANN's own pure-Python helpers, loaded
as they are)."""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import types


class AnyStub:
    """Permissive stand-in: any attribute, call, item, arithmetic works; it is falsy."""

    def __init__(self, name="any"):
        object.__setattr__(self, "_n", name)

    def __getattr__(self, k):
        if k.startswith("__") and k.endswith("__"):
            raise AttributeError(k)
        return AnyStub(f"{self._n}.{k}")

    def __setattr__(self, k, v):
        pass

    def __call__(self, *a, **kw):
        if len(a) == 1 and not kw and isinstance(a[0], (types.FunctionType, type)):
            return a[0]  # used as a decorator
        return AnyStub(f"{self._n}()")

    def __getitem__(self, k):
        return AnyStub(f"{self._n}[]")

    def __iter__(self):
        return iter(())

    def __len__(self):
        return 0

    def __bool__(self):
        return False

    def __int__(self):
        return 0

    __index__ = __int__

    def __float__(self):
        return 0.0

    def __str__(self):
        return ""

    def __hash__(self):
        return id(self)

    def __eq__(self, o):
        return o is self

    def __contains__(self, o):
        return False

    def __mro_entries__(self, bases):
        return (object,)

    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False

    def _binop(self, *a):
        return self

    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = __truediv__ = _binop
    __floordiv__ = __rfloordiv__ = __mod__ = __or__ = __and__ = __neg__ = _binop

    def __lt__(self, o):
        return False

    __le__ = __gt__ = __ge__ = __lt__


SPECIAL = {}  # full module name -> emulated module (platform queries)
REAL = {}  # full module name -> file: CANN's own pure-Python helpers, loaded for real
REAL_MODULES = {
    "tbe.common.utils.shape_util": "tbe.common.utils.shape_util",
    "te.utils.shape_util": "tbe.common.utils.shape_util",
    "tbe.common.utils.const": "tbe.common.utils.const",
}


class StubModule(types.ModuleType):
    def __getattr__(self, k):
        if k.startswith("__") and k.endswith("__"):
            raise AttributeError(k)
        full = f"{self.__name__}.{k}"
        if full in SPECIAL or full in REAL:
            return importlib.import_module(full)
        if any(n.startswith(full + ".") for n in list(SPECIAL) + list(REAL)):
            return importlib.import_module(full)
        return AnyStub(full)


class StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def __init__(self, prefixes, special):
        self.prefixes = prefixes
        self.special = special  # name -> module

    def find_spec(self, name, path=None, target=None):
        top = name.split(".")[0]
        if name in REAL:  # pure-Python helpers taken from CANN as they are
            return importlib.util.spec_from_file_location(name, REAL[name])
        if name in self.special or top in self.prefixes:
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec):
        if spec.name in self.special:
            return self.special[spec.name]
        m = StubModule(spec.name)
        m.__path__ = []
        return m

    def exec_module(self, module):
        pass
