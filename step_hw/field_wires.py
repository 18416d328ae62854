"""Conversions without the field wires of structured signals, for builds nobody reads by name.

Amaranth 0.5's RTLIL back end gives every field of a signal with a layout its own wire, assigned
from the signal (``\\i__payload$2932.data[6][12]``, ...): names for waveform viewers and for
readers of the Verilog, no logic. A design on 16 x 16 BF16 tiles has a great many, one per
element of every 4,096-bit tile payload: 224,919 in a 16-expert MoE design, 59% of its 39 MB of
Verilog. Verilator reads them all and then removes them.

Inside :func:`omitted` (in this thread) a conversion emits none of them; everything else of the
Verilog is the same text. The fast co-simulation tier converts without them unless it records
waves (docs/cosim.md, "Field wires"); ``make rtl``, the cocotbext-axi tier and every build with
waves keep them. Amaranth versions other than 0.5, or one whose emitter has no
``emit_signal_fields``, keep them too (:func:`omittable` is False and :func:`omitted` changes nothing).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

__all__ = ["omittable", "omitted"]

_LOCK = threading.Lock()
_STATE = threading.local()
_INSTALLED: bool | None = None


def omittable() -> bool:
    """Whether conversions in this process can omit the field wires: wraps
    ``ModuleEmitter.emit_signal_fields`` once (thread safe) so that it does nothing in a thread
    inside :func:`omitted`; False when this Amaranth is not one it knows."""
    global _INSTALLED
    import amaranth

    with _LOCK:
        if _INSTALLED is None:
            from amaranth.back import rtlil

            emitter = getattr(rtlil, "ModuleEmitter", None)
            emit = getattr(emitter, "emit_signal_fields", None)
            _INSTALLED = amaranth.__version__.startswith("0.5.") and callable(emit)
            if _INSTALLED:

                def emit_signal_fields(self):
                    if not getattr(_STATE, "omit", False):
                        emit(self)

                emitter.emit_signal_fields = emit_signal_fields
        return _INSTALLED


@contextlib.contextmanager
def omitted(omit: bool = True) -> Iterator[bool]:
    """While the ``with`` block runs in this thread, conversions emit no field wires (when
    ``omit``); yields whether they are omitted."""
    if not omit or not omittable():
        yield False
        return
    before = getattr(_STATE, "omit", False)
    _STATE.omit = True
    try:
        yield True
    finally:
        _STATE.omit = before
