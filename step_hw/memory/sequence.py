"""Affine walks and the block sequencer shared by LinearLoad and Streamify.

Both operators expand each element of a driving stream into a *block*: a row-major walk over a
static ``shape`` whose element at multi-index ``m`` is number ``base + sum(m[d] * stride[d])``
(a tile of a tensor, an element of a buffer). The stop tokens follow step_lang's ``BlockWriter``
(``step_lang.stoprules``): inside a block, the stop after ``m`` is ``grid_stop(m, shape)``; the
block's closing ``S_k`` (``k = len(shape)``) is held back and merges with a following stop
``S_s`` of the driving stream into ``S_{s+k}``; a data element or the end releases it unchanged;
a rank-0 driving stream (no stops) writes it at once.

The sequencer emits *entries*, one per cycle: ``ELEM(index, level)`` (an element followed by a stop
of ``level``, 0 for none), ``STOP(level)`` or ``DONE``. The blocks' consumers turn entries into
reads and tokens.
"""

from __future__ import annotations

import enum
import itertools
from collections.abc import Sequence

from amaranth.hdl import Module, Mux, Signal, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from step_lang.stoprules import grid_stop

from ..payload import Kind
from ..payload_fields import token_layout

__all__ = ["AffineWalk", "Entry", "Sequencer", "walk_reference"]


class Entry(enum.IntEnum):
    """What a sequencer entry asks for."""

    ELEM = 0
    STOP = 1
    DONE = 2
    #: Used by consumers for an element they answer without memory (an out-of-range index).
    NONE = 3


def walk_reference(shape: Sequence[int], stride: Sequence[int], base: int) -> list[tuple[int, int]]:
    """The walk in Python: ``(index, level)`` per element, level = ``grid_stop``."""
    out = []
    for m in itertools.product(*(range(n) for n in shape)):
        out.append(
            (base + sum(i * s for i, s in zip(m, stride, strict=True)), grid_stop(m, tuple(shape)))
        )
    return out


class AffineWalk(wiring.Component):
    """A row-major walk over a static ``shape`` with element number ``base + sum(m[d]*stride[d])``.

    Ports: ``start`` (in, pulse: go to the first element), ``advance`` (in, pulse: go to the next
    element; ignored at the last), ``index`` (out), ``level`` (out: ``grid_stop`` of the current
    element, i.e. how many trailing dims are at their last index), ``last`` (out). Each step is
    one adder: going to the next element in dim ``d`` adds the precomputed
    ``stride[d] - sum_{e > d} (shape[e] - 1) * stride[e]``. An empty ``shape`` has one element.
    """

    def __init__(self, *, shape: Sequence[int], stride: Sequence[int], base: int, index_width: int):
        self._shape = tuple(shape)
        self._stride = tuple(stride)
        self._base = base
        n = len(self._shape)
        super().__init__(
            {
                "start": In(1),
                "advance": In(1),
                "index": Out(index_width),
                "level": Out(range(n + 1)),
                "last": Out(1),
            }
        )

    def elaborate(self, platform) -> Module:
        m = Module()
        shape, stride = self._shape, self._stride
        n = len(shape)
        counters = [Signal(range(max(2, size)), name=f"m{d}") for d, size in enumerate(shape)]
        at_last = [c == size - 1 for c, size in zip(counters, shape, strict=True)]
        # trailing[d]: every dim from d inwards is at its last index (trailing[n] is true).
        trailing = [None] * n + [True]
        for d in reversed(range(n)):
            trailing[d] = at_last[d] if trailing[d + 1] is True else at_last[d] & trailing[d + 1]
        index = Signal.like(self.index, init=self._base)
        m.d.comb += [
            self.index.eq(index),
            self.last.eq(trailing[0] if n else 1),
            self.level.eq(sum(t for t in trailing[:n]) if n else 0),
        ]
        with m.If(self.advance & ~self.last):
            for d in range(n):
                delta = stride[d] - sum((shape[e] - 1) * stride[e] for e in range(d + 1, n))
                carry = at_last[d] if trailing[d + 1] is True else at_last[d] | ~trailing[d + 1]
                with m.If(~carry):
                    m.d.sync += counters[d].eq(counters[d] + 1)
                    m.d.sync += [counters[e].eq(0) for e in range(d + 1, n)]
                    m.d.sync += index.eq(index + delta)
        with m.If(self.start):
            m.d.sync += [c.eq(0) for c in counters]
            m.d.sync += index.eq(self._base)
        return m


def driving_layout(level_bits: int, slot_width: int) -> data.StructLayout:
    """A driving-stream token: ``kind`` and ``level`` as in every token, plus a ``slot``."""
    return token_layout(level_bits, slot=unsigned(slot_width))


def ref_layout(level_bits: int) -> data.StructLayout:
    """A reference-stream token reduced to what a sequencer needs: ``kind`` and ``level``."""
    return token_layout(level_bits)


class Sequencer(wiring.Component):
    """Expands a driving stream into blocks of walk entries, with the block rule for stop tokens.

    Modes
    -----
    ``ref_inner=None`` (LinearLoad, Streamify with ``repeat``): one block per data token of
    ``outer``; a stop ``S_s`` of ``outer`` becomes ``S_{s+k}``.

    ``ref_inner=c`` (Streamify with ``ref``): ``outer`` carries buffers and ``ref`` says how often
    to read each: per buffer, one block per data token of ``ref`` until a ``ref`` stop of level
    ``>= c`` (``c = 0``: exactly one block per buffer, stops of both streams pair up); ``ref``
    stops become ``S_{s+k}``; a ``ref`` stop above ``c`` pairs with the buffer stream's
    ``S_{s-c}``, which is consumed.

    Ports
    -----
    outer : In(stream of :func:`driving_layout`)
    ref : In(stream of :func:`ref_layout`), only with ``ref_inner``
    entries : Out(stream of {kind (:class:`Entry`), level, index, slot})
        ``ELEM`` carries the walk index and the driving token's ``slot``.
    release : Out(1)
        One-cycle pulse when the last entry of a buffer's reads was taken (the buffer may be
        refilled from the next cycle on).
    error : Out(1)
        Sticky: the streams did not line up (the interpreter raises in these cases).

    One entry per cycle while a block is walked (initiation interval 1); a driving token that
    starts a block costs one cycle of its own. ``entries.valid`` depends only on state and the
    inputs' ``valid``, never on ``entries.ready``.
    """

    def __init__(
        self,
        *,
        shape: Sequence[int],
        stride: Sequence[int],
        base: int,
        index_width: int,
        level_bits: int,
        slot_width: int = 1,
        eager: bool,
        ref_inner: int | None = None,
    ):
        self._shape, self._stride, self._base = tuple(shape), tuple(stride), base
        self._index_width = index_width
        self._eager = eager
        self._ref_inner = ref_inner
        self.entry_layout = token_layout(
            level_bits, index=unsigned(index_width), slot=unsigned(slot_width)
        )
        members = {
            "outer": In(stream.Signature(driving_layout(level_bits, slot_width))),
            "entries": Out(stream.Signature(self.entry_layout)),
            "release": Out(1),
            "error": Out(1),
        }
        if ref_inner is not None:
            members["ref"] = In(stream.Signature(ref_layout(level_bits)))
        super().__init__(members)

    def elaborate(self, platform) -> Module:
        m = Module()
        k = len(self._shape)
        c = self._ref_inner
        m.submodules.walk = walk = AffineWalk(
            shape=self._shape, stride=self._stride, base=self._base, index_width=self._index_width
        )
        outer, ent = self.outer, self.entries
        ref = self.ref if c is not None else None
        pending = Signal()  # a block's closing S_k is held back
        slot = Signal.like(ent.payload.slot)
        skip_level = Signal.like(ent.payload.level)
        error = Signal()
        m.d.comb += [
            self.error.eq(error),
            ent.payload.slot.eq(slot),
            ent.payload.index.eq(walk.index),
        ]
        taken = ent.valid & ent.ready

        def emit(kind: Entry, level=0) -> None:
            m.d.comb += [ent.valid.eq(1), ent.payload.kind.eq(kind), ent.payload.level.eq(level)]

        def flush_pending() -> None:
            """Write the held ``S_k``; the caller re-examines its token next cycle."""
            emit(Entry.STOP, k)
            with m.If(taken):
                m.d.sync += pending.eq(0)

        with m.FSM():
            with m.State("IDLE"), m.If(outer.valid), m.Switch(outer.payload.kind):
                with m.Case(Kind.DATA):
                    with m.If(pending):
                        flush_pending()
                    with m.Else():
                        if c is None or c > 0:
                            m.d.comb += outer.ready.eq(1)
                            m.d.sync += slot.eq(outer.payload.slot)
                            if c is None:
                                m.d.comb += walk.start.eq(1)
                                m.next = "WALK"
                            else:
                                m.next = "BUF"
                        else:  # c == 0: one read per (buffer, ref element) pair
                            with m.If(ref.valid):
                                m.d.comb += [
                                    outer.ready.eq(1),
                                    ref.ready.eq(1),
                                    walk.start.eq(1),
                                ]
                                m.d.sync += slot.eq(outer.payload.slot)
                                m.next = "WALK"
                                with m.If(ref.payload.kind != Kind.DATA):
                                    m.d.sync += error.eq(1)
                with m.Case(Kind.STOP):
                    if c is None:
                        emit(Entry.STOP, outer.payload.level + k)
                        with m.If(taken):
                            m.d.comb += outer.ready.eq(1)
                            m.d.sync += pending.eq(0)
                    elif c == 0:
                        with m.If(ref.valid):
                            emit(Entry.STOP, outer.payload.level + k)
                            with m.If(taken):
                                m.d.comb += [outer.ready.eq(1), ref.ready.eq(1)]
                                m.d.sync += pending.eq(0)
                                with m.If(
                                    (ref.payload.kind != Kind.STOP)
                                    | (ref.payload.level != outer.payload.level)
                                ):
                                    m.d.sync += error.eq(1)
                    else:  # buffer-stream stops are consumed in SKIP
                        m.d.comb += outer.ready.eq(1)
                        m.d.sync += error.eq(1)
                with m.Default():  # DONE
                    with m.If(pending):
                        flush_pending()
                    with m.Elif(ref.valid if ref is not None else 1):
                        emit(Entry.DONE)
                        with m.If(taken):
                            m.d.comb += outer.ready.eq(1)
                            if ref is not None:
                                m.d.comb += ref.ready.eq(1)
                                with m.If(ref.payload.kind != Kind.DONE):
                                    m.d.sync += error.eq(1)

            with m.State("WALK"):
                last = walk.last
                level = walk.level if (k == 0 or self._eager) else Mux(last, 0, walk.level)
                emit(Entry.ELEM, level)
                with m.If(taken):
                    m.d.comb += walk.advance.eq(1)
                    with m.If(last):
                        if k > 0 and not self._eager:
                            m.d.sync += pending.eq(1)
                        if c is None or c == 0:
                            m.d.comb += self.release.eq(1)
                            m.next = "IDLE"
                        else:
                            m.next = "BUF"

            if c is not None and c > 0:
                with m.State("BUF"), m.If(ref.valid), m.Switch(ref.payload.kind):
                    with m.Case(Kind.DATA):
                        with m.If(pending):
                            flush_pending()
                        with m.Else():
                            m.d.comb += [ref.ready.eq(1), walk.start.eq(1)]
                            m.next = "WALK"
                    with m.Case(Kind.STOP):
                        emit(Entry.STOP, ref.payload.level + k)
                        with m.If(taken):
                            m.d.comb += ref.ready.eq(1)
                            m.d.sync += pending.eq(0)
                            with m.If(ref.payload.level > c):
                                m.d.comb += self.release.eq(1)
                                m.d.sync += skip_level.eq(ref.payload.level - c)
                                m.next = "SKIP"
                            with m.Elif(ref.payload.level == c):
                                m.d.comb += self.release.eq(1)
                                m.next = "IDLE"
                    with m.Default():  # the reference ended inside a buffer
                        m.d.comb += ref.ready.eq(1)
                        m.d.sync += error.eq(1)
                        m.d.comb += self.release.eq(1)
                        m.next = "IDLE"

                with m.State("SKIP"):
                    m.d.comb += outer.ready.eq(1)
                    with m.If(outer.valid):
                        with m.If(
                            (outer.payload.kind != Kind.STOP) | (outer.payload.level != skip_level)
                        ):
                            m.d.sync += error.eq(1)
                        m.next = "IDLE"
        return m
