"""A Zip's tuple payload in hardware: its format (:class:`TupleFormat`), the format of a stream of
tuples (:func:`tuple_format`), and the wiring that hands a tuple's items to a unit's two operand
ports (:func:`connect_items`).

Blocks that only move tokens (the shape blocks of ``step_hw/shape.py``, Broadcast, the routers,
queues) carry the tuple whole; a compute unit whose function takes the tuple apart
(``Map(Zip(a, b), fn)``, :attr:`step_lang.graph.Node.unpacks_tuple`) reads its items on ``in0`` and
``in1``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from amaranth.hdl import Module
from amaranth.lib import data, stream

from step_lang.tokens import DONE, Stop, Token
from step_lang.types import TupleType

from .config import HwConfig
from .payload import KIND_BITS, Kind, TokenFormat, pack_fields, unpack_fields
from .payload_fields import token_layout

__all__ = ["TupleFormat", "connect_items", "format_from_json", "stream_format", "tuple_format"]


@dataclass(frozen=True)
class TupleFormat:
    """Payload format of a stream of 2-tuples (Zip's output).

    Layout, from the least significant bit: ``kind`` (``KIND_BITS``), ``level`` (``level_bits``), then
    ``data``, a ``StructLayout({"a": a.data_shape, "b": b.data_shape})``. Both items must use the
    same ``level_bits``. :meth:`pack` / :meth:`unpack` map ``(x, y)`` tuples, stops and done to
    payload integers, like :class:`~step_hw.payload.TokenFormat`.
    """

    a: TokenFormat
    b: TokenFormat

    def __post_init__(self):
        for name in ("a", "b"):
            value = getattr(self, name)
            if not isinstance(value, TokenFormat):
                raise TypeError(f"TupleFormat item {name} must be a TokenFormat, not {value!r}")
        if self.a.level_bits != self.b.level_bits:
            raise ValueError(
                f"TupleFormat items must have the same level_bits, not {self.a.level_bits} "
                f"and {self.b.level_bits}"
            )

    @property
    def level_bits(self) -> int:
        return self.a.level_bits

    @property
    def data_shape(self) -> data.StructLayout:
        return data.StructLayout({"a": self.a.data_shape, "b": self.b.data_shape})

    @property
    def data_bits(self) -> int:
        return self.a.data_bits + self.b.data_bits

    @property
    def width(self) -> int:
        return KIND_BITS + self.level_bits + self.data_bits

    def layout(self) -> data.StructLayout:
        return token_layout(self.level_bits, data=self.data_shape)

    def signature(self) -> stream.Signature:
        return stream.Signature(self.layout())

    def pack(self, token: Token) -> int:
        """The payload bits of one token (data tokens are ``(x, y)`` tuples)."""
        if token is DONE or isinstance(token, Stop):
            return self.a.pack(token)  # same kind and level fields
        if not isinstance(token, tuple) or len(token) != 2:
            raise ValueError(f"a tuple stream carries 2-tuples, not {type(token).__name__}")
        lb = self.level_bits
        a_bits = unpack_fields(lb, self.a.pack(token[0]))[2]
        b_bits = unpack_fields(lb, self.b.pack(token[1]))[2]
        return pack_fields(lb, kind=Kind.DATA, data=a_bits | b_bits << self.a.data_bits)

    def unpack(self, bits: int) -> Token:
        """The token of some payload bits (data as a tuple of two items)."""
        lb = self.level_bits
        kind, level, payload = unpack_fields(lb, bits)
        if kind != Kind.DATA:
            return self.a.unpack(pack_fields(lb, kind=kind, level=level))
        a_bits = payload & (2**self.a.data_bits - 1)
        b_bits = payload >> self.a.data_bits
        return (
            self.a.unpack(pack_fields(lb, kind=Kind.DATA, data=a_bits)),
            self.b.unpack(pack_fields(lb, kind=Kind.DATA, data=b_bits)),
        )


def tuple_format(elem: TupleType, config: HwConfig, *, where: str) -> TupleFormat:
    """The :class:`TupleFormat` of a stream of 2-tuples ``elem`` (a Zip's output); an item
    without a hardware encoding raises a :class:`StepTypeError` that starts with ``where``."""
    a, b = (TokenFormat.for_elem(e, config, where=where) for e in elem.items)
    return TupleFormat(a, b)


def stream_format(elem: Any, config: HwConfig, *, where: str) -> TokenFormat | TupleFormat:
    """The payload format of a stream of ``elem``: a :class:`TupleFormat` for a Zip's 2-tuples,
    else :meth:`TokenFormat.for_elem` (which raises, starting with ``where``, for an element
    without a hardware encoding)."""
    if isinstance(elem, TupleType):
        return tuple_format(elem, config, where=where)
    return TokenFormat.for_elem(elem, config, where=where)


def format_from_json(fields: dict[str, Any]) -> TokenFormat | TupleFormat:
    """The format a design's description gives a top-level stream (``dataclasses.asdict`` of a
    :class:`TokenFormat`, or of a :class:`TupleFormat`: its items ``a`` and ``b``)."""
    if set(fields) == {"a", "b"}:
        return TupleFormat(TokenFormat(**fields["a"]), TokenFormat(**fields["b"]))
    return TokenFormat(**fields)


def connect_items(m: Module, tuples: Any, items: Sequence[Any]) -> None:
    """Feed a stream of 2-tuples (``tuples``, a :class:`TupleFormat` stream's output side) to two
    input streams of a block that takes all its inputs in one cycle (``items``: a compute unit's
    ``in0`` and ``in1``, which ``StreamUnit._join`` drives with one ``ready``): each item stream
    shows the tuple's ``valid``, kind and level and its own item; the tuple is taken when the
    block takes its items. Wires only: no latency, initiation interval 1; stops and done reach
    both items alike."""
    a, b = items
    for port, item in ((a, tuples.payload.data.a), (b, tuples.payload.data.b)):
        m.d.comb += [
            port.valid.eq(tuples.valid),
            port.payload.kind.eq(tuples.payload.kind),
            port.payload.level.eq(tuples.payload.level),
            port.payload.data.eq(item),
        ]
    m.d.comb += tuples.ready.eq(a.ready)
