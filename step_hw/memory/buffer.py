"""On-chip buffers: Bufferize fills double-buffered memory, Streamify replays it.

A buffer reference has no token encoding of its own on a graph edge (``docs/stop_tokens.md``), so
the pair shares state in hardware: Bufferize owns an ``amaranth.lib.memory.Memory`` of ``slots``
buffers, and its output stream carries *slot numbers* (a data token names the slot that holds a
complete buffer) with the usual stop and done tokens. Streamify reads the slots through a
:class:`BufferPortSignature` port (``wiring.connect(m, streamify.rd, bufferize.rd)``) and
releases each slot after its last read, so with ``slots=2`` one buffer fills while the other
drains.

Buffers are sized statically. One buffer dim may be *dynamic* (``dynamic_dim``; a sympy symbol of
the graph whose bound :func:`step_hw.dyntile.symbol_bounds` knows): the memory is then sized by
the bound (``buffer_shape`` holds it), an element ``(i_0..i_{b-1})`` lies at its row-major
address in that max-extent grid, and each buffer reference carries its buffer's runtime extent
of the dim (an ``extent`` field beside the ``slot``; 0 for an empty buffer), from which
Streamify walks it (``Streamify.read_extents`` in step_lang). A dynamic buffer is a full grid:
every row of the dynamic dim equally long. Streamify reads a dynamic buffer whole, its dims
possibly permuted (``order``), with the empty cases of ``step_lang.stoprules.grid_tokens``.

Memory words: an element (a tile or a selector) is ``words`` words of at most
``config.mem_port_elems`` tile elements each (one word when the tile fits the port), so moving an
element costs ``words`` cycles on either side.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from amaranth.hdl import Cat, Const, Module, Mux, Signal, Value, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from step_lang import ops

from ..block_rules import buffer_extent, streamify_rule
from ..checks import (
    build_for_node,
    check_config,
    check_format,
    check_int,
    int_tuple,
    levels_fit,
    where,
)
from ..config import HwConfig
from ..contract import BUFFER_SLOTS, STREAMIFY_QUEUE_DEPTH, buffer_words
from ..payload import KIND_BITS, Kind, TokenFormat
from ..payload_fields import token_layout
from ..queue import Queue
from ..run_time_geometry import buffer_fields, buffer_of, params_layout
from .sequence import Entry, Sequencer, checked_walk_bound, driving_layout, walk_layout

__all__ = ["BufferGeometry", "BufferPortSignature", "Bufferize", "Streamify"]


@dataclass(frozen=True)
class BufferGeometry:
    """How ``slots`` buffers of ``shape`` elements of ``fmt`` lie in one memory.

    ``dynamic``: the buffer dim whose extent is known at run time only (``shape`` holds its
    bound), or ``None``.
    """

    fmt: TokenFormat
    shape: tuple[int, ...]
    slots: int
    port_elems: int
    dynamic: int | None = None

    @property
    def size(self) -> int:
        """Elements per buffer."""
        return math.prod(self.shape)

    @property
    def words(self) -> int:
        """Memory words per element (:func:`step_hw.contract.buffer_words`)."""
        return buffer_words(self.fmt, self.port_elems)

    @property
    def word_bits(self) -> int:
        """Bits of a memory word: ``port_elems`` tile elements (a selector whole); a dynamic
        tile's words are widened by its row count's bits, so it takes as many words (cycles)
        as a static tile of its bound."""
        if self.fmt.kind != "tile":
            return self.fmt.data_bits
        elems = min(self.fmt.rows * self.fmt.cols, self.port_elems) * self.fmt.elem_bits
        return elems + self.fmt.count_bits

    @property
    def depth(self) -> int:
        return self.slots * self.size * self.words

    @property
    def addr_width(self) -> int:
        return max(1, (self.depth - 1).bit_length())

    @property
    def slot_width(self) -> int:
        return max(1, (self.slots - 1).bit_length())

    @property
    def index_width(self) -> int:
        return max(1, (self.size - 1).bit_length())

    @property
    def strides(self) -> tuple[int, ...]:
        """Row-major element strides of the (max-extent) buffer."""
        return tuple(math.prod(self.shape[d + 1 :]) for d in range(len(self.shape)))

    def ref_layout(self) -> data.StructLayout:
        """Payload of the buffer-reference stream: ``kind``, ``level``, ``slot`` (and with a
        dynamic dim its ``extent``, ``0..bound``)."""
        bound = None if self.dynamic is None else self.shape[self.dynamic]
        return driving_layout(self.fmt.level_bits, self.slot_width, bound)

    def port_signature(self) -> BufferPortSignature:
        return BufferPortSignature(addr_width=self.addr_width, data_width=self.word_bits)


class BufferPortSignature(wiring.Signature):
    """The read port of a Bufferize's memory, seen from the Streamify that reads it.

    Members: ``addr`` (out) and ``data`` (in) of a synchronous read port (data one cycle after
    the address), and ``release`` (out), a one-cycle pulse: the oldest full slot is free.
    """

    def __init__(self, *, addr_width: int, data_width: int):
        self._addr_width, self._data_width = addr_width, data_width
        super().__init__({"addr": Out(addr_width), "data": In(data_width), "release": Out(1)})

    def __eq__(self, other: object) -> bool:
        return isinstance(other, BufferPortSignature) and (self._addr_width, self._data_width) == (
            other._addr_width,
            other._data_width,
        )

    def __hash__(self) -> int:
        return hash((self._addr_width, self._data_width))

    def __repr__(self) -> str:
        return f"BufferPortSignature(addr_width={self._addr_width}, data_width={self._data_width})"


def _geometry(
    who: str, fmt: Any, shape: Any, slots: Any, config: HwConfig, dynamic: Any = None
) -> BufferGeometry:
    check_format(who, "elem_format", fmt, kinds=("tile", "selector"))
    if isinstance(shape, (tuple, list)) and not all(isinstance(d, int) for d in shape):
        raise ValueError(
            f"{who} buffer shape must be static; a dynamic shape such as {list(map(str, shape))} "
            "has no fixed memory size"
        )
    shape = int_tuple(who, "buffer_shape", shape, minimum=1)
    if not shape:
        raise ValueError(f"{who} buffer_shape must have at least one dimension, not ()")
    check_int(who, "slots", slots)
    if dynamic is None:
        return BufferGeometry(fmt, shape, slots, config.mem_port_elems)
    check_int(who, "dynamic_dim", dynamic, 0, len(shape) - 1)
    return BufferGeometry(fmt, shape, slots, config.mem_port_elems, dynamic)


class Bufferize(wiring.Component):
    """Bufferize: collects the innermost ``rank`` dims of a stream into on-chip buffers.

    Parameters (keyword-only)
    -------------------------
    config : HwConfig
        ``mem_port_elems`` sets the memory word.
    elem_format : TokenFormat
        The input's elements (tiles or selectors).
    rank : int
        ``b``, the buffered dims (``1 <= b <= in_rank``).
    in_rank : int
        The input stream's rank.
    buffer_shape : sequence of int
        The static buffer shape ``[D_{b-1}..D_0]`` (outermost first), with a dynamic dim's bound.
    slots : int
        Buffers in memory (2: double buffering).
    dynamic_dim : int or None
        The buffer dim (an index into ``buffer_shape``) whose extent is known only at run time.
    run_time : bool
        The buffer's element count is a run-time setting (``HwConfig.geometry_bounds``):
        ``buffer_shape`` is then its bound, the memory holds ``slots`` buffers of the bound, a
        buffer lies at the start of its slot, and the input ``params`` gives the count. A
        static buffer only.

    Ports
    -----
    i : In(elem_format stream)
    o : Out(stream of :meth:`BufferGeometry.ref_layout`)
        A data token with the slot (and with a dynamic dim, the extent) of each complete buffer,
        ``[D_r..D_b]`` with stops.
    rd : In(BufferPortSignature)
        Streamify's read port and slot release.
    params : In({size}), only with ``run_time``
        The buffer's element count (:func:`step_hw.run_time_geometry.buffer_fields`), held
        while the block runs.
    error : Out(1)
        Sticky. A static buffer: it closed with a number of elements other than its static size
        (extra elements are dropped; the interpreter's type check rejects such streams). A
        dynamic buffer with elements: it is not a full grid of its static dims and one extent of
        the dynamic dim, or that extent exceeds the bound (elements from the first fault on are
        dropped; the interpreter's permuted read raises). A buffer without elements is an empty
        one (extent 0) whatever its inner stops, as in the interpreter.

    Protocol and timing
        An element is written in ``words`` cycles (one when it fits the port); inner stops
        (``< b``) are consumed in one cycle. A stop ``S_s`` with ``s >= b`` closes the buffer:
        the reference is emitted and, for ``s > b``, followed by ``S_{s-b}``; it waits until the
        output register is empty. Elements wait while every slot holds an unreleased buffer.
        So with two slots Bufferize fills buffer ``n + 1`` while Streamify reads buffer ``n``.
        A dynamic buffer has the same timing: per-dim index counters follow the elements and the
        inner stops (an inner ``S_s`` closes the ``s`` innermost dims and steps dim
        ``b - 1 - s``), so element ``(i_0..i_{b-1})`` is written at ``sum(i_d * stride_d)`` of
        the max-extent grid with no extra cycle; the extent is that of the dynamic dim's first
        closed row (all later rows must match it), 0 without elements. A dropped element takes
        one cycle. The closing stop also waits for a free slot: an empty buffer takes one too
        (a buffer with elements has one already).
    """

    def __init__(
        self,
        *,
        config: HwConfig,
        elem_format: TokenFormat,
        rank: int,
        in_rank: int,
        buffer_shape: Sequence[int],
        slots: int = BUFFER_SLOTS,
        dynamic_dim: int | None = None,
        run_time: bool = False,
        src_loc_at: int = 0,
    ):
        who = type(self).__name__
        config = check_config(who, config)
        in_rank = check_int(who, "in_rank", in_rank, 0)
        rank = check_int(who, "rank", rank)
        if run_time and dynamic_dim is not None:
            raise ValueError(f"{who} a buffer with a dynamic dim has no run-time size")
        self._run_time = run_time
        if rank > in_rank:
            raise ValueError(f"{who} rank must be in [1, in_rank={in_rank}], not {rank}")
        self._geo = geo = _geometry(who, elem_format, buffer_shape, slots, config, dynamic_dim)
        if len(geo.shape) != rank:
            raise ValueError(
                f"{who} buffer_shape {list(geo.shape)} must have rank={rank} dimensions"
            )
        levels_fit(who, "input", in_rank, elem_format.level_bits)
        self._rank, self._in_rank = rank, in_rank
        members: dict[str, Any] = {
            "i": In(elem_format.signature()),
            "o": Out(stream.Signature(geo.ref_layout())),
            "rd": In(geo.port_signature()),
            "error": Out(1),
        }
        if run_time:
            members["params"] = In(params_layout(buffer_fields(geo.size)))
        super().__init__(members)

    @classmethod
    def from_node(cls, node: Any, config: HwConfig, *, slots: int = BUFFER_SLOTS) -> Bufferize:
        """The block of a ``Bufferize`` node; its buffer shape is static but for at most one
        dim with a known bound."""

        def build() -> Bufferize:
            x = node.inputs[0]
            shape, dynamic = buffer_extent(node, "out", node.out_types[0].elem.shape)
            bound = dict(config.geometry_bounds).get(node.name)
            return cls(
                src_loc_at=3,
                config=config,
                elem_format=TokenFormat.for_elem(x.elem, config, where=where(node, "in")),
                rank=node.rank,
                in_rank=x.rank,
                buffer_shape=shape if bound is None else bound,
                slots=slots,
                dynamic_dim=dynamic,
                run_time=bound is not None,
            )

        return build_for_node(node, ops.Bufferize, build)

    @property
    def geometry(self) -> BufferGeometry:
        return self._geo

    @property
    def in_ports(self) -> list:
        return [self.i]

    @property
    def out_ports(self) -> list:
        return [self.o]

    def elaborate(self, platform) -> Module:
        m = Module()
        geo = self._geo
        b = self._rank
        m.submodules.mem = mem = Memory(shape=unsigned(geo.word_bits), depth=geo.depth, init=[])
        wp = mem.write_port()
        rp = mem.read_port()  # synchronous, not transparent: Streamify never reads a filling slot
        m.d.comb += [rp.addr.eq(self.rd.addr), self.rd.data.eq(rp.data)]

        fill = Signal(geo.slot_width)  # the slot being filled
        size = self.params.size if self._run_time else geo.size  # elements per buffer
        if geo.dynamic is None:
            count = Signal(range(geo.size + 1))  # its elements so far
        word = Signal(range(max(2, geo.words)))
        used = Signal(range(geo.slots + 1))  # slots holding complete, unreleased buffers
        error = Signal()
        m.d.comb += self.error.eq(error)

        out_valid = Signal()
        out = Signal(geo.ref_layout())
        pend = Signal()  # a stop S_{s-b} follows the reference in the output register
        pend_level = Signal.like(out.level)
        m.d.comb += [self.o.valid.eq(out_valid), self.o.payload.eq(out)]
        with m.If(self.o.valid & self.o.ready):
            with m.If(pend):
                m.d.sync += [out.kind.eq(Kind.STOP), out.level.eq(pend_level), pend.eq(0)]
            with m.Else():
                m.d.sync += out_valid.eq(0)

        tok = self.i.payload
        padded = Cat(Value.cast(tok.data), Const(0, geo.words * geo.word_bits - geo.fmt.data_bits))
        last_word = word == geo.words - 1
        released = self.rd.release
        closed = Signal()
        with m.If(closed & ~released):
            m.d.sync += used.eq(used + 1)
        with m.Elif(~closed & released):
            m.d.sync += used.eq(used - 1)

        if geo.dynamic is not None:
            self._dynamic_input(m, wp, padded, word, used, fill, error, out_valid, out, pend,
                                pend_level, closed)  # fmt: skip
            return m
        with m.If(self.i.valid), m.Switch(tok.kind):
            with m.Case(Kind.DATA):
                with m.If(count == size):  # more elements than the buffer holds
                    m.d.comb += self.i.ready.eq(1)
                    m.d.sync += error.eq(1)
                with m.Elif(used < geo.slots):
                    self._write(m, wp, padded, word, last_word, fill, count, [count.eq(count + 1)])
            with m.Case(Kind.STOP):
                with m.If(tok.level < b):
                    m.d.comb += self.i.ready.eq(1)  # implied by the static shape
                with m.Elif(~out_valid):
                    m.d.comb += [self.i.ready.eq(1), closed.eq(1)]
                    m.d.sync += self._offer(out_valid, out, fill, pend, pend_level, tok.level)
                    m.d.sync += count.eq(0)
                    with m.If(count != size):
                        m.d.sync += error.eq(1)
            with m.Default(), m.If(~out_valid):  # DONE
                m.d.comb += self.i.ready.eq(1)
                m.d.sync += [out_valid.eq(1), out.kind.eq(Kind.DONE), out.level.eq(0)]
        return m

    def _offer(self, out_valid, out, fill, pend, pend_level, level) -> list:
        """The sync statements that close the buffer in slot ``fill`` with a stop of ``level``:
        its reference into the output register (then ``S_{level-b}`` for ``level > b``), and
        the next slot to fill."""
        b, slots = self._rank, self._geo.slots
        return [
            out_valid.eq(1),
            out.kind.eq(Kind.DATA),
            out.level.eq(0),
            out.slot.eq(fill),
            pend.eq(level > b),
            pend_level.eq(level - b),
            fill.eq(0 if slots == 1 else (fill + 1) % slots),
        ]

    def _write(self, m, wp, padded, word, last_word, fill, at, done) -> None:
        """Write the input element's next memory word, at element ``at`` of slot ``fill``; its
        last word takes the token and runs ``done`` (sync statements)."""
        geo = self._geo
        m.d.comb += [
            wp.en.eq(1),
            wp.addr.eq((fill * geo.size + at) * geo.words + word),
            wp.data.eq(padded.word_select(word, geo.word_bits)),
        ]
        with m.If(last_word):
            m.d.comb += self.i.ready.eq(1)
            m.d.sync += [*done, word.eq(0)]
        with m.Else():
            m.d.sync += word.eq(word + 1)

    def _dynamic_input(
        self, m, wp, padded, word, used, fill, error, out_valid, out, pend, pend_level, closed
    ) -> None:
        """The input side of a buffer with a dynamic dim (the class docstring): index counters
        per dim, the grid checks, and the extent that the reference carries."""
        geo = self._geo
        b, d, shape = self._rank, geo.dynamic, geo.shape
        tok = self.i.payload
        last_word = word == geo.words - 1
        # idx[j]: the index in dim j (0 outermost); the innermost one counts its row's elements.
        idx = [Signal(range(n + 1), name=f"i{j}") for j, n in enumerate(shape)]
        elements = Signal()  # the buffer has an element
        bad = Signal()  # it is not a grid of the static dims and one extent within the bound
        seen = Signal()  # a row of the dynamic dim has closed: `extent` holds its extent
        extent = Signal(range(shape[d] + 1))

        def closing(s: int) -> tuple[Any, Any | None]:
            """A stop closing the ``s`` innermost dims: whether a closed row has the wrong
            extent, and the extent of the dynamic dim's row if it closes."""
            wrong, row = [], None
            for j in range(b - s, b):
                n = idx[j] if j == b - 1 else idx[j] + 1  # the closed row's extent
                if j == d:
                    row = n
                    wrong.append(seen & (n != extent))
                else:
                    wrong.append(n != shape[j])
            return Cat(*wrong).any(), row

        with m.If(self.i.valid), m.Switch(tok.kind):
            with m.Case(Kind.DATA):
                # Past the row's bound, or after a fault: dropped (no slot needed).
                with m.If((idx[b - 1] == shape[b - 1]) | bad):
                    m.d.comb += self.i.ready.eq(1)
                    m.d.sync += [bad.eq(1), elements.eq(1)]
                with m.Elif(used < geo.slots):
                    at = sum(i * stride for i, stride in zip(idx, geo.strides, strict=True))
                    done = [idx[b - 1].eq(idx[b - 1] + 1), elements.eq(1)]
                    self._write(m, wp, padded, word, last_word, fill, at, done)
            with m.Case(Kind.STOP):
                with m.If(tok.level < b):
                    m.d.comb += self.i.ready.eq(1)
                    with m.Switch(tok.level):
                        for s in range(1, b):  # closes dims b-s..b-1, steps dim a
                            a = b - 1 - s
                            with m.Case(s):
                                wrong, row = closing(s)
                                m.d.sync += [idx[j].eq(0) for j in range(b - s, b)]
                                with m.If(wrong):
                                    m.d.sync += bad.eq(1)
                                if row is not None:
                                    with m.If(~seen):
                                        m.d.sync += [extent.eq(row), seen.eq(1)]
                                with m.If(idx[a] == shape[a] - 1):  # a row past the bound
                                    m.d.sync += bad.eq(1)
                                with m.Else():
                                    m.d.sync += idx[a].eq(idx[a] + 1)
                # An empty buffer takes a slot too (Streamify releases one per reference),
                # without an element that waited for it.
                with m.Elif(~out_valid & (used < geo.slots)):
                    wrong, row = closing(b)
                    m.d.comb += [self.i.ready.eq(1), closed.eq(1)]
                    m.d.sync += self._offer(out_valid, out, fill, pend, pend_level, tok.level)
                    m.d.sync += [
                        out.extent.eq(Mux(elements, row, 0)),
                        *(i.eq(0) for i in idx),
                        elements.eq(0),
                        bad.eq(0),
                        seen.eq(0),
                    ]
                    with m.If(elements & (bad | wrong)):
                        m.d.sync += error.eq(1)
            with m.Default(), m.If(~out_valid):  # DONE
                m.d.comb += self.i.ready.eq(1)
                m.d.sync += [out_valid.eq(1), out.kind.eq(Kind.DONE), out.level.eq(0)]


class Streamify(wiring.Component):
    """Streamify: replays the buffers of a :class:`Bufferize` as streams.

    A *read* of a buffer walks ``read_shape`` with element number ``base + sum(m[d]*stride[d])``
    (default: the whole buffer in stored order), or the whole buffer with its dims permuted
    (``order``: read dim ``j`` walks buffer dim ``order[j]``, i.e. the affine read of the
    permuted shape and strides). Reads repeat ``prod(repeat)`` times per buffer (output
    ``[*in.shape, *repeat, *read_shape]``), or once per element of ``ref`` (output
    ``[*ref.shape, *read_shape]``; ``ref``'s outer dims are the buffer stream's, its
    ``c = ref_rank - in_rank`` inner dims say how often each buffer is read).

    A buffer with a dynamic dim (``dynamic_dim``) is read whole, in stored order or ``order``:
    the walk takes the dim's extent from each buffer reference (:class:`~.sequence.DynamicWalk`,
    strides of the max-extent grid), as the interpreter reads it (``Streamify.read_tokens``):
    with the dynamic dim of extent 0, in stored order or ``order``, a read is the empty
    tensor's canonical form: the closing stop of one empty sub-tensor per position of the dims
    read outside the dynamic one (an empty innermost vector per outer position when it is read
    innermost; the read's closing stop alone when it is read outermost).

    Parameters (keyword-only)
    -------------------------
    config : HwConfig
    elem_format : TokenFormat
        The buffered elements (tiles or selectors).
    buffer_shape : sequence of int
        Static (a dynamic dim's bound), as in the matching :class:`Bufferize`; so are ``slots``
        and ``dynamic_dim``.
    in_rank : int
        Rank of the buffer-reference stream.
    repeat : sequence of int
        Static repeats (not with ``ref``).
    read_shape, read_stride, base
        The affine read (both or neither of ``read_shape`` and ``read_stride``); a static
        buffer only.
    order : sequence of int
        A permutation of the buffer dims (not with an affine read).
    ref_format, ref_rank
        The reference stream (contents ignored), ``ref_rank >= in_rank``.
    walk_bound : sequence of int or None
        The read's walk (``repeat`` dims, then the read) is a run-time setting
        (``HwConfig.geometry_bounds``), built for these extents; the input ``params`` gives
        it. ``buffer_shape`` is then the buffer's bound, as in the run-time :class:`Bufferize`.
        An affine or stored-order read of a static buffer only.

    Ports
    -----
    i : In(stream of :meth:`BufferGeometry.ref_layout`), from Bufferize's ``o`` (with a
        dynamic dim, each reference carries its buffer's extent)
    ref : In(ref_format stream), only with a reference
    o : Out(elem_format stream)
    rd : Out(BufferPortSignature), to Bufferize's ``rd``
    params : In(:func:`~.sequence.walk_layout`), only with ``walk_bound``
        The read's walk (:func:`step_hw.run_time_geometry.walk_fields`), held while the block
        runs.
    error : Out(1)
        Sticky: ``ref`` did not line up with the buffer stream (the interpreter raises).

    Stop tokens
        As ``BlockWriter`` with ``k = len(repeat) + len(read_shape)`` (``len(read_shape)`` with a
        reference): inner stops ``grid_stop(m)``, the closing ``S_k`` held and merged with a
        following stop of the driving stream (the buffer stream, or ``ref``) into
        ``S_{s+k}``; a rank-0 driving stream releases it at once. A read of a dynamic extent 0
        writes its stops alone (above).

    Latency and throughput
        The first element leaves ``3 + words`` cycles after its buffer reference is offered
        (sequencer, memory read, output queue). Then one element per ``words`` cycles; a stop
        token after an element and a token that starts a read cost a cycle each, but the output
        queue hides them behind two-beat (element + stop) entries: measured one token per cycle
        for 4 buffers of 8 tiles each read 3 times (109 tokens in 109 cycles, no gap between
        buffers), and ``4 * elements + 2`` cycles with four words per element
        (tests/test_hw_memory.py). The output queue is credit-managed, so a stalled output
        stops the memory reads without losing data. The slot is released when its last read is
        issued. Dynamic buffers have the same timing; a read of an extent 0 commits one stop
        entry per cycle, no memory read, and ends with a cycle of no entry where its held
        ``S_k`` would be (with an eager, rank-0 buffer stream that ``S_k`` is an entry).
    """

    def __init__(
        self,
        *,
        config: HwConfig,
        elem_format: TokenFormat,
        buffer_shape: Sequence[int],
        in_rank: int,
        slots: int = BUFFER_SLOTS,
        repeat: Sequence[int] = (),
        read_shape: Sequence[int] | None = None,
        read_stride: Sequence[int] | None = None,
        base: int = 0,
        order: Sequence[int] | None = None,
        ref_format: TokenFormat | None = None,
        ref_rank: int | None = None,
        dynamic_dim: int | None = None,
        walk_bound: Sequence[int] | None = None,
        src_loc_at: int = 0,
    ):
        who = type(self).__name__
        config = check_config(who, config)
        self._geo = geo = _geometry(who, elem_format, buffer_shape, slots, config, dynamic_dim)
        if walk_bound is not None and (order is not None or geo.dynamic is not None):
            raise ValueError(
                f"{who} a run-time read (walk_bound) is an affine or stored-order read of a "
                "static buffer"
            )
        in_rank = check_int(who, "in_rank", in_rank, 0)
        repeat = int_tuple(who, "repeat", repeat, minimum=1)
        if (read_shape is None) != (read_stride is None):
            raise ValueError(f"{who} an affine read needs both read_shape and read_stride")
        if order is not None or geo.dynamic is not None:
            if read_shape is not None:
                what = "order" if order is not None else "a buffer with a dynamic dim"
                raise ValueError(f"{who} takes {what} or an affine read, not both")
            rank = len(geo.shape)
            order = tuple(range(rank)) if order is None else order
            if not isinstance(order, (tuple, list)) or sorted(
                v if isinstance(v, int) and not isinstance(v, bool) else -1 for v in order
            ) != list(range(rank)):
                raise ValueError(
                    f"{who} order must be a permutation of range({rank}), not {order!r}"
                )
            order = tuple(order)
            if base != 0:
                raise ValueError(f"{who} base needs an affine read (read_shape and read_stride)")
            read_shape = tuple(geo.shape[d] for d in order)
            read_stride = tuple(geo.strides[d] for d in order)
        self._order = order
        if read_shape is None:
            read_shape = geo.shape
            read_stride = tuple(math.prod(geo.shape[d + 1 :]) for d in range(len(geo.shape)))
            if base != 0:
                raise ValueError(f"{who} base needs an affine read (read_shape and read_stride)")
        read_shape = int_tuple(who, "read_shape", read_shape, minimum=1)
        read_stride = int_tuple(who, "read_stride", read_stride, minimum=0)
        if len(read_shape) != len(read_stride):
            raise ValueError(
                f"{who} read_stride {list(read_stride)} must have as many entries as read_shape "
                f"{list(read_shape)}"
            )
        base = check_int(who, "base", base, 0)
        last = base + sum((n - 1) * s for n, s in zip(read_shape, read_stride, strict=True))
        if last >= geo.size:
            raise ValueError(
                f"{who} read reaches element #{last} of a buffer of {geo.size} elements"
            )
        if ref_format is not None:
            if repeat:
                raise ValueError(f"{who} takes either repeat or ref_format, not both")
            check_format(who, "ref_format", ref_format, kinds=("tile", "selector"))
            ref_rank = check_int(who, "ref_rank", ref_rank, 0)
            if ref_rank < in_rank:
                raise ValueError(
                    f"{who} ref_rank must be at least in_rank={in_rank}, not {ref_rank}"
                )
            out_rank = ref_rank + len(read_shape)
        else:
            if ref_rank is not None:
                raise ValueError(f"{who} ref_rank needs a ref_format")
            out_rank = in_rank + len(repeat) + len(read_shape)
        levels_fit(who, "output", out_rank, elem_format.level_bits)
        self._fmt = elem_format
        self._in_rank, self._repeat = in_rank, repeat
        self._read_shape, self._read_stride, self._base = read_shape, read_stride, base
        self._ref_format, self._ref_rank = ref_format, ref_rank
        self._walk_bound = (
            None
            if walk_bound is None
            else checked_walk_bound(who, (*repeat, *read_shape), walk_bound)
        )
        members: dict[str, Any] = {
            "i": In(stream.Signature(geo.ref_layout())),
            "o": Out(elem_format.signature()),
            "rd": Out(geo.port_signature()),
            "error": Out(1),
        }
        if ref_format is not None:
            members["ref"] = In(ref_format.signature())
        if self._walk_bound is not None:
            members["params"] = In(walk_layout(self._walk_bound, geo.index_width))
        super().__init__(members)

    @classmethod
    def from_node(cls, node: Any, config: HwConfig, *, slots: int = BUFFER_SLOTS) -> Streamify:
        """The block of a ``Streamify`` node; its buffers are statically sized but for at most
        one dim with a known bound, which is read whole (stored order only for a dim that is
        outermost or not ragged, since the hardware reads a grid)."""

        def build() -> Streamify:
            buffers = node.inputs[0]
            streamify_rule(node, config)
            shape, dynamic = buffer_extent(node, "in", buffers.elem.shape)
            bounds = dict(config.geometry_bounds)
            walk_bound = bounds.get(node.name)
            if walk_bound is not None:
                shape = bounds.get(buffer_of(node).name, shape)
            ref = node.inputs[1] if len(node.inputs) > 1 else None
            return cls(
                src_loc_at=3,
                config=config,
                elem_format=TokenFormat.for_elem(buffers.elem.tile, config, where=where(node, "out")),
                buffer_shape=shape,
                in_rank=buffers.rank,
                slots=slots,
                repeat=node.repeat,
                read_shape=node.read_shape if node.affine else None,
                read_stride=node.stride if node.affine else None,
                base=node.base if node.affine else 0,
                order=node.order,
                ref_format=TokenFormat.for_elem(ref.elem, config, where=where(node, "ref")) if ref is not None else None,
                ref_rank=ref.rank if ref is not None else None,
                dynamic_dim=dynamic,
                walk_bound=walk_bound,
            )  # fmt: skip

        return build_for_node(node, ops.Streamify, build)

    @property
    def geometry(self) -> BufferGeometry:
        return self._geo

    @property
    def in_ports(self) -> list:
        return [self.i, self.ref] if self._ref_format is not None else [self.i]

    @property
    def out_ports(self) -> list:
        return [self.o]

    #: Output queue depth: covers the credit round trip (commit, read, queue latency) for II 1.
    QUEUE_DEPTH = STREAMIFY_QUEUE_DEPTH

    def _dynamic_walk(self) -> dict[str, int | None]:
        """The sequencer's ``dynamic`` and ``stops_from`` (``step_lang``'s reads of an extent 0,
        ``Streamify.read_tokens`` and ``stoprules.grid_tokens``): a walk of stops alone, one
        closing stop per position of the dims outside the dynamic one (in stored order and
        permuted alike)."""
        geo = self._geo
        if geo.dynamic is None:
            return {}
        walk = len(self._repeat) + self._order.index(geo.dynamic)
        return {"dynamic": walk, "stops_from": walk}

    def elaborate(self, platform) -> Module:
        m = Module()
        geo, fmt = self._geo, self._fmt
        c = None if self._ref_format is None else self._ref_rank - self._in_rank
        driving_rank = self._in_rank if c is None else self._ref_rank
        run_time = self._walk_bound is not None
        m.submodules.seq = seq = Sequencer(
            shape=self._walk_bound if run_time else (*self._repeat, *self._read_shape),
            stride=(0,) * len(self._repeat) + self._read_stride,
            base=self._base,
            index_width=geo.index_width,
            level_bits=fmt.level_bits,
            slot_width=geo.slot_width,
            eager=driving_rank == 0,
            ref_inner=c,
            run_time=run_time,
            **self._dynamic_walk(),
        )
        if run_time:
            m.d.comb += seq.walk_params.eq(self.params)
        wiring.connect(m, wiring.flipped(self.i), seq.outer)
        if c is not None:
            m.d.comb += [
                seq.ref.valid.eq(self.ref.valid),
                seq.ref.payload.kind.eq(self.ref.payload.kind),
                seq.ref.payload.level.eq(self.ref.payload.level),
                self.ref.ready.eq(seq.ref.ready),
            ]
        m.d.comb += [self.rd.release.eq(seq.release), self.error.eq(seq.error)]

        # -- issue: one memory word per cycle, an entry commits with its last word --------------
        depth = self.QUEUE_DEPTH
        queue_layout = token_layout(fmt.level_bits, data=unsigned(fmt.data_bits))
        m.submodules.queue = queue = Queue(shape=queue_layout, depth=depth)
        committed = Signal(range(depth + 1))  # entries committed and not yet out of the queue
        credit = committed < depth
        ent = seq.entries
        is_elem = ent.payload.kind == Entry.ELEM
        word = Signal(range(max(2, geo.words)))
        last_word = word == geo.words - 1
        m.d.comb += [
            ent.ready.eq(credit & (~is_elem | last_word)),
            self.rd.addr.eq((ent.payload.slot * geo.size + ent.payload.index) * geo.words + word),
        ]
        commit = ent.valid & ent.ready
        word_read = ent.valid & is_elem & (~last_word | credit)
        with m.If(word_read):
            m.d.sync += word.eq(0 if geo.words == 1 else (word + 1) % geo.words)

        # -- one cycle later: the word arrives; a committed entry enters the queue ---------------
        p_word, p_commit = Signal(), Signal()
        p_kind, p_level = Signal(KIND_BITS), Signal(fmt.level_bits)
        m.d.sync += [p_word.eq(word_read), p_commit.eq(commit)]
        with m.If(commit):
            m.d.sync += [p_kind.eq(ent.payload.kind), p_level.eq(ent.payload.level)]
        assembly = Signal(geo.words * geo.word_bits)
        whole = Cat(assembly[geo.word_bits :], self.rd.data)
        with m.If(p_word):
            m.d.sync += assembly.eq(whole)
        m.d.comb += [
            queue.i.valid.eq(p_commit),  # always has room: `committed` counts it
            queue.i.payload.kind.eq(p_kind),
            queue.i.payload.level.eq(p_level),
            queue.i.payload.data.eq(whole[: fmt.data_bits]),
        ]

        # -- output: an element with a trailing stop is two beats -----------------------------
        head = queue.o.payload
        phase = Signal()
        elem_beat = (head.kind == Entry.ELEM) & ~phase
        m.d.comb += self.o.valid.eq(queue.o.valid)
        with m.If(elem_beat):
            m.d.comb += [self.o.payload.kind.eq(Kind.DATA), self.o.payload.data.eq(head.data)]
        with m.Elif(head.kind == Entry.DONE):
            m.d.comb += self.o.payload.kind.eq(Kind.DONE)
        with m.Else():
            m.d.comb += [self.o.payload.kind.eq(Kind.STOP), self.o.payload.level.eq(head.level)]
        taken = self.o.valid & self.o.ready
        popped = Signal()
        with m.If(taken):
            with m.If(elem_beat & (head.level != 0)):
                m.d.sync += phase.eq(1)
            with m.Else():
                m.d.comb += [queue.o.ready.eq(1), popped.eq(1)]
                m.d.sync += phase.eq(0)
        with m.If(commit & ~popped):
            m.d.sync += committed.eq(committed + 1)
        with m.Elif(~commit & popped):
            m.d.sync += committed.eq(committed - 1)
        return m
