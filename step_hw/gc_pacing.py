"""Fewer full garbage collections while a design converts to Verilog.

A conversion builds a heap of millions of objects that live until it ends (Amaranth's fragments,
the netlist's cells and its tuples of nets: 0.9 GB for a Fig. 8 design on 16 x 16 BF16 tiles,
3 GB for the 16-expert MoE). CPython's collector walks that whole heap at every full
collection, which its default thresholds ``(700, 10, 10)`` start after every ten collections of
the middle generation once the heap has grown by a quarter: 21 full collections in one Fig. 8
conversion, a quarter of its CPU time. :func:`fewer_full_collections` raises only the third
threshold (:data:`FULL_EVERY`) for the duration: the young generations are still collected as
often as before, so short-lived garbage goes as soon as it did, and the cyclic garbage that
reaches the oldest generation waits longer (the heap's peak grows by about a seventh).

The measurements (Fig. 8 ``64 x 256``, 2 full collections instead of 21; the 16-expert static
MoE) and the decision are in docs/cosim.md ("Conversion and the garbage collector"). The
Verilog is the same text: the collector frees objects, it never changes what the program
computes.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["FULL_EVERY", "fewer_full_collections"]

#: collections of the middle generation between two full collections during a conversion
#: (CPython's default is 10)
FULL_EVERY = 1000

_LOCK = threading.Lock()
_depth = 0
_saved: tuple[int, ...] = ()


@contextmanager
def fewer_full_collections() -> Iterator[None]:
    """Within the block, a full collection at most every :data:`FULL_EVERY` collections of the
    middle generation; the thresholds in force before are restored when the last of the
    blocks open in this process (threads may nest or overlap them) exits. A third threshold
    already above :data:`FULL_EVERY` (the user's choice) is kept."""
    global _depth, _saved
    with _LOCK:
        if _depth == 0:
            _saved = gc.get_threshold()
            first, second, third = _saved
            gc.set_threshold(first, second, max(third, FULL_EVERY))
        _depth += 1
    try:
        yield
    finally:
        with _LOCK:
            _depth -= 1
            if _depth == 0:
                gc.set_threshold(*_saved)
