"""Shape operators: they move stop tokens and never change data.

Ranks given as arguments count from the innermost dimension (rank 0), as in the artifact.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import sympy as sp

from ..dims import Dim, absorb, ceil_div, dims_equal, is_static, product, shape_str
from ..graph import Node, Stream
from ..stoprules import (
    BlockWriter,
    flatten_stop,
    partition_closes_chunk,
    promote_stop,
    reshape_outer_stop,
)
from ..tokens import DONE, Stop, is_data
from ..types import StreamType, Tile, bool_
from ._io import expand_each

__all__ = ["Expand", "Flatten", "Promote", "RepeatStatic", "Reshape"]


def _rank_arg(node: Node, value: Any, lo: int, hi: int, what: str, x: Stream) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise node.error(
            "in", f"{what} must be an integer in [{lo}, {hi}] for input {x.type}, not {value!r}"
        )
    return value


class Flatten(Node):
    """Merge the dims of ranks ``lo..hi`` into one (``D = prod D_i``, ragged if any is ragged).

    Stops of level in ``(lo, hi]`` become ``Stop(lo)`` (vanish when ``lo = 0``); higher ones drop
    by ``hi - lo``.
    """

    kind = "Flatten"
    zero_costs = frozenset({"onchip_bytes", "offchip_bytes", "flops"})
    forwards_tiles = True

    def __init__(self, x: Stream, lo: int, hi: int, *, name: str | None = None):
        graph = x.graph if isinstance(x, Stream) else None
        super().__init__(graph, name)
        x = self._stream(x, "in")
        self.lo = _rank_arg(self, lo, 0, x.rank, "lo", x)
        self.hi = _rank_arg(self, hi, 0, x.rank, "hi", x)
        if self.hi <= self.lo:
            raise self.error("in", f"hi ({hi}) must be greater than lo ({lo})")
        n = len(x.shape)
        outer, merged, inner = (
            x.shape[: n - 1 - self.hi],
            x.shape[n - 1 - self.hi : n - self.lo],
            x.shape[n - self.lo :],
        )
        d = absorb(product(merged), lambda: self.fresh_ragged("n"))
        self._finish([("in", x)], [("out", StreamType(x.elem, (*outer, d, *inner)))])

    def params(self) -> dict[str, Any]:
        return {"lo": self.lo, "hi": self.hi}

    def execute(self, io: Any) -> Iterator[Any]:
        while True:
            tok = yield from io.recv(0)
            if isinstance(tok, Stop):
                level = flatten_stop(tok.level, self.lo, self.hi)
                if level is not None:
                    yield from io.send(0, Stop(level))
                continue
            yield from io.send(0, tok)
            if tok is DONE:
                return


class Reshape(Node):
    """Split the dim of ``rank`` into chunks of ``chunk``: ``D -> (ceil(D / chunk), chunk)``.

    For ``rank = 0`` a vector whose length is not a multiple of ``chunk`` is padded with ``pad``
    (an element value); without ``pad`` that is an error. For ``rank > 0`` the dim must be static
    and divisible, and ``pad`` is refused (there is nothing to pad). With ``pad_flags=True`` a
    second output ``pad_flags`` marks every element with a ``[1,1]`` bool tile, true for padding.
    """

    kind = "Reshape"
    zero_costs = frozenset({"onchip_bytes", "offchip_bytes", "flops"})
    forwards_tiles = True

    def __init__(
        self,
        x: Stream,
        chunk: int,
        rank: int = 0,
        *,
        pad: Any = None,
        pad_flags: bool = False,
        name: str | None = None,
    ):
        graph = x.graph if isinstance(x, Stream) else None
        super().__init__(graph, name)
        x = self._stream(x, "in")
        if isinstance(chunk, bool) or not isinstance(chunk, int) or chunk < 1:
            raise self.error("in", f"chunk must be a positive integer, not {chunk!r}")
        self.chunk = chunk
        self.rank = _rank_arg(self, rank, 0, x.rank, "rank", x)
        n = len(x.shape)
        d = x.shape[n - 1 - self.rank]
        if self.rank > 0 and (not is_static(d) or d % chunk):
            raise self.error(
                "in",
                f"dim of rank {self.rank} ({d}) in {shape_str(x.shape)} must be static and divisible by {chunk}",
            )
        if self.rank == 0 and pad is None and is_static(d) and d % chunk:
            raise self.error(
                "in", f"innermost dim {d} is not divisible by {chunk}; give pad= to pad it"
            )
        if pad is not None and self.rank > 0:
            raise self.error(
                "in",
                f"pad applies to rank 0 only, not rank {self.rank} (a dim of rank > 0 is static "
                f"and divisible by the chunk, so nothing is padded)",
            )
        if pad is not None:
            e = x.elem
            arr = np.asarray(pad)
            if (
                isinstance(e, Tile)
                and e.is_static
                and (arr.shape != (e.rows, e.cols) or arr.dtype != e.dtype.numpy)
            ):
                raise self.error(
                    "in",
                    f"pad of shape {arr.shape} and dtype {arr.dtype} does not match element {e}",
                )
        self.pad = pad
        outs = ceil_div(d, chunk)
        outs = absorb(outs, lambda: self.fresh_ragged("chunks"))
        shape = (*x.shape[: n - 1 - self.rank], outs, chunk, *x.shape[n - self.rank :])
        outputs = [("out", StreamType(x.elem, shape))]
        if not isinstance(pad_flags, bool):
            raise self.error("in", f"pad_flags must be a bool, not {pad_flags!r}")
        if pad_flags:
            outputs.append(("pad_flags", StreamType(Tile(bool_, 1, 1), shape)))
        self._finish([("in", x)], outputs)

    def params(self) -> dict[str, Any]:
        return {"chunk": self.chunk, "rank": self.rank, "padded": self.pad is not None}

    def execute(self, io: Any) -> Iterator[Any]:
        if self.rank > 0:
            yield from self._outer(io)
        else:
            yield from self._inner(io)

    def _send(self, io: Any, tok: Any, flag: Any) -> Iterator[Any]:
        yield from io.send(0, tok)
        if len(self.out_types) == 2:
            yield from io.send(1, flag)

    def _outer(self, io: Any) -> Iterator[Any]:
        seen = 0
        while True:
            tok = yield from io.recv(0)
            if isinstance(tok, Stop):
                level, seen = reshape_outer_stop(tok.level, self.rank, seen, self.chunk)
                tok = Stop(level)
            yield from self._send(io, tok, np.zeros((1, 1), dtype=bool) if is_data(tok) else tok)
            if tok is DONE:
                return

    def _inner(self, io: Any) -> Iterator[Any]:
        two = len(self.out_types) == 2
        rank = self.inputs[0].rank
        data = BlockWriter(lambda t: io.send(0, t), 1, input_rank=rank)
        flags = BlockWriter(lambda t: io.send(1, t), 1, input_rank=rank) if two else None
        writers = [w for w in (data, flags) if w is not None]
        count = 0

        def pad_out() -> Iterator[Any]:
            nonlocal count
            if count == 0:
                return
            if self.pad is None:
                raise io.fail(
                    "in",
                    f"a vector ends {count} element(s) into a chunk of {self.chunk} and no pad was given "
                    "(give pad= to pad it)",
                )
            for _ in range(self.chunk - count):
                yield from data.data(np.array(self.pad, copy=True))
                if flags:
                    yield from flags.data(np.ones((1, 1), dtype=bool))
            for w in writers:
                yield from w.end_block()
            count = 0

        while True:
            tok = yield from io.recv(0)
            if tok is DONE:
                yield from pad_out()
                for w in writers:
                    yield from w.done()
                return
            if isinstance(tok, Stop):
                yield from pad_out()
                for w in writers:
                    yield from w.outer_stop(tok.level)
                continue
            yield from data.data(tok)
            if flags:
                yield from flags.data(np.zeros((1, 1), dtype=bool))
            count += 1
            if count == self.chunk:
                for w in writers:
                    yield from w.end_block()
                count = 0


class Promote(Node):
    """Add a dimension of size 1.

    ``rank=None`` (the paper's form) adds a new outermost dim of size ``1 if D_a > 0 else 0``, so an
    empty stream stays empty. ``rank=p`` (the artifact's positional form, ``0 <= p <= a``) inserts
    a size-1 dim at rank ``p``: stops of level ``>= p`` rise by one.
    """

    kind = "Promote"
    zero_costs = frozenset({"onchip_bytes", "offchip_bytes", "flops"})
    forwards_tiles = True

    def __init__(self, x: Stream, rank: int | None = None, *, name: str | None = None):
        graph = x.graph if isinstance(x, Stream) else None
        super().__init__(graph, name)
        x = self._stream(x, "in")
        n = len(x.shape)
        if rank is None:
            outer = x.shape[0]
            d = (1 if outer > 0 else 0) if is_static(outer) else sp.Min(outer, 1)
            shape = (d, *x.shape)
        else:
            rank = _rank_arg(self, rank, 0, x.rank, "rank", x)
            shape = (*x.shape[: n - rank], 1, *x.shape[n - rank :])
        self.rank = rank
        self._finish([("in", x)], [("out", StreamType(x.elem, shape))])

    def params(self) -> dict[str, Any]:
        return {"rank": "outermost" if self.rank is None else self.rank}

    def execute(self, io: Any) -> Iterator[Any]:
        if self.rank is None:
            yield from self._outermost(io)
        elif self.rank == 0:
            writer = BlockWriter(lambda t: io.send(0, t), 1, input_rank=self.inputs[0].rank)

            def unit(tok: Any) -> Iterator[Any]:
                yield from writer.data(tok)
                yield from writer.end_block()

            yield from expand_each(io, writer, unit)
        else:
            while True:
                tok = yield from io.recv(0)
                yield from io.send(
                    0, Stop(promote_stop(tok.level, self.rank)) if isinstance(tok, Stop) else tok
                )
                if tok is DONE:
                    return

    def _outermost(self, io: Any) -> Iterator[Any]:
        a = self.inputs[0].rank
        held, seen = None, False
        while True:
            tok = yield from io.recv(0)
            if tok is DONE:
                if held is not None:
                    yield from io.send(0, Stop(a + 1))
                elif seen and a == 0:
                    yield from io.send(0, Stop(1))
                yield from io.send(0, DONE)
                return
            seen = True
            if held is not None:
                yield from io.send(0, held)
                held = None
            if isinstance(tok, Stop) and tok.level == a:
                held = tok
            else:
                yield from io.send(0, tok)


class Expand(Node):
    """Repeat each element of ``x`` to fill the inner ``rank`` dims of ``ref``.

    ``x`` has ``ref``'s shape except that its inner ``rank`` dims are 1; the output has ``ref``'s
    shape and stop tokens.
    """

    kind = "Expand"
    zero_costs = frozenset({"offchip_bytes", "flops"})
    forwards_tiles = True

    def __init__(self, x: Stream, ref: Stream, rank: int, *, name: str | None = None):
        graph = x.graph if isinstance(x, Stream) else None
        super().__init__(graph, name)
        x = self._stream(x, "in")
        ref = self._stream(ref, "ref")
        if x.rank != ref.rank:
            raise self.error(
                "ref",
                f"reference rank {ref.rank} ({shape_str(ref.shape)}) differs from input rank {x.rank} ({shape_str(x.shape)})",
            )
        self.rank = _rank_arg(self, rank, 1, x.rank, "rank", x)
        n = len(x.shape)
        if any(d != 1 for d in x.shape[n - self.rank :]):
            raise self.error("in", f"the inner {self.rank} dims of {shape_str(x.shape)} must be 1")
        for a, b in zip(x.shape[: n - self.rank], ref.shape[: n - self.rank], strict=True):
            if dims_equal(a, b) is False:
                raise self.error(
                    "ref",
                    f"reference shape {shape_str(ref.shape)} does not match input shape {shape_str(x.shape)} outside the inner {self.rank} dims",
                )
        self._finish([("in", x), ("ref", ref)], [("out", StreamType(x.elem, ref.shape))])

    def params(self) -> dict[str, Any]:
        return {"rank": self.rank}

    def onchip_bytes(self, convention: str) -> Dim:
        return self.out_types[0].elem.size_bytes

    def execute(self, io: Any) -> Iterator[Any]:
        while True:
            x = yield from io.recv(0)
            if x is DONE:
                r = yield from io.recv(1)
                if r is not DONE:
                    raise io.fail("ref", f"reference continues with {r!r} after the input ended")
                yield from io.send(0, DONE)
                return
            if not is_data(x):
                raise io.fail("in", f"expected an element, got {x!r} (inner dims must be 1)")
            # The element's closing stop is taken whenever it arrives, while the reference is
            # walked (the hardware drops it in parallel): so the walk never waits for it.
            closing = None
            while True:
                if closing is None and io.has(0):
                    closing = yield from self._closing(io)
                if closing is None and not io.has(1):
                    yield "a token on 'in' (the element's closing stop) or on 'ref'"
                    continue
                r = yield from io.recv(1)
                if r is DONE:
                    raise io.fail("ref", "reference ended before the input")
                if is_data(r):
                    yield from io.send(0, x)
                    continue
                ends = partition_closes_chunk(r.level, self.rank)
                if ends and closing is not None:
                    self._check_close(io, r, closing)
                yield from io.send(0, r)
                if ends:
                    if closing is None:
                        self._check_close(io, r, (yield from self._closing(io)))
                    break

    def _closing(self, io: Any) -> Iterator[Any]:
        """Take the element's closing stop from ``in``: whenever it arrives, so no output waits
        for it, nor is ordered after it for the race check (``io.recv_unordered``)."""
        closing = yield from io.recv_unordered(0)
        if not (isinstance(closing, Stop) and partition_closes_chunk(closing.level, self.rank)):
            raise io.fail(
                "in",
                f"element followed by {closing!r}; inner dims of size 1 close with S{self.rank} or higher",
            )
        return closing

    def _check_close(self, io: Any, r: Stop, closing: Stop) -> None:
        """The reference's chunk closes with the input element's level."""
        if r.level != closing.level:
            raise io.fail(
                "ref", f"reference closes with {r!r} where the input closes with {closing!r}"
            )


class RepeatStatic(Node):
    """Emit every element ``count`` times, forming a new innermost dim of size ``count``."""

    kind = "RepeatStatic"
    zero_costs = frozenset({"offchip_bytes", "flops"})
    forwards_tiles = True

    def __init__(self, x: Stream, count: int, *, name: str | None = None):
        graph = x.graph if isinstance(x, Stream) else None
        super().__init__(graph, name)
        x = self._stream(x, "in")
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise self.error("in", f"count must be a positive integer, not {count!r}")
        self.count = count
        self._finish([("in", x)], [("out", StreamType(x.elem, (*x.shape, count)))])

    def params(self) -> dict[str, Any]:
        return {"count": self.count}

    def onchip_bytes(self, convention: str) -> Dim:
        return self.out_types[0].elem.size_bytes

    def execute(self, io: Any) -> Iterator[Any]:
        writer = BlockWriter(lambda t: io.send(0, t), 1, input_rank=self.inputs[0].rank)

        def repeat(tok: Any) -> Iterator[Any]:
            for _ in range(self.count):
                yield from writer.data(tok)
            yield from writer.end_block()

        yield from expand_each(io, writer, repeat)
