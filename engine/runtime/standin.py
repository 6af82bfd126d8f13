"""An Ascend chip stood in on this CPU: MindSpore's device-side API as msdet's runtime reaches
it, answering for one chip, under the MindSpore release that is installed.

msdet's device-side Python (chip detection, jit level and backend, precision mode, sink and
NMS decisions, distributed set-up: ``engine.runtime``) runs on a card only, so a call that
one release lacks would fail on the first card that runs it (MindSpore 2.7-2.9 have no
``MSContext.ascend_soc_supports_feature``). Inside :class:`StandInAscend` the same code runs
on CPU: each MindSpore function it reaches on Ascend is replaced by a recorder, but only
where the installed release has that function, so a call the release lacks fails here
exactly as on a card:

- ``MSContext`` is a class with the installed release's own methods (``dir`` of the real
  one); the SoC methods answer for the stood-in chip (:data:`SOC_FEATURES`: 2.10's feature
  table; 2.7-2.9 have no such method and ask the name), every other method is the real
  context's.
- ``set_device``, ``set_context``, ``set_auto_parallel_context``,
  ``reset_auto_parallel_context`` and the operator precision setting record their calls
  (:attr:`StandInAscend.calls`) and change nothing in this process.
- ``AscendOpPrecisionConf`` (bound by MindSpore's Ascend plugin only, so absent on CPU) is
  stood in where the release's Ascend plugin binds it (its name in the plugin library).
- ``mindspore.communication`` answers ``init``, ``get_rank`` and ``get_group_size`` for the
  rank and world size given.

Graphs still compile and run on the CPU: what the stand-in shows is what msdet decides and
sets for a chip, not what the chip computes (that is the self-test's, on a card).
"""

from __future__ import annotations

import glob
import os
from collections.abc import Callable
from typing import Any

# MindSpore 2.10's SoC feature table as msdet asks it (engine.runtime.ascend): the Atlas
# training series answers "classic" and "jit level O2 by default", A2 and later the
# high-quality dtype line (the SoC names 2.9's amp.py lists for it), inference chips neither.
SOC_FEATURES = {
    "ascend910": {"amp_loss_scale_train_classic_target", "jit_level_o2_default_ascend_jit"},
    "ascend910b": {"train_hq_dtype_line"},
    "ascend910_93": {"train_hq_dtype_line"},
    "ascend950": {"train_hq_dtype_line"},
    "ascend310p": set(),
    "ascend310b": set(),
}


def ascend_plugin_binds(name: str) -> bool:
    """Whether the installed MindSpore's Ascend plugin binds ``name`` for Python (pybind
    names are strings of the plugin libraries): the evidence that a class MindSpore's
    ``_c_expression`` only has with a card exists in this release."""
    import mindspore

    wanted = name.encode()
    folder = os.path.join(os.path.dirname(mindspore.__file__), "lib", "plugin", "ascend")
    for path in sorted(glob.glob(os.path.join(folder, "*.so*"))):
        with open(path, "rb") as f:
            if wanted + b"\0" in f.read():
                return True
    return False


class StandInAscend:
    """A context manager: inside it, MindSpore's device-side API answers as on ``soc``
    (module docstring). ``rank``/``world``: what ``mindspore.communication`` reports after
    ``init``. :attr:`calls`: ``(function, kwargs)`` of every recorded call, in order."""

    def __init__(self, soc: str, rank: int = 0, world: int = 1):
        if soc not in SOC_FEATURES:
            raise ValueError(f"no stand-in for {soc!r}: one of {sorted(SOC_FEATURES)}")
        self.soc = soc
        self.rank, self.world = int(rank), int(world)
        self.calls: list[tuple[str, dict]] = []
        self.precision_mode = ""
        self._undo: list[Callable[[], None]] = []

    def called(self, name: str) -> list[dict]:
        """The kwargs of every recorded call of ``name`` (e.g. ``"set_context"``)."""
        return [kwargs for fn, kwargs in self.calls if fn == name]

    def __enter__(self) -> StandInAscend:
        import mindspore as ms
        import mindspore._c_expression as c_expression
        import mindspore.communication as communication

        self._replace(c_expression, "MSContext", self._context_class(c_expression.MSContext))
        for name in ("set_device", "set_context", "set_auto_parallel_context",
                     "reset_auto_parallel_context"):  # fmt: skip
            self._replace(ms, name, self._recorder(name))
        self._replace(ms.device_context.ascend.op_precision, "precision_mode", self._set_precision)
        if ascend_plugin_binds("AscendOpPrecisionConf"):
            self._replace(c_expression, "AscendOpPrecisionConf", self._precision_conf(),
                          absent_ok=True)  # fmt: skip
        self._replace(communication, "init", self._recorder("init"))
        self._replace(communication, "get_rank", lambda *_: self.rank)
        self._replace(communication, "get_group_size", lambda *_: self.world)
        return self

    def __exit__(self, *exc) -> None:
        while self._undo:
            self._undo.pop()()

    def _replace(self, owner: Any, name: str, value: Any, absent_ok: bool = False) -> None:
        """Replace ``owner.name`` until exit; a name the release lacks is an error (the code
        under test would fail the same way on a card) unless ``absent_ok``."""
        if not hasattr(owner, name):
            if not absent_ok:
                raise AttributeError(f"{owner.__name__} has no attribute {name!r}")
            self._undo.append(lambda: delattr(owner, name))
        else:
            old = getattr(owner, name)
            self._undo.append(lambda: setattr(owner, name, old))
        setattr(owner, name, value)

    def _recorder(self, name: str) -> Callable:
        def record(*args, **kwargs):
            self.calls.append((name, {**{f"arg{i}": a for i, a in enumerate(args)}, **kwargs}))

        return record

    def _set_precision(self, mode: str) -> None:
        self.calls.append(("precision_mode", {"mode": mode}))
        self.precision_mode = mode

    def _context_class(self, real: type) -> type:
        """A class with exactly ``real``'s public methods: the SoC ones answer for the chip,
        the others are the real context's."""
        standin = self
        instance = real.get_instance()
        answers = {
            "get_ascend_soc_version": lambda: standin.soc,
            "ascend_soc_supports_feature": lambda feature: feature in SOC_FEATURES[standin.soc],
        }
        methods: dict[str, Any] = {}
        for name in dir(real):
            if name.startswith("__") or name == "get_instance":
                continue
            answer = answers.get(name)
            methods[name] = (
                staticmethod(answer)
                if answer
                else staticmethod(lambda *a, _n=name, **k: getattr(instance, _n)(*a, **k))
            )
        cls = type("MSContext", (), methods)
        single = cls()
        cls.get_instance = staticmethod(lambda: single)
        return cls

    def _precision_conf(self) -> type:
        """MindSpore's AscendOpPrecisionConf as msdet reads it: the mode set through the
        stand-in's ``precision_mode``."""
        standin = self

        class AscendOpPrecisionConf:
            @staticmethod
            def get_instance():
                return AscendOpPrecisionConf()

            def precision_mode(self) -> str:
                return standin.precision_mode

        return AscendOpPrecisionConf
