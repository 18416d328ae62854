"""Shape operators in hardware: stop-token rewriters.

Flatten, Reshape, Promote, Expand, RepeatStatic and Zip never compute on data; they move, insert,
drop and re-level stop tokens (``docs/semantics.md``, "Shape operators"). Each block is a
:class:`amaranth.lib.wiring.Component` with :mod:`amaranth.lib.stream` ports carrying one token
per beat (:class:`~step_hw.payload.TokenFormat`), and can be built from a step_lang node with
``from_node(node, config)``. ``in_ports`` / ``out_ports`` list the stream interfaces in the order of
the node's inputs / outputs, for a generic graph elaborator.

Shared rules, so that hardware and interpreter cannot drift apart:

* stop-level rewrites are tabulated at elaboration time from the named functions in
  :mod:`step_lang.stoprules` (``flatten_stop``, ``promote_stop``, ``block_stop``,
  ``reshape_outer_stop``), over every level the input can carry;
* the held-back stop of :class:`~step_lang.stoprules.BlockWriter` (RepeatStatic, Reshape with
  ``rank=0``, Promote with ``rank=0``) is a one-bit flag plus a look at the *next input beat while it
  is offered* (the one-token lookahead: the beat is inspected, not taken). An input stop absorbs the
  held stop; data or done releases it first. With a rank-0 input the held stop is written at once,
  as BlockWriter does, so a feedback loop never waits on a stop that needs a successor.

Every output is a register (``valid`` never depends on ``ready``); an input's ``ready`` is
combinational from the output registers' ``ready`` (and, for Zip and Expand, from the other input's
``valid``), as the stream rules allow. Latencies and intervals in the docstrings are measured by
``tests/test_hw_shape.py`` with sources always valid and sinks always ready.

Zip's tuple payload (:class:`TupleFormat`) is defined in ``step_hw/tuple_format.py``: its data
field is a ``StructLayout`` ``{"a": <first item's data>, "b": <second item's data>}``, ``a`` in the
least significant bits; kind and level are as in every token.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
from amaranth.hdl import Const, Module, Signal, Value
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from step_lang import ops
from step_lang.graph import Node
from step_lang.stoprules import (
    block_stop,
    flatten_stop,
    partition_closes_chunk,
    promote_stop,
    reshape_outer_stop,
)
from step_lang.tokens import DONE, Stop

from .block_rules import reshape_rule, zip_rule
from .broadcast import node_format
from .checks import check_format, check_int, expect_node, rank_levels_fit
from .config import HwConfig
from .payload import Kind, TokenFormat
from .tuple_format import TupleFormat

__all__ = ["Expand", "Flatten", "Promote", "RepeatStatic", "Reshape", "TupleFormat", "Zip"]


_Format = TokenFormat | TupleFormat


# -- validation and node helpers ------------------------------------------------------------------


def _check_format(owner: str, name: str, fmt: Any) -> None:
    check_format(owner, name, fmt, types=(TokenFormat, TupleFormat))


def _node_format(node: Node, port: int, config: HwConfig) -> _Format:
    """The payload format of input ``port`` of ``node`` (:func:`step_hw.broadcast.node_format`:
    unsupported elements and stops beyond the level field name the node and port)."""
    return node_format(node, config, port)


def _build(node: Node, cls: type, **params: Any) -> Any:
    """``cls(**params)``; parameter errors become a StepTypeError naming the node.

    The parameters are checked (``cls._validate``) before the block exists: a component whose
    constructor raised would still be reported by Amaranth as "created but never used".
    """
    try:
        cls._validate(**params)
    except (TypeError, ValueError) as exc:
        raise node.error(None, f"no hardware block: {exc}") from exc
    return cls(**params)


# -- elaboration helpers --------------------------------------------------------------------------


def _free(port: stream.Interface) -> Value:
    """The output register of ``port`` can take a new token this cycle."""
    return ~port.valid | port.ready


def _drain(m: Module, port: stream.Interface) -> None:
    """Clear ``valid`` after a transfer; a later ``_emit`` in the same cycle overrides it."""
    with m.If(port.ready):
        m.d.sync += port.valid.eq(0)


def _emit(
    m: Module,
    port: stream.Interface,
    *,
    payload: Any = None,
    kind: Kind | None = None,
    level: Any = 0,
    data: Any = 0,
) -> None:
    """Load the output register of ``port``: a whole payload, or kind, level and data fields."""
    if payload is not None:
        m.d.sync += Value.cast(port.payload).eq(payload)
    else:
        m.d.sync += [
            port.payload.kind.eq(kind),
            port.payload.level.eq(level),
            Value.cast(port.payload.data).eq(data),
        ]
    m.d.sync += port.valid.eq(1)


def _level_table(
    m: Module, level: Value, rule: Callable[[int], int | None], levels: Iterable[int]
) -> tuple[Signal, Signal]:
    """Tabulate a stop-level rule (from :mod:`step_lang.stoprules`) over ``levels``.

    Returns the rewritten level and a flag that is low when the rule drops the stop (``None``).
    Levels outside ``levels`` (malformed input) pass unchanged.
    """
    out = Signal(len(level))
    keep = Signal(init=1)
    m.d.comb += out.eq(level)
    with m.Switch(level):
        for lvl in levels:
            new = rule(lvl)
            with m.Case(lvl):
                if new is None:
                    m.d.comb += keep.eq(0)
                else:
                    m.d.comb += out.eq(new)
    return out, keep


def _elaborate_blocks(
    m: Module, i: stream.Interface, o: stream.Interface, *, count: int, in_rank: int
) -> None:
    """Every element becomes a block of ``count`` copies closed by ``Stop(1)`` (BlockWriter, k = 1).

    Shared by RepeatStatic and Promote(rank=0) (which is RepeatStatic with ``count = 1``).
    """
    eager = in_rank == 0
    rep = Signal(range(count))
    pending = Signal()  # the last block's closing S1 is held back
    kind = i.payload.kind
    # Release the held S1 before data or done; an input stop absorbs it instead.
    flush = pending if eager else pending & i.valid & (kind != Kind.STOP)
    outer, _ = _level_table(m, i.payload.level, lambda s: block_stop(s, 1), range(1, in_rank + 1))
    can = _free(o)
    last = rep == count - 1
    m.d.comb += i.ready.eq(can & ~flush & ((kind != Kind.DATA) | last))
    _drain(m, o)
    with m.If(can):
        with m.If(flush):
            _emit(m, o, kind=Kind.STOP, level=1)
            m.d.sync += pending.eq(0)
        with m.Elif(i.valid & (kind == Kind.DATA)):
            _emit(m, o, payload=i.payload)
            m.d.sync += rep.eq(rep + 1)
            with m.If(last):
                m.d.sync += [rep.eq(0), pending.eq(1)]
        with m.Elif(i.valid & (kind == Kind.STOP)):
            _emit(m, o, kind=Kind.STOP, level=outer)
            m.d.sync += pending.eq(0)
        with m.Elif(i.valid):  # done
            _emit(m, o, payload=i.payload)


# -- Flatten --------------------------------------------------------------------------------------


class Flatten(wiring.Component):
    """Merge the dims of ranks ``lo..hi`` of a rank-``in_rank`` stream (step_lang ``Flatten``).

    Ports
        ``i`` (In): the input stream; ``o`` (Out): the flattened stream, same ``fmt``.
    Protocol
        :mod:`amaranth.lib.stream`; ``o`` is a register, ``i.ready = ~o.valid | o.ready``.
    Latency
        1 cycle (a token taken in cycle *t* is offered in *t + 1*).
    Throughput
        Initiation interval 1: one input token per cycle; a dropped stop costs an output slot.
    Stop tokens
        ``flatten_stop``: levels in ``(lo, hi]`` become ``lo`` (dropped when ``lo = 0``), higher
        levels fall by ``hi - lo``; data and done pass unchanged.
    """

    def __init__(self, *, fmt: _Format, in_rank: int, lo: int, hi: int):
        self._validate(fmt=fmt, in_rank=in_rank, lo=lo, hi=hi)
        self.fmt, self.in_rank, self.lo, self.hi = fmt, in_rank, lo, hi
        super().__init__({"i": In(fmt.signature()), "o": Out(fmt.signature())})

    @classmethod
    def _validate(cls, *, fmt: _Format, in_rank: int, lo: int, hi: int) -> None:
        owner = cls.__name__
        _check_format(owner, "fmt", fmt)
        check_int(owner, "in_rank", in_rank, 1)
        check_int(owner, "lo", lo, 0, in_rank)
        check_int(owner, "hi", hi, 0, in_rank)
        if hi <= lo:
            raise ValueError(f"{owner} hi must be greater than lo ({lo}), not {hi}")
        rank_levels_fit(owner, "input", in_rank, fmt.level_bits)

    @classmethod
    def from_node(cls, node: ops.Flatten, config: HwConfig) -> Flatten:
        expect_node(cls, node, ops.Flatten)
        fmt = _node_format(node, 0, config)
        return _build(node, cls, fmt=fmt, in_rank=node.inputs[0].rank, lo=node.lo, hi=node.hi)

    @property
    def in_ports(self) -> list[stream.Interface]:
        return [self.i]

    @property
    def out_ports(self) -> list[stream.Interface]:
        return [self.o]

    def elaborate(self, platform) -> Module:
        m = Module()
        i, o = self.i, self.o
        level, keep = _level_table(
            m,
            i.payload.level,
            lambda s: flatten_stop(s, self.lo, self.hi),
            range(1, self.in_rank + 1),
        )
        can = _free(o)
        m.d.comb += i.ready.eq(can)
        _drain(m, o)
        with m.If(i.valid & can):
            with m.If(i.payload.kind != Kind.STOP):
                _emit(m, o, payload=i.payload)
            with m.Elif(keep):
                _emit(m, o, kind=Kind.STOP, level=level)
        return m


# -- Reshape --------------------------------------------------------------------------------------


class Reshape(wiring.Component):
    """Split the dim of ``rank`` into chunks of ``chunk`` (step_lang ``Reshape``).

    Parameters
        ``fmt``, ``in_rank``: the input's payload format and rank. ``chunk``: a positive integer.
        ``rank``: the split dim, ``0 <= rank <= in_rank``. ``pad``: the element written to fill a
        short last chunk (``rank = 0`` only), a value ``fmt.pack`` accepts; ``None`` leaves the
        padding logic out (``from_node`` allows it only when the innermost dim is static, hence
        divisible: a short vector would then close a short chunk, unchecked). ``pad_flags``: add
        the second output.
    Ports
        ``i`` (In): input. ``o`` (Out): reshaped stream, ``fmt``. ``pad_flags`` (Out, only with
        ``pad_flags=True``): the same token structure with ``[1,1]`` bool tiles, 1 for padding.
    Protocol
        Both outputs are registers loaded in the same cycle: a token is produced only when both
        can take it, so the two outputs move in lockstep with independent sinks.
    Latency
        1 cycle, except the held stop of ``rank = 0`` (below).
    Throughput
        ``rank > 0``: initiation interval 1. ``rank = 0``: one output token per cycle; the input
        waits while padding and held stops are written.
    Stop tokens
        ``rank > 0``: ``reshape_outer_stop`` (every ``chunk``-th stop of level ``rank`` and every
        higher stop rise by one); data and done pass. ``rank = 0``: BlockWriter with ``k = 1``:
        every ``chunk``-th element closes a chunk with ``S1``, which is held back: the next input
        beat is inspected (not taken); a stop ``S_s`` absorbs it and is written ``S_{s+1}`` (after
        padding a short chunk), data or done release it first. The held stop therefore leaves
        one cycle after the *next* input token arrives. With ``in_rank = 0`` nothing can absorb it
        and it is written at once.
    """

    def __init__(
        self,
        *,
        fmt: _Format,
        in_rank: int,
        chunk: int,
        rank: int = 0,
        pad: Any = None,
        pad_flags: bool = False,
    ):
        self._pad_bits = self._validate(
            fmt=fmt, in_rank=in_rank, chunk=chunk, rank=rank, pad=pad, pad_flags=pad_flags
        )
        self.fmt, self.in_rank, self.chunk, self.rank = fmt, in_rank, chunk, rank
        self.pad = pad
        self.flags_fmt = TokenFormat("tile", rows=1, cols=1, elem_bits=1, level_bits=fmt.level_bits)
        members = {"i": In(fmt.signature()), "o": Out(fmt.signature())}
        if pad_flags:
            members["pad_flags"] = Out(self.flags_fmt.signature())
        super().__init__(members)

    @classmethod
    def _validate(
        cls,
        *,
        fmt: _Format,
        in_rank: int,
        chunk: int,
        rank: int = 0,
        pad: Any = None,
        pad_flags: bool = False,
    ) -> int | None:
        """Check the parameters; the payload bits of ``pad`` (``None`` without padding)."""
        owner = cls.__name__
        _check_format(owner, "fmt", fmt)
        check_int(owner, "in_rank", in_rank, 0)
        check_int(owner, "chunk", chunk, 1)
        check_int(owner, "rank", rank, 0, in_rank)
        if not isinstance(pad_flags, bool):
            raise TypeError(f"{owner} pad_flags must be a bool, not {pad_flags!r}")
        rank_levels_fit(owner, "output", in_rank + 1, fmt.level_bits)
        if pad is None:
            return None
        if rank != 0:
            raise ValueError(f"{owner} pad applies to rank 0 only, not rank {rank}")
        if pad is DONE or isinstance(pad, Stop):
            raise TypeError(f"{owner} pad must be a data element, not {pad!r}")
        try:
            return fmt.pack(pad)
        except ValueError as exc:
            raise ValueError(f"{owner} pad does not fit the format: {exc}") from None

    @classmethod
    def from_node(cls, node: ops.Reshape, config: HwConfig) -> Reshape:
        expect_node(cls, node, ops.Reshape)
        fmt = _node_format(node, 0, config)
        x = node.inputs[0]
        reshape_rule(node, config)
        pad = None if node.pad is None or node.rank > 0 else np.asarray(node.pad)
        return _build(
            node,
            cls,
            fmt=fmt,
            in_rank=x.rank,
            chunk=node.chunk,
            rank=node.rank,
            pad=pad,
            pad_flags=len(node.out_types) == 2,
        )

    @property
    def in_ports(self) -> list[stream.Interface]:
        return [self.i]

    @property
    def out_ports(self) -> list[stream.Interface]:
        return [self.o, self.pad_flags] if "pad_flags" in self.signature.members else [self.o]

    def elaborate(self, platform) -> Module:
        m = Module()
        outs = self.out_ports
        can = Signal()
        m.d.comb += can.eq(_free(outs[0]) if len(outs) == 1 else _free(outs[0]) & _free(outs[1]))
        for port in outs:
            _drain(m, port)
        if self.rank > 0:
            self._elaborate_outer(m, can)
        else:
            self._elaborate_inner(m, can)
        return m

    def _both(
        self, m: Module, *, kind: Kind, level: Any = 0, payload: Any = None, flag: int = 0
    ) -> None:
        """Write a token to ``o`` (``payload``, or ``kind`` and ``level``) and its flag token (same
        kind and level, data ``flag``) to ``pad_flags``."""
        if payload is not None:
            _emit(m, self.o, payload=payload)
        else:
            _emit(m, self.o, kind=kind, level=level)
        if "pad_flags" in self.signature.members:
            _emit(m, self.pad_flags, kind=kind, level=level, data=flag)

    def _elaborate_outer(self, m: Module, can: Value) -> None:
        i, chunk = self.i, self.chunk
        seen = Signal(range(chunk))  # stops of level `rank` in the current chunk
        last = seen == chunk - 1
        # reshape_outer_stop tabulated per level, with the counter at its last value and at a
        # value before it: chunk - 2 tells "keep" from "reset" (with chunk = 2 it is 0, the only
        # value before the last, where the two agree).
        table = {}
        for s in range(1, self.in_rank + 1):
            for is_last, v in ((True, chunk - 1), (False, max(chunk - 2, 0))):
                out, new = reshape_outer_stop(s, self.rank, v, chunk)
                table[s, is_last] = (
                    out,
                    "keep" if new == v else "inc" if new == v + 1 else "reset",
                )
        level = Signal(len(i.payload.level))
        m.d.comb += i.ready.eq(can)
        with m.If(i.valid & can):
            with m.If(i.payload.kind == Kind.STOP):
                m.d.comb += level.eq(i.payload.level)
                with m.Switch(i.payload.level):
                    for s in range(1, self.in_rank + 1):
                        with m.Case(s):
                            for is_last, cond in ((True, last), (False, ~last)):
                                out, act = table[s, is_last]
                                with m.If(cond):
                                    m.d.comb += level.eq(out)
                                    if act == "inc":
                                        m.d.sync += seen.eq(seen + 1)
                                    elif act == "reset":
                                        m.d.sync += seen.eq(0)
                self._both(m, kind=Kind.STOP, level=level)
            with m.Elif(i.payload.kind == Kind.DATA):
                self._both(m, kind=Kind.DATA, payload=i.payload)
            with m.Else():
                self._both(m, kind=Kind.DONE, payload=i.payload)

    def _elaborate_inner(self, m: Module, can: Value) -> None:
        i, chunk = self.i, self.chunk
        eager = self.in_rank == 0
        count = Signal(range(chunk))
        pending = Signal()  # the last chunk's closing S1 is held back
        kind = i.payload.kind
        flush = pending if eager else pending & i.valid & (kind != Kind.STOP)
        outer, _ = _level_table(
            m, i.payload.level, lambda s: block_stop(s, 1), range(1, self.in_rank + 1)
        )
        last = count == chunk - 1
        short = count != 0  # a stop or done ends the vector mid-chunk
        padding = self._pad_bits is not None
        # Data is taken at once; a stop or done waits while a short chunk is padded.
        takes = (kind == Kind.DATA) | ~short if padding else Const(1)
        m.d.comb += i.ready.eq(can & ~flush & takes)

        def advance() -> None:
            m.d.sync += count.eq(count + 1)
            with m.If(last):
                m.d.sync += [count.eq(0), pending.eq(1)]

        with m.If(can):
            with m.If(flush):
                self._both(m, kind=Kind.STOP, level=1)
                m.d.sync += pending.eq(0)
            with m.Elif(i.valid):
                with m.If(kind == Kind.DATA):
                    self._both(m, kind=Kind.DATA, payload=i.payload)
                    advance()
                if padding:
                    with m.Elif(short):
                        self._both(m, kind=Kind.DATA, payload=self._pad_bits, flag=1)
                        advance()
                with m.Elif(kind == Kind.STOP):
                    self._both(m, kind=Kind.STOP, level=outer)
                    m.d.sync += [pending.eq(0), count.eq(0)]
                with m.Else():
                    self._both(m, kind=Kind.DONE, payload=i.payload)
                    m.d.sync += count.eq(0)


# -- Promote --------------------------------------------------------------------------------------


class Promote(wiring.Component):
    """Add a dimension of size 1 (step_lang ``Promote``).

    Parameters
        ``fmt``, ``in_rank``: the input's format and rank ``a``. ``rank``: ``None`` for the paper
        form (a new outermost dim of size ``1 if D_a > 0 else 0``) or the position
        ``0 <= p <= a`` of the new dim (the artifact's form).
    Ports
        ``i`` (In), ``o`` (Out), both ``fmt``.
    Protocol
        ``o`` is a register; ``i.ready`` is combinational from ``o.ready`` and the block's state.
    Latency and throughput
        ``p > 0``: 1 cycle, initiation interval 1 (a stateless level rewrite).
        ``p = 0``: RepeatStatic with ``count = 1``: one output token per cycle; the held ``S1`` of
        every element leaves one cycle after the next input token arrives.
        Paper form, ``a = 0``: 1 cycle, interval 1; ``S1`` is inserted before done in a non-empty
        stream (one extra cycle). Paper form, ``a > 0``: every ``S_a`` is held in a one-bit
        lookahead flag until the next token shows whether it is the last; a one-token skid
        register keeps the input moving meanwhile. Input interval 1; the output has one bubble
        when a stop is held with the skid empty (the first ``S_a`` after the input paused), then
        one token per cycle. Data latency is 1 cycle, 2 once the skid is in use; a held ``S_a``
        leaves one cycle after its successor arrives. Data is never held waiting for a successor.
    Stop tokens
        ``p > 0``: ``promote_stop`` (levels ``>= p`` rise by one). ``p = 0``: BlockWriter, ``k = 1``.
        Paper form: the last ``S_a`` becomes ``S_{a+1}``; an empty stream stays ``D``.
    """

    def __init__(self, *, fmt: _Format, in_rank: int, rank: int | None = None):
        self._validate(fmt=fmt, in_rank=in_rank, rank=rank)
        self.fmt, self.in_rank, self.rank = fmt, in_rank, rank
        super().__init__({"i": In(fmt.signature()), "o": Out(fmt.signature())})

    @classmethod
    def _validate(cls, *, fmt: _Format, in_rank: int, rank: int | None = None) -> None:
        owner = cls.__name__
        _check_format(owner, "fmt", fmt)
        check_int(owner, "in_rank", in_rank, 0)
        if rank is not None:
            check_int(owner, "rank", rank, 0, in_rank)
        rank_levels_fit(owner, "output", in_rank + 1, fmt.level_bits)

    @classmethod
    def from_node(cls, node: ops.Promote, config: HwConfig) -> Promote:
        expect_node(cls, node, ops.Promote)
        fmt = _node_format(node, 0, config)
        return _build(node, cls, fmt=fmt, in_rank=node.inputs[0].rank, rank=node.rank)

    @property
    def in_ports(self) -> list[stream.Interface]:
        return [self.i]

    @property
    def out_ports(self) -> list[stream.Interface]:
        return [self.o]

    def elaborate(self, platform) -> Module:
        m = Module()
        if self.rank == 0:
            _elaborate_blocks(m, self.i, self.o, count=1, in_rank=self.in_rank)
        elif self.rank is not None:
            self._elaborate_positional(m)
        elif self.in_rank == 0:
            self._elaborate_outermost_rank0(m)
        else:
            self._elaborate_outermost(m)
        return m

    def _elaborate_positional(self, m: Module) -> None:
        i, o = self.i, self.o
        level, _ = _level_table(
            m, i.payload.level, lambda s: promote_stop(s, self.rank), range(1, self.in_rank + 1)
        )
        can = _free(o)
        m.d.comb += i.ready.eq(can)
        _drain(m, o)
        with m.If(i.valid & can):
            with m.If(i.payload.kind == Kind.STOP):
                _emit(m, o, kind=Kind.STOP, level=level)
            with m.Else():
                _emit(m, o, payload=i.payload)

    def _elaborate_outermost_rank0(self, m: Module) -> None:
        i, o = self.i, self.o
        seen = Signal()  # a data token went by: the stream is not empty
        can = _free(o)
        is_done = i.payload.kind == Kind.DONE
        m.d.comb += i.ready.eq(can & ~(is_done & seen))
        _drain(m, o)
        with m.If(i.valid & can):
            with m.If(is_done & seen):
                _emit(m, o, kind=Kind.STOP, level=1)
                m.d.sync += seen.eq(0)
            with m.Else():
                _emit(m, o, payload=i.payload)
                m.d.sync += seen.eq(~is_done)

    def _elaborate_outermost(self, m: Module) -> None:
        i, o, a = self.i, self.o, self.in_rank
        held = Signal()  # an S_a was taken; the next token tells whether it was the last
        skid = Signal(self.fmt.layout())  # a token taken while the held stop went out
        skid_valid = Signal()
        can = _free(o)
        is_last_level = (i.payload.kind == Kind.STOP) & (i.payload.level == a)
        is_done = i.payload.kind == Kind.DONE
        # Invariant: held implies ~skid_valid (a stop is held only behind everything else).
        # The input is taken whenever the output moves, except a done that must wait for the
        # held stop to be written as S_{a+1}.
        m.d.comb += i.ready.eq(can & ~(held & is_done))
        _drain(m, o)
        with m.If(can):
            with m.If(skid_valid):
                _emit(m, o, payload=skid)
                with m.If(i.valid):
                    with m.If(is_last_level):
                        m.d.sync += [held.eq(1), skid_valid.eq(0)]
                    with m.Else():
                        m.d.sync += skid.eq(i.payload)
                with m.Else():
                    m.d.sync += skid_valid.eq(0)
            with m.Elif(held & i.valid & is_done):
                _emit(m, o, kind=Kind.STOP, level=a + 1)
                m.d.sync += held.eq(0)
            with m.Elif(held & i.valid):
                _emit(m, o, kind=Kind.STOP, level=a)
                with m.If(~is_last_level):  # a new S_a stays held
                    m.d.sync += [held.eq(0), skid.eq(i.payload), skid_valid.eq(1)]
            with m.Elif(held):
                pass  # the held stop waits for its successor
            with m.Elif(i.valid):
                with m.If(is_last_level):
                    m.d.sync += held.eq(1)
                with m.Else():
                    _emit(m, o, payload=i.payload)


# -- Expand ---------------------------------------------------------------------------------------


class Expand(wiring.Component):
    """Repeat each element of ``i`` over the inner ``rank`` dims of ``ref`` (step_lang ``Expand``).

    Parameters
        ``fmt``: format of ``i`` and ``o``; ``ref_fmt``: format of ``ref`` (any element: its
        contents are ignored); ``in_rank``: the rank of both streams; ``rank``:
        ``1 <= rank <= in_rank``.
    Ports
        ``i`` (In): elements, each closed by a stop of level ``>= rank`` (its inner dims are 1).
        ``ref`` (In): the reference stream. ``o`` (Out): ``ref``'s structure with ``i``'s elements.
    Protocol
        ``o`` is a register. The current element is held in a register, so ``i``'s closing stop is
        taken (and dropped) while ``ref`` is walked. ``ref.ready`` depends on ``o.ready``;
        ``i.ready`` on the state, and on ``ref``'s head for the done token.
    Latency
        2 cycles from the element to its first copy (load, then walk).
    Throughput
        One output token per cycle while both inputs keep up: the next element is loaded in the
        cycle the reference's closing stop goes out. A reference block of one token (an empty
        inner vector) costs one bubble.
    Stop tokens
        The output's stops are ``ref``'s; ``i``'s closing stops are dropped. Inputs that do not
        line up (an error the interpreter reports) give unspecified output.
    """

    def __init__(self, *, fmt: _Format, ref_fmt: _Format, in_rank: int, rank: int):
        self._validate(fmt=fmt, ref_fmt=ref_fmt, in_rank=in_rank, rank=rank)
        self.fmt, self.ref_fmt, self.in_rank, self.rank = fmt, ref_fmt, in_rank, rank
        super().__init__(
            {"i": In(fmt.signature()), "ref": In(ref_fmt.signature()), "o": Out(fmt.signature())}
        )

    @classmethod
    def _validate(cls, *, fmt: _Format, ref_fmt: _Format, in_rank: int, rank: int) -> None:
        owner = cls.__name__
        _check_format(owner, "fmt", fmt)
        _check_format(owner, "ref_fmt", ref_fmt)
        if fmt.level_bits != ref_fmt.level_bits:
            raise ValueError(
                f"{owner} fmt and ref_fmt must have the same level_bits, not {fmt.level_bits} "
                f"and {ref_fmt.level_bits}"
            )
        check_int(owner, "in_rank", in_rank, 1)
        check_int(owner, "rank", rank, 1, in_rank)
        rank_levels_fit(owner, "input", in_rank, fmt.level_bits)

    @classmethod
    def from_node(cls, node: ops.Expand, config: HwConfig) -> Expand:
        expect_node(cls, node, ops.Expand)
        fmt, ref_fmt = _node_format(node, 0, config), _node_format(node, 1, config)
        return _build(
            node, cls, fmt=fmt, ref_fmt=ref_fmt, in_rank=node.inputs[0].rank, rank=node.rank
        )

    @property
    def in_ports(self) -> list[stream.Interface]:
        return [self.i, self.ref]

    @property
    def out_ports(self) -> list[stream.Interface]:
        return [self.o]

    def elaborate(self, platform) -> Module:
        m = Module()
        i, ref, o = self.i, self.ref, self.o
        elem = Signal(self.fmt.data_shape)
        have = Signal()  # walking ref with `elem`
        closing = Signal()  # the element's closing stop is still to be taken from `i`
        can = _free(o)
        rk = ref.payload.kind
        walk = have & can & ref.valid
        walk_ends = walk & (rk == Kind.STOP) & partition_closes_chunk(ref.payload.level, self.rank)
        ik = i.payload.kind
        drop = closing & i.valid
        load = ~closing & i.valid & (ik == Kind.DATA) & (~have | walk_ends)
        done = ~have & ~closing & i.valid & (ik == Kind.DONE) & can & ref.valid & (rk == Kind.DONE)
        m.d.comb += [i.ready.eq(drop | load | done), ref.ready.eq(walk | done)]
        _drain(m, o)
        with m.If(walk):
            with m.If(rk == Kind.DATA):
                _emit(m, o, kind=Kind.DATA, data=elem)
            with m.Else():
                _emit(m, o, kind=Kind.STOP, level=ref.payload.level)
            with m.If(walk_ends):
                m.d.sync += have.eq(0)
        with m.If(done):
            _emit(m, o, kind=Kind.DONE)
        with m.If(drop):
            m.d.sync += closing.eq(0)
        with m.If(load):
            m.d.sync += [elem.eq(i.payload.data), have.eq(1), closing.eq(1)]
        return m


# -- RepeatStatic ---------------------------------------------------------------------------------


class RepeatStatic(wiring.Component):
    """Emit every element ``count`` times, a new innermost dim (step_lang ``RepeatStatic``).

    Ports
        ``i`` (In), ``o`` (Out), both ``fmt``.
    Protocol
        ``o`` is a register. The element is not copied: it stays on ``i`` (offered, stable by the
        stream rules) until its last copy is written.
    Latency
        1 cycle to the first copy.
    Throughput
        One output token per cycle; an element occupies the input for ``count`` cycles (plus one
        when a held ``S1`` is released before it).
    Stop tokens
        BlockWriter with ``k = 1``: each block closes with ``S1``, held back until the next input
        beat is seen (inspected, not taken); an input ``S_s`` absorbs it and is written
        ``S_{s+1}`` (``block_stop``); data or done release it first. The held stop leaves one
        cycle after the next input token arrives; with ``in_rank = 0`` it is written at once.
    """

    def __init__(self, *, fmt: _Format, in_rank: int, count: int):
        self._validate(fmt=fmt, in_rank=in_rank, count=count)
        self.fmt, self.in_rank, self.count = fmt, in_rank, count
        super().__init__({"i": In(fmt.signature()), "o": Out(fmt.signature())})

    @classmethod
    def _validate(cls, *, fmt: _Format, in_rank: int, count: int) -> None:
        owner = cls.__name__
        _check_format(owner, "fmt", fmt)
        check_int(owner, "in_rank", in_rank, 0)
        check_int(owner, "count", count, 1)
        rank_levels_fit(owner, "output", in_rank + 1, fmt.level_bits)

    @classmethod
    def from_node(cls, node: ops.RepeatStatic, config: HwConfig) -> RepeatStatic:
        expect_node(cls, node, ops.RepeatStatic)
        fmt = _node_format(node, 0, config)
        return _build(node, cls, fmt=fmt, in_rank=node.inputs[0].rank, count=node.count)

    @property
    def in_ports(self) -> list[stream.Interface]:
        return [self.i]

    @property
    def out_ports(self) -> list[stream.Interface]:
        return [self.o]

    def elaborate(self, platform) -> Module:
        m = Module()
        _elaborate_blocks(m, self.i, self.o, count=self.count, in_rank=self.in_rank)
        return m


# -- Zip ------------------------------------------------------------------------------------------


class Zip(wiring.Component):
    """Pair two streams of the same shape into a stream of tuples (step_lang ``Zip``).

    Ports
        ``a``, ``b`` (In): formats ``a_fmt``, ``b_fmt`` (same ``level_bits``). ``o`` (Out):
        ``TupleFormat(a_fmt, b_fmt)``; data beats carry both items, stops and done carry ``a``'s
        kind and level.
    Protocol
        ``o`` is a register; both inputs are taken together (``a.ready = b.ready = a.valid &
        b.valid & (~o.valid | o.ready)``).
    Latency
        1 cycle. Throughput: initiation interval 1.
    Stop tokens
        Pass unchanged (taken from ``a``). Inputs that do not line up (an error the interpreter
        reports) give unspecified output.
    """

    def __init__(self, *, a_fmt: TokenFormat, b_fmt: TokenFormat):
        self._validate(a_fmt=a_fmt, b_fmt=b_fmt)
        self.out_fmt = TupleFormat(a_fmt, b_fmt)
        super().__init__(
            {
                "a": In(a_fmt.signature()),
                "b": In(b_fmt.signature()),
                "o": Out(self.out_fmt.signature()),
            }
        )

    @classmethod
    def _validate(cls, *, a_fmt: TokenFormat, b_fmt: TokenFormat) -> None:
        owner = cls.__name__
        for name, value in (("a_fmt", a_fmt), ("b_fmt", b_fmt)):
            check_format(owner, name, value)
        TupleFormat(a_fmt, b_fmt)  # the level widths must agree

    @classmethod
    def from_node(cls, node: ops.Zip, config: HwConfig) -> Zip:
        expect_node(cls, node, ops.Zip)
        zip_rule(node, config)
        fmts = [_node_format(node, k, config) for k in (0, 1)]
        return _build(node, cls, a_fmt=fmts[0], b_fmt=fmts[1])

    @property
    def in_ports(self) -> list[stream.Interface]:
        return [self.a, self.b]

    @property
    def out_ports(self) -> list[stream.Interface]:
        return [self.o]

    def elaborate(self, platform) -> Module:
        m = Module()
        a, b, o = self.a, self.b, self.o
        fire = a.valid & b.valid & _free(o)
        m.d.comb += [a.ready.eq(fire), b.ready.eq(fire)]
        _drain(m, o)
        with m.If(fire):
            _emit(m, o, kind=a.payload.kind, level=a.payload.level)
            m.d.sync += [o.payload.data.a.eq(a.payload.data), o.payload.data.b.eq(b.payload.data)]
        return m
