"""Token payload fields by name, as Amaranth values (compare Glasgow's ``gateware/stream.py``,
``stream_put`` / ``stream_get``).

Every token payload starts with the same two fields, ``kind`` (:data:`~step_hw.payload.KIND_BITS`
wide) and ``level`` (the format's ``level_bits``), followed by what the stream carries: ``data``
for a graph stream (:meth:`TokenFormat.layout`), or a controller's own fields (a command's
``index``, a buffer reference's ``slot``). :func:`token_layout` is the one place that orders
them; :func:`put` builds a payload value from fields named as keywords, so no block spells out
the bit order with ``Cat``. Reading needs no helper: a port's payload is a ``data.View`` of its
layout (``port.payload.kind``, ``.level``, ``.data``).

:mod:`step_hw.payload` holds the integer side (``pack_fields`` / ``unpack_fields``) without
importing Amaranth.
"""

from __future__ import annotations

from typing import Any

from amaranth.hdl import Cat, Const, ShapeLike, Value, unsigned
from amaranth.lib import data

from . import signal_formats
from .payload import KIND_BITS

__all__ = ["put", "token_layout"]

# every block's ports carry these layouts: their signals' field formats are built when first read
signal_formats.install()


def token_layout(level_bits: int, **fields: ShapeLike) -> data.StructLayout:
    """``kind``, ``level`` (``level_bits`` wide), then ``fields`` in order, from the least
    significant bit."""
    return data.StructLayout({"kind": unsigned(KIND_BITS), "level": unsigned(level_bits), **fields})


def put(fmt: Any, **values: Value | int) -> Value:
    """The payload bits of format ``fmt`` (anything with a ``layout()``: a ``TokenFormat``, a
    ``TupleFormat``) with fields given by name; fields not named are zero.

    An integer becomes a constant of its field's width; a value is truncated to the field
    (``level=s + 1`` keeps the level's low bits, as the field would on assignment).
    """
    layout = fmt.layout()
    names = [name for name, _ in layout]
    unknown = sorted(set(values) - set(names))
    if unknown:
        raise TypeError(f"payload fields are {', '.join(names)}, not {', '.join(unknown)}")
    parts = []
    for name, field in layout:  # in offset order: the fields are packed without gaps
        value = values.get(name, 0)
        if isinstance(value, int):  # a Kind member or a plain level
            parts.append(Const(int(value), field.width))
        else:
            parts.append(Value.cast(value)[: field.width])
    return Cat(*parts)
