"""Signals whose shape is a data layout get their ``Format`` when it is first read.

Amaranth 0.5's ``Signal.__init__`` builds, for a signal with a ``ShapeCastable`` shape, the
``Format`` tree that names its fields (``signal._format``): one ``Format`` object and one slice
per element, at once. A 16 x 16 BF16 tile payload is an ``ArrayLayout`` of 256 elements, so every
port, queue entry and register of a hardware-size block builds hundreds of objects that only two
readers ever look at: the RTLIL back end's field wires (``emit_signal_fields``, which
:mod:`step_hw.field_wires` skips for the fast co-simulation tier) and the Python simulator's
waveform writer. Building the blocks of the 16-expert MoE of ``tests/test_hier_tiling_routing.py``
spent 20 of its 44 s there.

After :func:`install`, a data layout's ``format`` called by ``Signal.__init__`` itself (and only
by it; a caller's own ``layout.format(view, "")`` is computed as before) records its arguments,
and ``signal._format`` computes the same ``Format`` on first read, from the same layout and view,
then keeps it. The Verilog, with or without field wires, and the simulator's traces are the
same (``tests/test_signal_formats.py``). Installed once per process by the module that makes
token layouts (:mod:`step_hw.payload_fields`) and by :mod:`step_hw.elaborate` before a
conversion, for Amaranth 0.5 when every function it wraps is still there; otherwise nothing
changes.
"""

from __future__ import annotations

import functools
import sys
import threading
from typing import Any

__all__ = ["install", "installed"]

_LOCK = threading.Lock()
_INSTALLED = False
#: where a deferred format is kept in a signal's ``__dict__``
_SLOT = "_step_format"


class _Deferred:
    """A layout's ``format(view, "")``, not computed yet."""

    __slots__ = ("fn", "layout", "view")

    def __init__(self, fn: Any, layout: Any, view: Any) -> None:
        self.fn, self.layout, self.view = fn, layout, view


def installed() -> bool:
    """Whether :func:`install` took effect in this process."""
    return _INSTALLED


def _targets(data: Any) -> tuple[Any, ...]:
    """The classes whose own ``format`` builds a layout's ``Format`` tree."""
    return (data.Layout, data.ArrayLayout, data._AggregateMeta)


def _known(amaranth: Any, ast: Any, data: Any) -> bool:
    signal = getattr(ast, "Signal", None)
    return (
        amaranth.__version__.startswith("0.5.")
        and isinstance(signal, type)
        and hasattr(getattr(signal, "__init__", None), "__code__")
        and "_format" not in signal.__dict__
        and all(
            isinstance(getattr(data, name, None), type)
            for name in ("Layout", "ArrayLayout", "_AggregateMeta")
        )
        and all(callable(cls.__dict__.get("format")) for cls in _targets(data))
    )


def install() -> bool:
    """Defer the formats of signals with data-layout shapes (idempotent; thread safe). False
    when this Amaranth is not one it knows."""
    global _INSTALLED
    import amaranth
    from amaranth.hdl import _ast
    from amaranth.lib import data

    with _LOCK:
        if _INSTALLED:
            return True
        if not _known(amaranth, _ast, data):
            return False
        init_code = _ast.Signal.__init__.__code__

        def deferring(fn: Any) -> Any:
            @functools.wraps(fn)
            def format(self, value, format_spec):
                if format_spec == "" and sys._getframe(1).f_code is init_code:
                    return _Deferred(fn, self, value)
                return fn(self, value, format_spec)

            return format

        for cls in _targets(data):
            cls.format = deferring(cls.__dict__["format"])

        def get(signal: Any) -> Any:
            fmt = signal.__dict__[_SLOT]
            if type(fmt) is _Deferred:
                fmt = signal.__dict__[_SLOT] = fmt.fn(fmt.layout, fmt.view, "")
            return fmt

        def put(signal: Any, fmt: Any) -> None:
            signal.__dict__[_SLOT] = fmt

        _ast.Signal._format = property(get, put)
        _INSTALLED = True
        return True
