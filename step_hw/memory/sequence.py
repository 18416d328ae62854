"""Affine walks and the block sequencer shared by LinearLoad and Streamify.

Both operators expand each element of a driving stream into a *block*: a row-major walk over a
static ``shape`` whose element at multi-index ``m`` is number ``base + sum(m[d] * stride[d])``
(a tile of a tensor, an element of a buffer). The stop tokens follow step_lang's ``BlockWriter``
(``step_lang.stoprules``): inside a block, the stop after ``m`` is ``grid_stop(m, shape)``; the
block's closing ``S_k`` (``k = len(shape)``) is held back and merges with a following stop
``S_s`` of the driving stream into ``S_{s+k}``; a data element or the end releases it unchanged;
a rank-0 driving stream (no stops) writes it at once.

One dim of the walk may have a *runtime* extent (:class:`DynamicWalk`; a buffer with a dynamic
dim, read by Streamify): ``shape`` then holds that dim's bound, the driving token carries the
extent (``0..bound``), and the strides stay those of the bound. The walks of an extent 0 are
the interpreter's reads (``Streamify.read_tokens``, ``step_lang.stoprules.grid_tokens``): the
empty tensor's canonical form, a walk of stops alone, one closing stop per position of the dims
outside the one of extent 0 (``stops_from``).

The sequencer emits *entries*, one per cycle: ``ELEM(index, level)`` (an element followed by a stop
of ``level``, 0 for none), ``STOP(level)`` or ``DONE``. The blocks' consumers turn entries into
reads and tokens.
"""

from __future__ import annotations

import enum
import itertools
from collections.abc import Sequence

from amaranth.hdl import Const, Module, Mux, Signal, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from step_lang.stoprules import grid_stop

from ..checks import int_tuple
from ..payload import Kind
from ..payload_fields import token_layout
from ..run_time_geometry import params_layout, walk_fields, walk_values

__all__ = [
    "AffineWalk",
    "DynamicWalk",
    "Entry",
    "Sequencer",
    "checked_walk_bound",
    "walk_layout",
    "walk_reference",
]


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

    ``run_time=True``: ``shape`` is the bound of each dim, and the walk's own extents, steps and
    base come from the input ``params`` (:func:`walk_layout`; the fields of
    :func:`step_hw.run_time_geometry.walk_fields`, values from ``walk_values``), held while the
    walk runs; ``stride`` and ``base`` are then ignored. Cycle for cycle the walk built for those
    values from its first ``start`` on (before it, ``index`` is 0 instead of ``base``: the
    Sequencer reads it only during a walk): the same registers, a dim's last index compared with
    a field instead of a constant.
    """

    def __init__(
        self,
        *,
        shape: Sequence[int],
        stride: Sequence[int],
        base: int,
        index_width: int,
        run_time: bool = False,
    ):
        self._shape = tuple(shape)
        self._stride = tuple(stride)
        self._base = base
        self._run_time = run_time
        n = len(self._shape)
        members = {
            "start": In(1),
            "advance": In(1),
            "index": Out(index_width),
            "level": Out(range(n + 1)),
            "last": Out(1),
        }
        if run_time:
            members["params"] = In(walk_layout(self._shape, index_width))
        super().__init__(members)

    def elaborate(self, platform) -> Module:
        m = Module()
        shape, stride = self._shape, self._stride
        n = len(shape)
        counters = [Signal(range(max(2, size)), name=f"m{d}") for d, size in enumerate(shape)]
        if self._run_time:
            p = self.params
            ends = [p[f"end{d}"] for d in range(n)]
            deltas = [p[f"delta{d}"] for d in range(n)]
            base = p.base
        else:  # the same numbers, built in
            values = walk_values(shape, stride, self._base)
            ends = [values[f"end{d}"] for d in range(n)]
            deltas = [values[f"delta{d}"] for d in range(n)]
            base = self._base
        at_last = [c == e for c, e in zip(counters, ends, strict=True)]
        # trailing[d]: every dim from d inwards is at its last index (trailing[n] is true).
        trailing = [None] * n + [True]
        for d in reversed(range(n)):
            trailing[d] = at_last[d] if trailing[d + 1] is True else at_last[d] & trailing[d + 1]
        index = Signal.like(self.index, init=0 if self._run_time else self._base)
        m.d.comb += [
            self.index.eq(index),
            self.last.eq(trailing[0] if n else 1),
            self.level.eq(sum(t for t in trailing[:n]) if n else 0),
        ]
        with m.If(self.advance & ~self.last):
            for d in range(n):
                carry = at_last[d] if trailing[d + 1] is True else at_last[d] | ~trailing[d + 1]
                with m.If(~carry):
                    m.d.sync += counters[d].eq(counters[d] + 1)
                    m.d.sync += [counters[e].eq(0) for e in range(d + 1, n)]
                    m.d.sync += index.eq(index + deltas[d])
        with m.If(self.start):
            m.d.sync += [c.eq(0) for c in counters]
            m.d.sync += index.eq(base)
        return m


def checked_walk_bound(who: str, walk: Sequence[int], bound: Sequence[int]) -> tuple[int, ...]:
    """``bound`` (a run-time walk's extents, ``HwConfig.geometry_bounds``) checked against the
    ``walk`` it must hold: as many dims, none smaller; a one-line ``ValueError`` naming ``who``
    otherwise."""
    bound = int_tuple(who, "walk_bound", bound, minimum=1)
    if len(bound) != len(walk) or any(e > b for e, b in zip(walk, bound, strict=True)):
        raise ValueError(f"{who} walk {list(walk)} exceeds its walk_bound {list(bound)}")
    return bound


def walk_layout(bounds: Sequence[int], index_width: int) -> data.StructLayout:
    """The ``params`` of a run-time :class:`AffineWalk` built for ``bounds``: the fields of
    :func:`step_hw.run_time_geometry.walk_fields`, in that order."""
    return params_layout(walk_fields(bounds, index_width))


class DynamicWalk(wiring.Component):
    """An :class:`AffineWalk` whose dim ``dynamic`` has a runtime extent.

    ``shape[dynamic]`` is the extent's bound; ``stride`` and ``base`` are as in
    :class:`AffineWalk` (a buffer's strides are those of its bound, so they stay constants).

    With extent 0 the walk has no element: ``stops_from=q`` (``q <= dynamic``) makes it a walk
    of stops alone: dims ``q..`` are pinned at their last index, the outer ones walked, so
    ``level`` is ``(n - q) + grid_stop(outer)``: with ``q = dynamic``, the empty tensor's
    canonical form (``step_lang.stoprules.grid_tokens``: one empty sub-tensor per outer
    position, e.g. one empty innermost vector per outer position for a dynamic innermost dim).

    Ports: as :class:`AffineWalk`, plus ``extent`` (in, ``0..shape[dynamic]``), sampled with
    ``start``, and ``stops`` (out): the walk is one of stops alone. Each step is one adder, as
    in :class:`AffineWalk`: going to the next element of a dim outside the dynamic one also
    subtracts ``(extent - 1) * stride[dynamic]``, registered at ``start``.
    """

    def __init__(
        self,
        *,
        shape: Sequence[int],
        stride: Sequence[int],
        base: int,
        index_width: int,
        dynamic: int,
        stops_from: int,
    ):
        if not 0 <= stops_from <= dynamic:
            raise ValueError(
                f"DynamicWalk: stops_from must be in [0, {dynamic}] (the dynamic dim), "
                f"not {stops_from!r}"
            )
        self._shape = tuple(shape)
        self._stride = tuple(stride)
        self._base = base
        self._dynamic = dynamic
        self._stops_from = stops_from
        n = len(self._shape)
        super().__init__(
            {
                "start": In(1),
                "advance": In(1),
                "extent": In(range(self._shape[dynamic] + 1)),
                "index": Out(index_width),
                "level": Out(range(n + 1)),
                "last": Out(1),
                "stops": Out(1),
            }
        )

    def elaborate(self, platform) -> Module:
        m = Module()
        shape, stride, p, q = self._shape, self._stride, self._dynamic, self._stops_from
        n = len(shape)
        counters = [Signal(range(max(2, size)), name=f"m{d}") for d, size in enumerate(shape)]
        top = Signal(range(max(2, shape[p])))  # the dynamic dim's last index: max(extent, 1) - 1
        back = Signal(range(max(2, (shape[p] - 1) * stride[p] + 1)))  # top * stride[p]
        stops = Signal()
        ends = [
            top if d == p else Mux(stops, 0, size - 1) if d >= q else size - 1
            for d, size in enumerate(shape)
        ]
        at_last = [c == e for c, e in zip(counters, ends, strict=True)]
        trailing = [None] * n + [True]
        for d in reversed(range(n)):
            trailing[d] = at_last[d] if trailing[d + 1] is True else at_last[d] & trailing[d + 1]
        index = Signal.like(self.index, init=self._base)
        m.d.comb += [
            self.index.eq(index),
            self.last.eq(trailing[0]),
            self.level.eq(sum(t for t in trailing[:n])),
            self.stops.eq(stops),
        ]
        with m.If(self.advance & ~self.last):
            for d in range(n):
                delta = stride[d] - sum(
                    (shape[e] - 1) * stride[e] for e in range(d + 1, n) if e != p
                )
                step = index + delta - back if d < p else index + delta
                carry = at_last[d] if trailing[d + 1] is True else at_last[d] | ~trailing[d + 1]
                with m.If(~carry):
                    m.d.sync += counters[d].eq(counters[d] + 1)
                    m.d.sync += [counters[e].eq(0) for e in range(d + 1, n)]
                    m.d.sync += index.eq(step)
        with m.If(self.start):
            last = Mux(self.extent == 0, 0, self.extent - 1)
            m.d.sync += [c.eq(0) for c in counters]
            m.d.sync += [index.eq(self._base), top.eq(last), back.eq(last * stride[p])]
            m.d.sync += stops.eq(self.extent == 0)
        return m


def driving_layout(
    level_bits: int, slot_width: int, extent_bound: int | None = None
) -> data.StructLayout:
    """A driving-stream token: ``kind`` and ``level`` as in every token, plus a ``slot``, and
    for a walk with a runtime extent (``extent_bound`` its bound) the ``extent``."""
    if extent_bound is None:
        return token_layout(level_bits, slot=unsigned(slot_width))
    return token_layout(level_bits, slot=unsigned(slot_width), extent=range(extent_bound + 1))


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

    ``dynamic=p``: dim ``p`` of ``shape`` has a runtime extent (:class:`DynamicWalk`), carried by
    ``outer``'s data tokens (``extent``; latched with the slot). With extent 0 a walk writes
    ``STOP`` entries alone (``stops_from``, as :class:`DynamicWalk`), one per cycle (its last,
    the held ``S_k``, is no entry: that cycle only ends the walk).

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
    walk_params : In(:func:`walk_layout`), only with ``run_time=True``
        The walk's extents, steps and base (:class:`AffineWalk`'s ``params``; ``shape`` is then
        each dim's bound). Not with ``dynamic``.

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
        dynamic: int | None = None,
        stops_from: int | None = None,
        run_time: bool = False,
    ):
        if run_time and dynamic is not None:
            raise ValueError("Sequencer: a walk with a dynamic dim has no run-time geometry")
        if (dynamic is None) != (stops_from is None):
            raise ValueError("Sequencer: stops_from goes with a dynamic dim, and only with one")
        self._run_time = run_time
        self._shape, self._stride, self._base = tuple(shape), tuple(stride), base
        self._index_width = index_width
        self._eager = eager
        self._ref_inner = ref_inner
        self._dynamic = dynamic
        self._stops_from = stops_from
        bound = None if dynamic is None else self._shape[dynamic]
        self.entry_layout = token_layout(
            level_bits, index=unsigned(index_width), slot=unsigned(slot_width)
        )
        members = {
            "outer": In(stream.Signature(driving_layout(level_bits, slot_width, bound))),
            "entries": Out(stream.Signature(self.entry_layout)),
            "release": Out(1),
            "error": Out(1),
        }
        if ref_inner is not None:
            members["ref"] = In(stream.Signature(ref_layout(level_bits)))
        if run_time:
            members["walk_params"] = In(walk_layout(self._shape, index_width))
        super().__init__(members)

    def elaborate(self, platform) -> Module:
        m = Module()
        k = len(self._shape)
        c = self._ref_inner
        p = self._dynamic
        outer, ent = self.outer, self.entries
        ref = self.ref if c is not None else None
        if p is None:
            m.submodules.walk = walk = AffineWalk(
                shape=self._shape,
                stride=self._stride,
                base=self._base,
                index_width=self._index_width,
                run_time=self._run_time,
            )
            if self._run_time:
                m.d.comb += walk.params.eq(self.walk_params)
        else:
            m.submodules.walk = walk = DynamicWalk(
                shape=self._shape,
                stride=self._stride,
                base=self._base,
                index_width=self._index_width,
                dynamic=p,
                stops_from=self._stops_from,
            )
            if c is None or c == 0:  # the walk starts with the take of the buffer
                m.d.comb += walk.extent.eq(outer.payload.extent)
            else:  # one walk per reference element, of the buffer taken before
                extent = Signal.like(outer.payload.extent)
                m.d.comb += walk.extent.eq(extent)
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
                            if c is not None and p is not None:
                                m.d.sync += extent.eq(outer.payload.extent)
                            if c is None:
                                m.d.comb += walk.start.eq(1)
                                m.next = "WALK"
                            else:
                                m.next = "BUF"
                        else:  # c == 0: one read per (buffer, ref element) pair
                            with m.If(ref.valid):
                                m.d.comb += [outer.ready.eq(1), ref.ready.eq(1), walk.start.eq(1)]
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
                if p is None:
                    emit(Entry.ELEM, level)
                    step = taken
                else:  # a walk of stops alone when the extent is 0
                    held = walk.stops & last if not self._eager else Const(0)
                    with m.If(~held):  # the held S_k alone is no entry
                        emit(Mux(walk.stops, Entry.STOP, Entry.ELEM), level)
                    step = taken | held
                with m.If(step):
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
