"""Dynamic routing and merging in hardware: Partition, Reassemble, EagerMerge, Parallelize.

The hardware forms of the operators of ``step_lang.ops.routing`` (``docs/semantics.md``), on the
separate-token encoding of ``docs/stop_tokens.md``. A *chunk* at rank ``b`` is one element when
``b = 0``, otherwise the tokens up to and including the first stop of level ``>= b``; the blocks
move whole chunks and never interleave two chunks on one output. Broadcast lives in
:mod:`step_hw.broadcast`, with the :func:`~step_hw.broadcast.fork` logic that Partition and
Parallelize use to multicast and to end every output with a done token.

Every block is a datapath of multiplexers plus a few state registers: outputs are offered in the
cycle the inputs are (latency 0), and ``valid`` never depends on ``ready``. Put a
:class:`~step_hw.queue.Queue` on an edge to break the combinational ``ready`` path.
"""

from __future__ import annotations

from collections.abc import Sequence

from amaranth.hdl import Cat, Const, Module, Mux, Signal, Value
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from step_lang import ops
from step_lang.stoprules import partition_closes_chunk

from .block_rules import merge_rule
from .broadcast import fork, node_format, token
from .checks import check_format, check_int, check_level, check_node_class
from .config import HwConfig
from .payload import Kind, TokenFormat
from .payload_fields import put
from .tuple_format import TupleFormat

__all__ = ["EagerMerge", "Parallelize", "Partition", "Reassemble"]


# -- helpers ------------------------------------------------------------------------------------


def _selector_format(fmt: TokenFormat | TupleFormat, n: int) -> TokenFormat:
    return TokenFormat("selector", n=n, level_bits=fmt.level_bits)


def _lowest(m: Module, bits: Value, n: int, name: str) -> Signal:
    """Index of the lowest set bit of ``bits`` (0 when none is set)."""
    index = Signal(range(n), name=name)
    for j in reversed(range(n)):  # the last assignment wins: the lowest index
        with m.If(bits[j]):
            m.d.comb += index.eq(j)
    return index


def _onehot(index: Value, n: int) -> Value:
    return (Const(1, n) << index)[:n]


def _select(
    m: Module,
    ports: Sequence[stream.Interface],
    index: Value,
    fmt: TokenFormat | TupleFormat,
    name: str,
) -> tuple[Signal, Value]:
    """``valid`` and ``payload`` of ``ports[index]``."""
    valid = Signal(name=f"{name}_valid")
    payload = Signal(fmt.layout(), name=f"{name}_payload")
    for j, p in enumerate(ports):
        with m.If(index == j):
            m.d.comb += [valid.eq(p.valid), payload.eq(p.payload)]
    return valid, payload


# -- Partition ----------------------------------------------------------------------------------


class Partition(wiring.Component):
    """Route chunks of ``i`` to the outputs a multi-hot selector stream chooses (multicast).

    The hardware form of ``step_lang.ops.routing.Partition(x, sel, rank=b)``.

    Parameters
    ----------
    fmt : TokenFormat or TupleFormat (a Zip's tuples)
        Token format of the data input and of every output.
    n : int
        Number of outputs (the selector's width), a positive integer.
    rank : int
        Chunk rank ``b``, a non-negative integer that fits the format's level field.

    Ports
    -----
    i : In(fmt.signature())
        Data (the node's input ``in``).
    sel : In(sel_fmt.signature())
        ``n``-bit selectors, one per chunk, shaped like the outer dims of ``i`` (``sel``).
    o : Out(fmt.signature()).array(n)
        The routed chunks (``out0 .. out{n-1}``).
    error : Out(1)
        Sticky: the selector and the data do not line up (the interpreter raises
        ``StepRuntimeError`` in the same cases). Outputs are unspecified after an error.

    Protocol
    --------
    :mod:`amaranth.lib.stream` rules on every port. Per selector element, each token of the
    chunk is offered to every selected output, each of which takes it once at its own pace
    (:func:`~step_hw.broadcast.fork`); ``i`` advances when the last selected output took it. A
    selector with no bit set drops the chunk. When the selector's done token arrives, every
    output is sent a done token first and only then is the input's done token accepted (a
    feedback loop through Partition could otherwise never end); both are consumed together.

    Latency
        0 cycles (combinational from ``i`` and ``sel`` to the outputs).
    Throughput
        ``b = 0``: one element (with its selector) per cycle; a stop is consumed from ``i`` and
        ``sel`` together in one cycle. ``b >= 1``: one token of ``i`` per cycle; the selector
        element is consumed with the chunk's closing stop, and a selector stop (owed after a
        chunk that closed above rank ``b``) takes one more cycle. The done phase takes two
        cycles. A stalled selected output stalls the block.

    Stop tokens
        ``b = 0``: the input's stops line up one to one with the selector's and are consumed
        (checked). ``b >= 1``: stops below ``b`` are routed with the chunk; the chunk's closing
        stop ``S_s`` (``s >= b``) becomes ``S_b`` on the outputs, and the selector must then
        hold ``S_{s-b}`` when ``s > b`` (checked) before its next element.
    """

    def __init__(self, *, fmt: TokenFormat | TupleFormat, n: int, rank: int):
        block = type(self).__name__
        check_format(block, "fmt", fmt, types=(TokenFormat, TupleFormat))
        check_int(block, "n", n)
        check_int(block, "rank", rank, 0)
        check_level(block, "rank", rank, fmt.level_bits)
        self._fmt, self._n, self._rank = fmt, n, rank
        self._sel_fmt = _selector_format(fmt, n)
        sig = fmt.signature()
        super().__init__(
            {
                "i": In(sig),
                "sel": In(self._sel_fmt.signature()),
                "o": Out(sig).array(n),
                "error": Out(1),
            }
        )

    @classmethod
    def from_node(cls, node: ops.Partition, config: HwConfig) -> Partition:
        """The block for a step_lang ``Partition`` node under ``config``."""
        check_node_class(node, ops.Partition, cls.__name__)
        fmt = node_format(node, config, 0)
        node_format(node, config, 1)
        return cls(fmt=fmt, n=node.n, rank=node.rank)

    @property
    def fmt(self) -> TokenFormat | TupleFormat:
        """Token format of the data streams."""
        return self._fmt

    @property
    def sel_fmt(self) -> TokenFormat:
        """Token format of the selector stream."""
        return self._sel_fmt

    @property
    def n(self) -> int:
        """Number of outputs."""
        return self._n

    @property
    def rank(self) -> int:
        """Chunk rank."""
        return self._rank

    @property
    def in_ports(self) -> list[stream.Interface]:
        """Input streams in the order of the step_lang node's inputs: ``[i, sel]``."""
        return [self.i, self.sel]

    @property
    def out_ports(self) -> list[stream.Interface]:
        """Output streams in the order of the step_lang node's outputs: ``o[0..n-1]``."""
        return list(self.o)

    def elaborate(self, platform) -> Module:
        m = Module()
        fmt, n, b = self._fmt, self._n, self._rank
        i, sel = self.i, self.sel
        expect = Signal(fmt.level_bits)  # the selector stop owed after a chunk closed above b
        closed = Signal()  # every output has its done token; the input's is next
        error = Signal()
        m.d.comb += self.error.eq(error)

        x_kind, x_level = i.payload.kind, i.payload.level
        s_kind = sel.payload.kind
        closes = (x_kind == Kind.STOP) & partition_closes_chunk(x_level, b)

        offer = Signal()
        want = Signal(n)
        out = Signal(fmt.layout())
        done = fork(m, offer=offer, want=want, ports=self.o, name="route")
        for o in self.o:
            m.d.comb += o.payload.eq(out)

        with m.If(sel.valid & (s_kind == Kind.DATA)):
            m.d.comb += [offer.eq(i.valid), want.eq(sel.payload.data), out.eq(i.payload)]
            m.d.comb += i.ready.eq(done)
            if b == 0:
                m.d.comb += sel.ready.eq(done)
                with m.If(done & (x_kind != Kind.DATA)):
                    m.d.sync += error.eq(1)
            else:
                with m.If(closes):
                    m.d.comb += out.eq(token(fmt, Kind.STOP, b))
                    m.d.comb += sel.ready.eq(done)
                    with m.If(done):
                        m.d.sync += expect.eq(x_level - b)
                with m.If(done & ((x_kind == Kind.DONE) | (expect != 0))):
                    m.d.sync += error.eq(1)
        with m.Elif(sel.valid & (s_kind == Kind.STOP)):
            if b == 0:
                m.d.comb += [i.ready.eq(1), sel.ready.eq(i.valid)]
                with m.If(i.valid & ((x_kind != Kind.STOP) | (x_level != sel.payload.level))):
                    m.d.sync += error.eq(1)
            else:
                m.d.comb += sel.ready.eq(1)
                m.d.sync += expect.eq(0)
                with m.If(sel.payload.level != expect):
                    m.d.sync += error.eq(1)
        with m.Elif(sel.valid):  # DONE
            with m.If(~closed):
                m.d.comb += [offer.eq(1), want.eq(2**n - 1), out.eq(token(fmt, Kind.DONE))]
                with m.If(done):
                    m.d.sync += closed.eq(1)
            with m.Else():
                m.d.comb += [i.ready.eq(1), sel.ready.eq(i.valid)]
                with m.If(i.valid):
                    m.d.sync += [closed.eq(0), expect.eq(0)]
                    with m.If((x_kind != Kind.DONE) | (expect != 0)):
                        m.d.sync += error.eq(1)
        return m


# -- Reassemble ---------------------------------------------------------------------------------


class Reassemble(wiring.Component):
    """Per selector element, gather one chunk from each selected input, in index order.

    The hardware form of ``step_lang.ops.routing.Reassemble(inputs, sel, count=)``.

    Parameters
    ----------
    fmt : TokenFormat or TupleFormat (a Zip's tuples)
        Token format of every data input and of the output.
    n : int
        Number of data inputs (the selector's width), a positive integer.
    rank : int
        Rank ``a`` of the data inputs: a chunk is one outermost slice of an input.
    sel_rank : int
        Rank ``q`` of the selector stream. The output has rank ``q + 1 + a``, whose top stop
        level must fit the format's level field.
    count : int or None
        When given, every selector sets exactly ``count`` bits (checked, as ``error``).

    Ports
    -----
    i : In(fmt.signature()).array(n)
        The data inputs (``in0 .. in{n-1}``).
    sel : In(sel_fmt.signature())
        ``n``-bit selectors (``sel``).
    o : Out(fmt.signature())
        The gathered chunks (``out``).
    error : Out(1)
        Sticky: a selector sets no bit while ``a > 0``, breaks ``count``, or an input holds
        something other than a chunk or, after the selector ended, its done token (the
        interpreter raises ``StepRuntimeError`` there). Outputs are unspecified after an error.

    Protocol
    --------
    :mod:`amaranth.lib.stream` rules on every port. The block takes a selector element, then
    forwards one whole chunk from each selected input in index order (it waits on the lowest
    selected input first, as ``docs/semantics.md`` §11.3 decides), then writes the group's
    closing stop. When the selector's done token arrives, the output's done token is sent
    first and then every input's done token is accepted (as Partition does, for feedback loops).

    Latency
        0 cycles (combinational from the inputs to ``o``).
    Throughput
        One output token per cycle, and a selector stop costs no cycle of its own when it merges
        with a group's closing stop. One cycle without output per selector element whose group
        opens with its closing stop (an all-zero selector at ``a = 0``, or a single selected
        chunk that is empty at ``a > 0``). The inputs' done tokens are taken from the cycle
        after the output's (all in one cycle when they are there), the selector's with the last.

    Stop tokens
        Stops inside chunks pass unchanged; the closing ``S_a`` of every chunk but the group's
        last passes unchanged (for ``a = 0`` chunks are single elements). The group's closing
        stop is ``S_{a+1}`` and is held back (``BlockWriter`` in ``step_lang.stoprules``): if the
        selector's next token is a stop ``S_l``, the two merge into ``S_{l+a+1}`` and both are
        consumed in one cycle; otherwise ``S_{a+1}`` is written before the next group or the
        done token. A selector stop that follows another stop is written as ``S_{l+a+1}``. With
        a rank-0 selector (no stops), the closing stop is written at once without waiting for
        the next selector token. An all-zero selector at ``a = 0`` writes just the closing stop
        (an empty innermost vector).
    """

    def __init__(
        self,
        *,
        fmt: TokenFormat | TupleFormat,
        n: int,
        rank: int,
        sel_rank: int,
        count: int | None = None,
    ):
        block = type(self).__name__
        check_format(block, "fmt", fmt, types=(TokenFormat, TupleFormat))
        check_int(block, "n", n)
        check_int(block, "rank", rank, 0)
        check_int(block, "sel_rank", sel_rank, 0)
        check_level(block, "output stop", sel_rank + rank + 1, fmt.level_bits)
        if count is not None:
            check_int(block, "count", count, 0)
            if count > n:
                raise ValueError(f"{block} count must be at most n={n}, not {count}")
            if count == 0 and rank > 0:
                raise ValueError(
                    f"{block} count 0 with rank > 0 would make an empty non-innermost dimension"
                )
        self._fmt, self._n, self._rank, self._sel_rank, self._count = (
            fmt, n, rank, sel_rank, count,
        )  # fmt: skip
        self._sel_fmt = _selector_format(fmt, n)
        sig = fmt.signature()
        super().__init__(
            {
                "i": In(sig).array(n),
                "sel": In(self._sel_fmt.signature()),
                "o": Out(sig),
                "error": Out(1),
            }
        )

    @classmethod
    def from_node(cls, node: ops.Reassemble, config: HwConfig) -> Reassemble:
        """The block for a step_lang ``Reassemble`` node under ``config``."""
        check_node_class(node, ops.Reassemble, cls.__name__)
        n = len(node.inputs) - 1
        for port in range(n + 1):
            node_format(node, config, port)
        fmt = node_format(node, config, 0, output=True)
        merge_rule(node, config)
        return cls(
            fmt=fmt, n=n, rank=node.chunk_rank, sel_rank=node.inputs[-1].rank, count=node.count
        )

    @property
    def fmt(self) -> TokenFormat | TupleFormat:
        """Token format of the data streams."""
        return self._fmt

    @property
    def sel_fmt(self) -> TokenFormat:
        """Token format of the selector stream."""
        return self._sel_fmt

    @property
    def n(self) -> int:
        """Number of data inputs."""
        return self._n

    @property
    def rank(self) -> int:
        """Rank of the data inputs (the chunk rank)."""
        return self._rank

    @property
    def sel_rank(self) -> int:
        """Rank of the selector stream."""
        return self._sel_rank

    @property
    def count(self) -> int | None:
        """Bits every selector sets, when declared."""
        return self._count

    @property
    def in_ports(self) -> list[stream.Interface]:
        """Input streams in the order of the step_lang node's inputs: ``[*i, sel]``."""
        return [*self.i, self.sel]

    @property
    def out_ports(self) -> list[stream.Interface]:
        """Output streams in the order of the step_lang node's outputs: ``[o]``."""
        return [self.o]

    def elaborate(self, platform) -> Module:
        m = Module()
        fmt, n, a, q = self._fmt, self._n, self._rank, self._sel_rank
        sel, o = self.sel, self.o
        idle, group, drain = range(3)
        state = Signal(range(3))
        mask = Signal(n)  # inputs of the current group still to forward
        drained = Signal(n)  # inputs whose done token was taken (done phase)
        error = Signal()
        m.d.comb += self.error.eq(error)

        s_kind, s_level, s_bits = sel.payload.kind, sel.payload.level, sel.payload.data
        s_data = sel.valid & (s_kind == Kind.DATA)
        s_stop = sel.valid & (s_kind == Kind.STOP)
        merged = token(fmt, Kind.STOP, s_level + (a + 1))  # a selector stop absorbing S_{a+1}
        o_taken = o.valid & o.ready

        # While gathering, the current group's mask: the selector itself in its first cycle
        # (so that its first token moves while the selector is consumed), then the register.
        mask_eff = Signal(n)
        m.d.comb += mask_eff.eq(Mux(state == idle, s_bits, mask))
        cur = _lowest(m, mask_eff, n, "cur")
        rest = mask_eff & ~_onehot(cur, n)
        has_cur = mask_eff.any()
        x_valid, x = _select(m, self.i, cur, fmt, "x")
        x_closes = (x.kind == Kind.STOP) & partition_closes_chunk(x.level, a) if a > 0 else Const(1)
        x_ready = Signal()
        for j, p in enumerate(self.i):
            m.d.comb += p.ready.eq(x_ready & (cur == j))

        with m.If((state == drain) & sel.valid):
            # The output has its done token; take every input's, then the selector's.
            got = drained | Cat(p.valid for p in self.i)
            for j, p in enumerate(self.i):
                m.d.comb += p.ready.eq(~drained[j])
                with m.If(p.valid & ~drained[j] & (p.payload.kind != Kind.DONE)):
                    m.d.sync += error.eq(1)
            with m.If(got.all()):
                m.d.comb += sel.ready.eq(1)
                m.d.sync += [drained.eq(0), state.eq(idle)]
            with m.Else():
                m.d.sync += drained.eq(got)
        with m.Elif((state == idle) & s_stop):
            # No closing stop is pending here (a group's is written as the group ends).
            m.d.comb += [o.valid.eq(1), o.payload.eq(merged), sel.ready.eq(o.ready)]
        with m.Elif((state == idle) & sel.valid & (s_kind == Kind.DONE)):
            m.d.comb += [o.valid.eq(1), o.payload.eq(token(fmt, Kind.DONE))]
            with m.If(o.ready):
                m.d.sync += state.eq(drain)
        with m.Elif(s_data | (state == group)):
            ends_chunk = Signal()
            # The group's closing stop: after its last element (a = 0, or nothing selected), or
            # in place of the last chunk's closing stop (a > 0).
            from_input = has_cur & ~rest.any() & x_closes if a > 0 else Const(0)
            closing = ~has_cur | from_input
            # In the group's first cycle the next selector token is not visible yet: wait.
            with m.If(closing & (state == group)):
                if q == 0:  # no selector stop can follow: write S_{a+1} at once
                    m.d.comb += o.valid.eq(~has_cur | x_valid)
                    m.d.comb += o.payload.eq(token(fmt, Kind.STOP, a + 1))
                else:  # held back until the next selector token shows whether it merges
                    m.d.comb += o.valid.eq((~has_cur | x_valid) & sel.valid)
                    m.d.comb += o.payload.eq(token(fmt, Kind.STOP, a + 1))
                    with m.If(s_stop):
                        m.d.comb += [o.payload.eq(merged), sel.ready.eq(o_taken)]
                m.d.comb += x_ready.eq(from_input & o_taken)
                with m.If(o_taken):
                    m.d.sync += [mask.eq(0), state.eq(idle)]
            with m.Elif(~closing):
                m.d.comb += [o.valid.eq(x_valid), o.payload.eq(x), x_ready.eq(o.ready)]
                m.d.comb += ends_chunk.eq(o_taken & x_closes)
                with m.If(o_taken & ((x.kind != Kind.DATA) if a == 0 else (x.kind == Kind.DONE))):
                    m.d.sync += error.eq(1)
                m.d.sync += mask.eq(Mux(ends_chunk, rest, mask_eff))
            with m.If(state == idle):  # take the selector; the group continues from the register
                m.d.comb += sel.ready.eq(1)
                m.d.sync += [state.eq(group), mask.eq(Mux(ends_chunk, rest, mask_eff))]
                bad = ~s_bits.any() if a > 0 else Const(0)
                if self._count is not None:
                    popcount = sum((s_bits[j] for j in range(n)), Const(0, range(n + 1)))
                    bad = bad | (popcount != self._count)
                with m.If(bad):
                    m.d.sync += error.eq(1)
        return m


# -- EagerMerge ---------------------------------------------------------------------------------


class EagerMerge(wiring.Component):
    """Forward whole chunks from whichever input has one, recording the input as a selector.

    The hardware form of ``step_lang.ops.routing.EagerMerge(inputs)``, with real arrival.

    Parameters
    ----------
    fmt : TokenFormat or TupleFormat (a Zip's tuples)
        Token format of every data input and of ``o``.
    n : int
        Number of inputs, a positive integer.
    rank : int
        Rank ``a`` of the inputs: a chunk is one outermost slice (one element when ``a = 0``).

    Ports
    -----
    i : In(fmt.signature()).array(n)
        The inputs (``in0 .. in{n-1}``).
    o : Out(fmt.signature())
        The merged chunks (``data``).
    sel : Out(sel_fmt.signature())
        A rank-0 stream of one-hot ``n``-bit selectors, one per chunk, naming its input
        (``sel``).

    Protocol
    --------
    :mod:`amaranth.lib.stream` rules on every port. Arbitration happens between chunks: the
    lowest-indexed input that offers a token (not its done token) wins, and the choice is held
    until its chunk has passed and its selector has been taken (``o`` and ``sel`` are
    back-pressured independently, so the selector may be taken before, during or after the
    chunk). Done tokens are taken from inputs whenever they are not being forwarded; when every
    input is done, ``o`` and ``sel`` get their done tokens. An input whose done token arrives
    inside a chunk (a malformed stream) stalls the block.

    Latency
        0 cycles (combinational from the inputs to ``o`` and ``sel``).
    Throughput
        Initiation interval 1 per input token with one active input, including from one chunk
        to the next: a chunk of ``k`` tokens (with its closing stop) takes ``k`` cycles, and its
        selector is sent in its first cycle. Switching inputs costs nothing either. The final
        done tokens take one cycle after the last input's done token.

    Stop tokens
        Chunks pass unchanged: inner stops and the closing ``S_a`` of each chunk (an input has
        rank ``a``, so ``S_a`` is its top stop). Input done tokens are consumed; one done token
        ends each output.
    """

    def __init__(self, *, fmt: TokenFormat | TupleFormat, n: int, rank: int):
        block = type(self).__name__
        check_format(block, "fmt", fmt, types=(TokenFormat, TupleFormat))
        check_int(block, "n", n)
        check_int(block, "rank", rank, 0)
        check_level(block, "rank", rank, fmt.level_bits)
        self._fmt, self._n, self._rank = fmt, n, rank
        self._sel_fmt = _selector_format(fmt, n)
        sig = fmt.signature()
        super().__init__(
            {"i": In(sig).array(n), "o": Out(sig), "sel": Out(self._sel_fmt.signature())}
        )

    @classmethod
    def from_node(cls, node: ops.EagerMerge, config: HwConfig) -> EagerMerge:
        """The block for a step_lang ``EagerMerge`` node under ``config``."""
        check_node_class(node, ops.EagerMerge, cls.__name__)
        for port in range(len(node.inputs)):
            node_format(node, config, port)
        fmt = node_format(node, config, 0, output=True)
        node_format(node, config, 1, output=True)
        merge_rule(node, config)
        return cls(fmt=fmt, n=len(node.inputs), rank=node.chunk_rank)

    @property
    def fmt(self) -> TokenFormat | TupleFormat:
        """Token format of the data streams."""
        return self._fmt

    @property
    def sel_fmt(self) -> TokenFormat:
        """Token format of the selector stream."""
        return self._sel_fmt

    @property
    def n(self) -> int:
        """Number of inputs."""
        return self._n

    @property
    def rank(self) -> int:
        """Rank of the inputs (the chunk rank)."""
        return self._rank

    @property
    def in_ports(self) -> list[stream.Interface]:
        """Input streams in the order of the step_lang node's inputs: ``i[0..n-1]``."""
        return list(self.i)

    @property
    def out_ports(self) -> list[stream.Interface]:
        """Output streams in the order of the step_lang node's outputs: ``[o, sel]``."""
        return [self.o, self.sel]

    def elaborate(self, platform) -> Module:
        m = Module()
        fmt, n, a = self._fmt, self._n, self._rank
        o, sel = self.o, self.sel
        busy = Signal()  # a chunk has been started (its input is held in `cur`)
        cur = Signal(range(n))
        sel_taken = Signal()  # the current chunk's selector (or the final done) was taken
        data_closed = Signal()  # the current chunk (or the final done) has passed on `o`
        finished = Signal(n)  # inputs whose done token was taken

        eligible = Cat(
            p.valid & (p.payload.kind != Kind.DONE) & ~finished[j] for j, p in enumerate(self.i)
        )
        grant = _lowest(m, eligible, n, "grant")
        ending = ~busy & finished.all()
        active = busy | eligible.any()
        cur_eff = Signal(range(n))
        m.d.comb += cur_eff.eq(Mux(busy, cur, grant))
        x_valid, x = _select(m, self.i, cur_eff, fmt, "x")
        x_closes = (x.kind == Kind.STOP) & partition_closes_chunk(x.level, a) if a > 0 else Const(1)

        with m.If(ending):
            m.d.comb += [o.valid.eq(~data_closed), o.payload.eq(token(fmt, Kind.DONE))]
            m.d.comb += [sel.valid.eq(~sel_taken), sel.payload.eq(token(self._sel_fmt, Kind.DONE))]
        with m.Elif(active):
            forward = x_valid & (x.kind != Kind.DONE) & ~data_closed
            m.d.comb += [o.valid.eq(forward), o.payload.eq(x)]
            m.d.comb += [sel.valid.eq(~sel_taken), sel.payload.eq(put(self._sel_fmt, kind=Kind.DATA, data=_onehot(cur_eff, n)))]  # fmt: skip
        o_taken = o.valid & o.ready
        sel_now = sel_taken | (sel.valid & sel.ready)
        closed_now = data_closed | (o_taken & (ending | x_closes))

        for j, p in enumerate(self.i):
            take_done = (
                p.valid & (p.payload.kind == Kind.DONE) & ~finished[j] & ~(busy & (cur == j))
            )
            m.d.comb += p.ready.eq((active & (cur_eff == j) & o.ready & o.valid) | take_done)
            with m.If(take_done):
                m.d.sync += finished[j].eq(1)

        with m.If(ending | active):
            with m.If(sel_now & closed_now):
                m.d.sync += [busy.eq(0), sel_taken.eq(0), data_closed.eq(0)]
                with m.If(ending):
                    m.d.sync += finished.eq(0)
            with m.Else():
                m.d.sync += [busy.eq(active), cur.eq(cur_eff)]
                m.d.sync += [sel_taken.eq(sel_now), data_closed.eq(closed_now)]
        return m


# -- Parallelize --------------------------------------------------------------------------------


class Parallelize(wiring.Component):
    """Deal chunks of ``i`` round-robin over ``n`` outputs (static interleaved parallelization).

    The hardware form of ``step_lang.ops.routing.Parallelize(x, n, rank=b)``.

    Parameters
    ----------
    fmt : TokenFormat or TupleFormat (a Zip's tuples)
        Token format of the input and of every output.
    n : int
        Number of outputs, a positive integer.
    rank : int
        Chunk rank ``b``, a non-negative integer that fits the format's level field.

    Ports
    -----
    i : In(fmt.signature())
        The stream to deal (``in``).
    o : Out(fmt.signature()).array(n)
        Output ``j`` receives chunks ``j, j+n, ...`` (``out0 .. out{n-1}``).

    Protocol
    --------
    :mod:`amaranth.lib.stream` rules on every port. Each token goes to the output whose turn it
    is; a stall there stalls the block (chunks keep their order). The done token is offered to
    every output, each taking it once (:func:`~step_hw.broadcast.fork`), then consumed.

    Latency
        0 cycles (combinational from ``i`` to the outputs).
    Throughput
        Initiation interval 1 per input token, including the stops that ``b = 0`` drops.

    Stop tokens
        ``b = 0``: every stop is dropped (the outer structure is consumed); elements are chunks.
        ``b >= 1``: stops below ``b`` pass with their chunk, and a chunk's closing stop ``S_s``
        (``s >= b``) is written ``S_b``. The done token goes to every output.
    """

    def __init__(self, *, fmt: TokenFormat | TupleFormat, n: int, rank: int):
        block = type(self).__name__
        check_format(block, "fmt", fmt, types=(TokenFormat, TupleFormat))
        check_int(block, "n", n)
        check_int(block, "rank", rank, 0)
        check_level(block, "rank", rank, fmt.level_bits)
        self._fmt, self._n, self._rank = fmt, n, rank
        sig = fmt.signature()
        super().__init__({"i": In(sig), "o": Out(sig).array(n)})

    @classmethod
    def from_node(cls, node: ops.Parallelize, config: HwConfig) -> Parallelize:
        """The block for a step_lang ``Parallelize`` node under ``config``."""
        check_node_class(node, ops.Parallelize, cls.__name__)
        fmt = node_format(node, config, 0)
        return cls(fmt=fmt, n=node.n, rank=node.rank)

    @property
    def fmt(self) -> TokenFormat | TupleFormat:
        """Token format of the data streams."""
        return self._fmt

    @property
    def n(self) -> int:
        """Number of outputs."""
        return self._n

    @property
    def rank(self) -> int:
        """Chunk rank."""
        return self._rank

    @property
    def in_ports(self) -> list[stream.Interface]:
        """Input streams in the order of the step_lang node's inputs: ``[i]``."""
        return [self.i]

    @property
    def out_ports(self) -> list[stream.Interface]:
        """Output streams in the order of the step_lang node's outputs: ``o[0..n-1]``."""
        return list(self.o)

    def elaborate(self, platform) -> Module:
        m = Module()
        fmt, n, b = self._fmt, self._n, self._rank
        i = self.i
        turn = Signal(range(n))  # the output that takes the next chunk
        kind, level = i.payload.kind, i.payload.level
        is_done = kind == Kind.DONE
        drop = (kind == Kind.STOP) if b == 0 else Const(0)  # b = 0: outer stops are consumed
        closes = (kind == Kind.STOP) & partition_closes_chunk(level, b) if b > 0 else Const(1)

        want = Signal(n)
        out = Signal(fmt.layout())
        m.d.comb += out.eq(i.payload)
        with m.If(is_done):
            m.d.comb += want.eq(2**n - 1)
        with m.Elif(~drop):
            m.d.comb += want.eq(_onehot(turn, n))
            if b > 0:
                with m.If(closes):
                    m.d.comb += out.eq(token(fmt, Kind.STOP, b))
        done = fork(m, offer=i.valid, want=want, ports=self.o, name="deal")
        for o in self.o:
            m.d.comb += o.payload.eq(out)
        m.d.comb += i.ready.eq(done)
        with m.If(done):
            with m.If(is_done):
                m.d.sync += turn.eq(0)
            with m.Elif(~drop & closes):
                m.d.sync += turn.eq(Mux(turn == n - 1, 0, turn + 1))
        return m
