"""A faster path through Amaranth's netlist values for the conversions of hardware-size designs.

Amaranth 0.5 builds a netlist value (``amaranth.hdl._nir.Value``, a tuple of nets) by checking
every net it is given, also when it is given another netlist value, whose nets were checked when
it was made, or a slice of one. A design on 16 x 16 BF16 tiles moves 4,096-bit payloads through
every queue, buffer and unit, and a Fig. 8 design of ``make validate`` made 53 million such
checks: 45 of the 119 s of a profiled conversion. :func:`install` makes a value built from
another value, or sliced from one, a plain tuple copy; anything else is checked as before. The
Verilog is the same text (``tests/test_netlist_speed.py`` converts a design both ways); the
conversion of a Fig. 8 design took 48.5 s instead of 67.4 s (docs/cosim.md).

Installed once per process by :mod:`step_hw.elaborate` for every Amaranth version in the range the
project depends on (0.5) whose ``Value`` still has the two methods it replaces; otherwise nothing
changes.
"""

from __future__ import annotations

import threading

__all__ = ["install", "installed"]

_LOCK = threading.Lock()
_INSTALLED = False


def installed() -> bool:
    """Whether :func:`install` replaced the two methods in this process."""
    return _INSTALLED


def install() -> bool:
    """Replace ``_nir.Value.__new__`` and ``__getitem__`` by the fast path (idempotent; thread
    safe). False when this Amaranth is not one it knows."""
    global _INSTALLED
    import amaranth
    from amaranth.hdl import _nir

    with _LOCK:
        if _INSTALLED:
            return True
        value = getattr(_nir, "Value", None)
        if (
            not amaranth.__version__.startswith("0.5.")
            or value is None
            or value.__bases__ != (tuple,)
            or "__new__" not in value.__dict__
            or "__getitem__" not in value.__dict__
        ):
            return False
        checked_new = value.__new__
        new_tuple = tuple.__new__
        item = tuple.__getitem__

        def __new__(cls, nets=()):
            if type(nets) is value:  # its nets were checked when it was made
                return new_tuple(cls, nets)
            return checked_new(cls, nets)

        def __getitem__(self, index):
            if isinstance(index, slice):
                return new_tuple(type(self), item(self, index))
            return item(self, index)

        value.__new__ = staticmethod(__new__)
        value.__getitem__ = __getitem__
        _INSTALLED = True
        return True
