"""Dynamic routing and merging: Partition, Reassemble, EagerMerge, Parallelize, Broadcast.

A *chunk* of a stream at rank ``b`` is one element when ``b = 0``, otherwise the tokens up to and
including the first stop of level ``>= b``. Routing operators move whole chunks and never
interleave two chunks.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import sympy as sp

from ..dims import Dim, dims_equal, product, shape_str
from ..graph import Node, Stream
from ..stoprules import BlockWriter, partition_closes_chunk
from ..tokens import DONE, Stop, Token, is_data
from ..types import ElemType, Selector, StreamType, Tile

__all__ = ["Broadcast", "EagerMerge", "Parallelize", "Partition", "Reassemble"]


def forward_chunk(io: Any, port: int, rank: int, emit: Any) -> Iterator[Any]:
    """Receive one chunk of ``rank`` from input ``port`` token by token, passing each token
    inside it to ``emit`` (a generator function) as it arrives, as the hardware's routers
    forward it; returns the closing stop's level (0 for ``rank == 0``), which is not emitted."""
    name = io.node.input_names[port]
    if rank == 0:
        tok = yield from io.recv(port)
        if not is_data(tok):
            raise io.fail(name, f"expected an element, got {tok!r}")
        yield from emit(tok)
        return 0
    while True:
        tok = yield from io.recv(port)
        if tok is DONE:
            raise io.fail(name, "stream ended inside a chunk")
        if isinstance(tok, Stop) and partition_closes_chunk(tok.level, rank):
            return tok.level
        yield from emit(tok)


def read_chunk(io: Any, port: int, rank: int) -> Iterator[Any]:
    """Receive one chunk of ``rank`` from input ``port``; returns ``(tokens, closing level)``.

    The chunk's closing stop is *not* included in ``tokens``; the level is 0 for ``rank == 0``.
    """
    toks: list[Token] = []

    def keep(tok: Token) -> Iterator[Any]:
        toks.append(tok)
        yield from ()

    level = yield from forward_chunk(io, port, rank, keep)
    return toks, level


def _selected(io: Any, sel: Any, n: int, port: str) -> list[int]:
    arr = np.asarray(sel).reshape(-1)
    if arr.shape[0] != n:
        raise io.fail(port, f"selector has {arr.shape[0]} entries, expected {n}")
    return [int(i) for i in np.flatnonzero(arr)]


def unify_elem(node: Node, types: Sequence[ElemType], ports: Sequence[str]) -> ElemType:
    """One element type for streams that must carry the same kind of element.

    Tiles whose dims differ only symbolically unify to a tile with fresh ragged dims.
    """
    first = types[0]
    for t, p in zip(types[1:], ports[1:], strict=True):
        if t == first:
            continue
        if isinstance(first, Tile) and isinstance(t, Tile) and t.dtype == first.dtype:
            if (
                dims_equal(t.rows, first.rows) is False
                and isinstance(t.rows, int)
                and isinstance(first.rows, int)
            ):
                raise node.error(p, f"element {t} differs from {first} on port '{ports[0]}'")
            if (
                dims_equal(t.cols, first.cols) is False
                and isinstance(t.cols, int)
                and isinstance(first.cols, int)
            ):
                raise node.error(p, f"element {t} differs from {first} on port '{ports[0]}'")
            rows = first.rows if dims_equal(t.rows, first.rows) else node.fresh_ragged("rows")
            cols = first.cols if dims_equal(t.cols, first.cols) else node.fresh_ragged("cols")
            first = Tile(first.dtype, rows, cols)
            continue
        raise node.error(p, f"element {t} differs from {first} on port '{ports[0]}'")
    return first


def unify_inner(node: Node, streams: Sequence[Stream], ports: Sequence[str]) -> tuple[Dim, ...]:
    """Common inner dims (all but the outermost) of same-rank streams."""
    rank = streams[0].rank
    inner = list(streams[0].shape[1:])
    for s, p in zip(streams[1:], ports[1:], strict=True):
        if s.rank != rank:
            raise node.error(p, f"rank {s.rank} differs from rank {rank} on port '{ports[0]}'")
        for k, d in enumerate(s.shape[1:]):
            eq = dims_equal(d, inner[k])
            if eq is False and isinstance(d, int) and isinstance(inner[k], int):
                raise node.error(
                    p,
                    f"shape {shape_str(s.shape)} differs from {shape_str(streams[0].shape)} on port '{ports[0]}'",
                )
            if not eq:
                inner[k] = node.fresh_ragged(f"d{k}")
    return tuple(inner)


class Partition(Node):
    """Route chunks of ``x`` to the outputs chosen by a multi-hot selector stream.

    For each selector element the next chunk of ``rank`` inner dims is copied to every selected
    output (none selected drops it). The selector covers the outer dims of ``x``; that outer
    structure is consumed. Output ``i`` is ``[D_i, *inner]`` with ``D_i`` a fresh regular symbol.
    """

    kind = "Partition"
    zero_costs = frozenset({"onchip_bytes", "offchip_bytes", "flops"})
    forwards_tiles = True

    def __init__(self, x: Stream, sel: Stream, rank: int = 0, *, name: str | None = None):
        graph = x.graph if isinstance(x, Stream) else None
        super().__init__(graph, name)
        x = self._stream(x, "in")
        sel = self._stream(sel, "sel")
        if not isinstance(sel.elem, Selector):
            raise self.error("sel", f"expected a selector stream, got {sel.type}")
        if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank <= x.rank:
            raise self.error(
                "in", f"rank must be an integer in [0, {x.rank}] for input {x.type}, not {rank!r}"
            )
        n_outer = len(x.shape) - rank
        if sel.rank != n_outer - 1 or any(
            dims_equal(a, b) is False for a, b in zip(sel.shape, x.shape[:n_outer], strict=True)
        ):
            raise self.error(
                "sel",
                f"selector shape {shape_str(sel.shape)} must equal the outer dims {shape_str(x.shape[:n_outer])} of input {shape_str(x.shape)} (rank {rank})",
            )
        self.rank, self.n = rank, sel.elem.n
        inner = x.shape[n_outer:]
        outs = [
            (f"out{i}", StreamType(x.elem, (self.fresh_regular(f"n{i:03d}"), *inner)))
            for i in range(self.n)
        ]
        self._finish([("in", x), ("sel", sel)], outs)

    def params(self) -> dict[str, Any]:
        return {"rank": self.rank, "n": self.n}

    def execute(self, io: Any) -> Iterator[Any]:
        b = self.rank
        expect_outer = 0  # a chunk that closed above rank b owes the selector a matching stop
        while True:
            s = yield from io.recv(1)
            if s is DONE:
                # Close the outputs before waiting for the input's done: in a feedback loop the
                # input can only end after these outputs have.
                for j in range(self.n):
                    yield from io.send(j, DONE)
                x = yield from io.recv(0)
                if x is not DONE or expect_outer:
                    raise io.fail("in", f"input continues with {x!r} after the selector ended")
                return
            if isinstance(s, Stop):
                if b == 0:
                    x = yield from io.recv(0)
                    if not (isinstance(x, Stop) and x.level == s.level):
                        raise io.fail(
                            "in", f"input token {x!r} does not line up with selector {s!r}"
                        )
                elif s.level != expect_outer:
                    raise io.fail(
                        "sel",
                        f"selector {s!r} does not line up with the input's closing stop S{expect_outer + b}",
                    )
                expect_outer = 0
                continue
            if expect_outer:
                raise io.fail(
                    "sel", f"selector element where the input closed with S{expect_outer + b}"
                )
            targets = _selected(io, s, self.n, "sel")

            def to_targets(tok: Token, targets: list[int] = targets) -> Iterator[Any]:
                for j in targets:  # each token to every target before the next is taken
                    yield from io.send(j, tok)

            level = yield from forward_chunk(io, 0, b, to_targets)
            if b > 0:
                yield from to_targets(Stop(b))
                expect_outer = level - b


class Parallelize(Node):
    """Deal chunks of ``rank`` inner dims round-robin over ``n`` outputs (static parallelization).

    Output ``i`` receives chunks ``i, i+n, ...`` as ``[D_i, *inner]``; the outer structure is
    consumed. With a static chunk count ``N``, ``D_i = N // n + (i < N % n)``.
    """

    kind = "Parallelize"
    zero_costs = frozenset({"onchip_bytes", "offchip_bytes", "flops"})
    forwards_tiles = True

    def __init__(self, x: Stream, n: int, rank: int | None = None, *, name: str | None = None):
        graph = x.graph if isinstance(x, Stream) else None
        super().__init__(graph, name)
        x = self._stream(x, "in")
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise self.error("in", f"n must be a positive integer, not {n!r}")
        rank = x.rank if rank is None else rank
        if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank <= x.rank:
            raise self.error(
                "in", f"rank must be an integer in [0, {x.rank}] for input {x.type}, not {rank!r}"
            )
        self.n, self.rank = n, rank
        n_outer = len(x.shape) - rank
        chunks = product(x.shape[:n_outer])
        inner = x.shape[n_outer:]
        outs = []
        for i in range(n):
            d = (
                chunks // n + (1 if i < chunks % n else 0)
                if isinstance(chunks, int)
                else self.fresh_regular(f"n{i:03d}")
            )
            outs.append((f"out{i}", StreamType(x.elem, (d, *inner))))
        self._finish([("in", x)], outs)

    def params(self) -> dict[str, Any]:
        return {"n": self.n, "rank": self.rank}

    def execute(self, io: Any) -> Iterator[Any]:
        b, k = self.rank, 0
        while True:
            if b == 0:
                tok = yield from io.recv(0)
                if isinstance(tok, Stop):
                    continue  # outer structure is consumed
                if tok is DONE:
                    break
                yield from io.send(k % self.n, tok)
                k += 1
                continue
            head = yield from io.peek(0)
            if head is DONE:
                yield from io.recv(0)
                break
            toks, _ = yield from read_chunk(io, 0, b)
            for t in (*toks, Stop(b)):
                yield from io.send(k % self.n, t)
            k += 1
        for j in range(self.n):
            yield from io.send(j, DONE)


class Reassemble(Node):
    """Gather one chunk (one outermost slice) from each selected input, per selector element.

    Inputs are taken in selector-index order (a documented decision: deterministic in every
    reader). The gathered chunks form a new dimension: the output is
    ``[*sel.shape, D_new, *inner]`` with ``D_new`` a fresh ragged symbol, or ``count`` when every
    selector sets exactly ``count`` bits (checked at run time).
    """

    kind = "Reassemble"
    zero_costs = frozenset({"onchip_bytes", "offchip_bytes", "flops"})
    forwards_tiles = True

    def forwarded_inputs(self) -> tuple[int, ...]:
        return tuple(range(len(self.inputs) - 1))  # not the selector

    def __init__(
        self,
        inputs: Sequence[Stream],
        sel: Stream,
        *,
        count: int | None = None,
        name: str | None = None,
    ):
        inputs = list(inputs) if isinstance(inputs, (list, tuple)) else [inputs]
        graph = inputs[0].graph if inputs and isinstance(inputs[0], Stream) else None
        super().__init__(graph, name)
        if not inputs:
            raise self.error("in0", "needs at least one input")
        ports = [f"in{i}" for i in range(len(inputs))]
        ins = [self._stream(s, p) for s, p in zip(inputs, ports, strict=True)]
        sel = self._stream(sel, "sel")
        if not isinstance(sel.elem, Selector) or sel.elem.n != len(ins):
            raise self.error("sel", f"expected a selector over {len(ins)} inputs, got {sel.type}")
        elem = unify_elem(self, [s.elem for s in ins], ports)
        inner = unify_inner(self, ins, ports)
        if count is not None and (
            isinstance(count, bool) or not isinstance(count, int) or count < 0
        ):
            raise self.error("sel", f"count must be a non-negative integer, not {count!r}")
        if count == 0 and ins[0].rank > 0:
            raise self.error("sel", "count 0 would make an empty non-innermost dimension")
        if count is not None and count > len(ins):
            raise self.error(
                "sel", f"count {count} exceeds the {len(ins)} input(s) a selector can pick"
            )
        self.count = count
        self.chunk_rank = ins[0].rank
        d_new = count if count is not None else self.fresh_ragged("k")
        out = StreamType(elem, (*sel.shape, d_new, *inner))
        self._finish([*zip(ports, ins, strict=True), ("sel", sel)], [("out", out)])

    def params(self) -> dict[str, Any]:
        return {"count": self.count} if self.count is not None else {}

    def execute(self, io: Any) -> Iterator[Any]:
        a = self.chunk_rank
        n = len(self.inputs) - 1
        sel_port = n
        writer = BlockWriter(lambda t: io.send(0, t), a + 1, input_rank=self.inputs[-1].rank)

        def write(tok: Token) -> Iterator[Any]:
            if isinstance(tok, Stop):
                yield from writer.inner_stop(tok.level)
            else:
                yield from writer.data(tok)

        while True:
            s = yield from io.recv(sel_port)
            if s is DONE:
                yield from writer.done()  # before the inputs' done, as Partition does, for feedback loops
                for i in range(n):
                    t = yield from io.recv(i)
                    if t is not DONE:
                        raise io.fail(f"in{i}", f"input holds {t!r} after the selector ended")
                return
            if isinstance(s, Stop):
                yield from writer.outer_stop(s.level)
                continue
            chosen = _selected(io, s, n, "sel")
            if self.count is not None and len(chosen) != self.count:
                raise io.fail(
                    "sel", f"selector sets {len(chosen)} bits, declared count {self.count}"
                )
            if not chosen and a > 0:
                raise io.fail(
                    "sel",
                    "selector selects no input; the empty non-innermost dimension cannot be written",
                )
            # each chunk token by token; S_a between chunks, the group's S_{a+1} held after
            for k, i in enumerate(chosen):
                yield from forward_chunk(io, i, a, write)
                if a > 0 and k < len(chosen) - 1:
                    yield from writer.inner_stop(a)
            yield from writer.end_block()


class EagerMerge(Node):
    """Forward whole chunks (outermost slices) from whichever input delivers one first.

    Two outputs: ``data``, ``[sum D_i, *inner]``, and ``sel``, a one-hot selector per chunk naming
    its input. In the interpreter, "first" is decided by an
    :class:`~step_lang.arrival.ArrivalPolicy`.
    """

    kind = "EagerMerge"
    zero_costs = frozenset({"onchip_bytes", "offchip_bytes", "flops"})
    forwards_tiles = True

    def __init__(self, inputs: Sequence[Stream], *, name: str | None = None):
        inputs = list(inputs) if isinstance(inputs, (list, tuple)) else [inputs]
        graph = inputs[0].graph if inputs and isinstance(inputs[0], Stream) else None
        super().__init__(graph, name)
        if not inputs:
            raise self.error("in0", "needs at least one input")
        ports = [f"in{i}" for i in range(len(inputs))]
        ins = [self._stream(s, p) for s, p in zip(inputs, ports, strict=True)]
        elem = unify_elem(self, [s.elem for s in ins], ports)
        inner = unify_inner(self, ins, ports)
        total = sp.Add(*[sp.sympify(s.shape[0]) for s in ins])
        total = int(total) if total.is_Integer else total
        self.chunk_rank = ins[0].rank
        outs = [
            ("data", StreamType(elem, (total, *inner))),
            ("sel", StreamType(Selector(len(ins)), (total,))),
        ]
        self._finish(list(zip(ports, ins, strict=True)), outs)

    def forwarded_inputs(self) -> tuple[int, ...]:
        return tuple(range(len(self.inputs)))

    def execute(self, io: Any) -> Iterator[Any]:
        n, a = len(self.inputs), self.chunk_rank
        policy = io.policy()
        policy.start(n)
        live = set(range(n))
        while live:
            ended = [i for i in sorted(live) if io.has(i) and io.head(i) is DONE]
            if ended:
                for i in ended:
                    yield from io.recv(i)
                    live.discard(i)
                    policy.finished(i)
                # Taking a done token may take time (in the simulator): look at every input
                # again, so that a done token that arrived meanwhile is not taken for a chunk.
                continue
            ready = [i for i in sorted(live) if io.has(i)]
            choice = policy.choose(ready, n) if ready else None
            if choice is None:
                if live:
                    yield f"a chunk on any of {', '.join(f'in{i}' for i in sorted(live))}"
                continue
            onehot = np.zeros(n, dtype=bool)
            onehot[choice] = True
            yield from io.send(1, onehot)
            toks, _ = yield from read_chunk(io, choice, a)
            for t in toks:
                yield from io.send(0, t)
            if a > 0:
                yield from io.send(0, Stop(a))
        yield from io.send(0, DONE)
        yield from io.send(1, DONE)


class Broadcast(Node):
    """Copy a stream to ``n`` outputs. Inserted automatically for fan-out."""

    kind = "Broadcast"
    zero_costs = frozenset({"onchip_bytes", "offchip_bytes", "flops"})
    forwards_tiles = True

    def __init__(self, x: Stream, n: int, *, name: str | None = None):
        graph = x.graph if isinstance(x, Stream) else None
        super().__init__(graph, name)
        x = self._stream(x, "in")
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise self.error("in", f"n must be a positive integer, not {n!r}")
        self.n = n
        self._finish([("in", x)], [(f"out{i}", x.type) for i in range(n)])

    def params(self) -> dict[str, Any]:
        return {"n": self.n}

    def execute(self, io: Any) -> Iterator[Any]:
        while True:
            tok = yield from io.recv(0)
            for j in range(self.n):
                yield from io.send(j, tok)
            if tok is DONE:
                return
