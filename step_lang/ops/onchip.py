"""On-chip memory operators: Bufferize and Streamify."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from ..dims import Dim, dims_equal, product, shape_str
from ..graph import Node, Stream
from ..stoprules import BlockWriter, bufferize_stop, grid_tokens, partition_closes_chunk
from ..tokens import DONE, Stop, Token, is_data
from ..types import BufferType, StreamType
from ._io import expand_each

__all__ = ["BufferValue", "Bufferize", "Streamify"]


@dataclass(frozen=True, eq=False)
class BufferValue:
    """The runtime value of a buffer reference: the buffered sub-tensor as canonical tokens.

    ``tokens`` ends with ``Stop(rank)`` and holds the inner stops, so ragged buffers replay exactly.
    """

    tokens: tuple[Token, ...]
    rank: int

    @property
    def elements(self) -> list[Any]:
        return [t for t in self.tokens if is_data(t)]

    def __repr__(self) -> str:
        return f"Buffer({len(self.elements)} elements)"


class Bufferize(Node):
    """Collect the innermost ``rank`` dims of a stream into on-chip buffers; emit one reference each.

    ``Strm<T, a>`` of shape ``[D_a..D_b, D_{b-1}..D_0]`` becomes ``Strm<Buffer<T, b>, a-b>`` of shape
    ``[D_a..D_b]`` with buffer shape ``[D_{b-1}..D_0]``. A stop of level ``s > b`` is written as
    ``Stop(s - b)`` after the buffer it closes.
    """

    kind = "Bufferize"
    zero_costs = frozenset({"offchip_bytes", "flops"})

    def __init__(self, x: Stream, rank: int, *, name: str | None = None):
        graph = x.graph if isinstance(x, Stream) else None
        super().__init__(graph, name)
        x = self._stream(x, "in")
        if isinstance(rank, bool) or not isinstance(rank, int) or not 1 <= rank <= x.rank:
            raise self.error(
                "in", f"rank must be an integer in [1, {x.rank}] for input {x.type}, not {rank!r}"
            )
        if isinstance(x.elem, BufferType):
            raise self.error("in", f"cannot buffer buffer references ({x.elem})")
        self.rank = rank
        n = len(x.shape)
        buf = BufferType(x.elem, x.shape[n - rank :])
        self._finish([("in", x)], [("out", StreamType(buf, x.shape[: n - rank]))])

    def params(self) -> dict[str, Any]:
        return {"rank": self.rank}

    def onchip_bytes(self, convention: str) -> Dim:
        elem = self.inputs[0].elem
        return elem.size_bytes + 2 * self.out_types[0].elem.size_bytes

    def execute(self, io: Any) -> Iterator[Any]:
        held: list[Token] = []
        while True:
            tok = yield from io.recv(0)
            if tok is DONE:
                if held:
                    raise io.fail("in", "stream ended inside a buffer")
                yield from io.send(0, DONE)
                return
            if isinstance(tok, Stop) and partition_closes_chunk(tok.level, self.rank):
                yield from io.send(0, BufferValue((*held, Stop(self.rank)), self.rank))
                held = []
                outer = bufferize_stop(tok.level, self.rank)
                if outer is not None:
                    yield from io.send(0, Stop(outer))
            else:
                held.append(tok)


class Streamify(Node):
    """Replay buffers as streams: statically repeated, driven by a reference stream, or affinely read.

    Each read of a buffer yields the whole buffer in stored order (``read`` dims = the buffer
    shape), the whole buffer with its dims permuted (``order``: read dim ``j`` walks buffer dim
    ``order[j]``; the buffer may have one dynamic dim, its extent taken from each buffer), or, for
    a static buffer, the elements at ``base + sum(m[d] * stride[d])`` for ``m`` over
    ``out_shape``. Reads repeat:

    * ``repeat=(r1, ...)``: ``prod(repeat)`` times per buffer; output ``[*in.shape, *repeat, *read]``;
    * ``ref=stream``: once per element of ``ref``, whose outer dims match the buffer stream and whose
      ``c`` extra inner dims say how often to read each buffer; output ``[*ref.shape, *read]``.
    """

    kind = "Streamify"
    zero_costs = frozenset({"offchip_bytes", "flops"})
    # A Streamify *is* its buffer's memory-unit read (the paper profile charges it per element
    # read), so its consumers receive tiles as from a compute unit and do not pay the read again:
    # two operands streamed from two buffers are read in parallel (docs/simulator.md).
    tiles_in_memory = False

    def __init__(
        self,
        buffers: Stream,
        *,
        repeat: Sequence[int] = (),
        ref: Stream | None = None,
        stride: Sequence[int] | None = None,
        out_shape: Sequence[int] | None = None,
        base: int = 0,
        order: Sequence[int] | None = None,
        name: str | None = None,
    ):
        graph = buffers.graph if isinstance(buffers, Stream) else None
        super().__init__(graph, name)
        buffers = self._stream(buffers, "in")
        buf = buffers.elem
        if not isinstance(buf, BufferType):
            raise self.error(
                "in", f"expected a stream of buffer references (from Bufferize), got {buffers.type}"
            )
        repeat = self._sequence(repeat, "repeat")
        if not all(isinstance(r, int) and not isinstance(r, bool) and r >= 1 for r in repeat):
            raise self.error("repeat", f"repeat must be positive integers, not {list(repeat)}")
        if ref is not None and repeat:
            raise self.error("ref", "give either repeat or ref, not both")
        # The read of one buffer.
        if (stride is None) != (out_shape is None):
            raise self.error("stride", "an affine read needs both stride and out_shape")
        self.affine = stride is not None
        # A negative base would index from the end of the buffer (numpy wraps it) without a word.
        if isinstance(base, bool) or not isinstance(base, int) or base < 0:
            raise self.error("base", f"base must be a non-negative element index, not {base!r}")
        if base and not self.affine:
            raise self.error(
                "base",
                f"base {base} needs an affine read (stride and out_shape); a whole read starts at 0",
            )
        self.order = self._check_order(order, buf) if order is not None else None
        if self.order is not None and (self.affine or base):
            raise self.error(
                "order", "give either order or an affine read (stride, out_shape), not both"
            )
        if self.affine:
            if not all(isinstance(d, int) for d in buf.shape):
                raise self.error("in", f"affine reads need a static buffer, got {buf}")
            out_shape = self._sequence(out_shape, "out_shape")
            stride = self._sequence(stride, "stride")
            if len(out_shape) != len(stride) or not all(
                isinstance(n, int) and not isinstance(n, bool) and n >= 1 for n in out_shape
            ):
                raise self.error(
                    "stride",
                    f"out_shape {list(out_shape)} and stride {list(stride)} must be equally long positive/non-negative integers",
                )
            if not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in stride):
                raise self.error(
                    "stride", f"strides must be non-negative integers, not {list(stride)}"
                )
            size = int(product(buf.shape))
            last = base + sum((n - 1) * s for n, s in zip(out_shape, stride, strict=True))
            if last >= size:
                raise self.error(
                    "stride", f"the read reaches element #{last} of a buffer of {size} elements"
                )
            read_dims: tuple[Dim, ...] = out_shape
        elif self.order is not None:
            read_dims = tuple(buf.shape[d] for d in self.order)
        else:
            read_dims = buf.shape
        self.read_dims, self.stride, self.read_shape, self.base = read_dims, stride, out_shape, base
        self.repeat = repeat
        inputs = [("in", buffers)]
        if ref is not None:
            ref = self._stream(ref, "ref")
            if ref.rank < buffers.rank:
                raise self.error(
                    "ref",
                    f"reference {ref.type} has lower rank than the buffer stream {buffers.type}",
                )
            for a, b in zip(buffers.shape, ref.shape, strict=False):
                if dims_equal(a, b) is False:
                    raise self.error(
                        "ref",
                        f"reference shape {shape_str(ref.shape)} does not start with the buffer stream shape {shape_str(buffers.shape)}",
                    )
            self.ref_inner = ref.rank - buffers.rank
            inputs.append(("ref", ref))
            shape = (*ref.shape, *read_dims)
        else:
            shape = (*buffers.shape, *repeat, *read_dims)
        self._finish(inputs, [("out", StreamType(buf.tile, shape))])

    def params(self) -> dict[str, Any]:
        p: dict[str, Any] = {"repeat": list(self.repeat)} if self.repeat else {}
        if self.affine:
            p.update(stride=list(self.stride), out_shape=list(self.read_shape))
        if self.order is not None:
            p["order"] = list(self.order)
        return p

    def _check_order(self, order: Any, buf: BufferType) -> tuple[int, ...]:
        """``order`` as a permutation of the buffer's dims, which may hold one dynamic dim."""
        rank = len(buf.shape)
        if isinstance(order, str) or not hasattr(order, "__iter__"):
            raise self.error(
                "order", f"order must be a permutation of range({rank}), not {order!r}"
            )
        order = tuple(order)
        # integers first: sorting a mix of types raises a bare TypeError
        if not all(isinstance(d, int) and not isinstance(d, bool) for d in order) or sorted(
            order
        ) != list(range(rank)):
            raise self.error(
                "order", f"order {list(order)} is not a permutation of the {rank} buffer dims"
            )
        dynamic = [d for d in buf.shape if not isinstance(d, int)]
        if len(dynamic) > 1:
            raise self.error(
                "order",
                f"a permuted read of {buf} needs at most one dynamic buffer dim, not "
                f"{len(dynamic)} (the extents are taken from the buffer's element count)",
            )
        return order

    def read_extents(self, io: Any, value: BufferValue) -> tuple[int, ...]:
        """The buffer dims of one buffer value, its dynamic dim from its element count; a buffer
        that is not a full grid of that shape fails on port ``in``."""
        shape = self.inputs[0].elem.shape
        n = len(value.elements)
        static = int(product(d for d in shape if isinstance(d, int)))
        extents = tuple(d if isinstance(d, int) else (n // static if static else 0) for d in shape)
        if n == 0:  # nothing to walk: an empty buffer reads as empty in any order
            return extents
        walk = grid_tokens(extents, lambda m: [None])
        if n != int(product(extents)) or [t for t in value.tokens if isinstance(t, Stop)] != [
            t for t in walk if isinstance(t, Stop)
        ]:
            raise io.fail(
                "in",
                f"buffer of {n} elements is not a full grid of {shape_str(shape)} "
                f"(a permuted read needs every row of the dynamic dim equally long)",
            )
        return extents

    def onchip_bytes(self, convention: str) -> Dim:
        if convention == "paper":
            return 0  # Bufferize already holds the storage
        buf = self.inputs[0].elem
        return buf.size_bytes + buf.tile.size_bytes

    @property
    def _read_rank(self) -> int:
        return len(self.read_dims)

    def read_tokens(self, io: Any, value: BufferValue) -> list[Token]:
        """The tokens of one read of the buffer ``value`` (its elements and inner stops, ending
        with the read's closing stop for a read of rank > 0)."""
        if self.order is not None:
            return self._permuted(io, value)
        if not self.affine:
            return list(value.tokens)
        elems = value.elements
        size = int(product(self.inputs[0].elem.shape))
        if len(elems) != size:
            raise io.fail("in", f"buffer holds {len(elems)} elements, its static shape {size}")
        return grid_tokens(
            self.read_shape,
            lambda m: [elems[self.base + sum(i * s for i, s in zip(m, self.stride, strict=True))]],
        )

    def _permuted(self, io: Any, value: BufferValue) -> list[Token]:
        """The buffer's elements with its dims in ``order``; an empty grid in its canonical
        form (``grid_tokens``), never nothing: a buffer is one element of the buffer stream."""
        extents = self.read_extents(io, value)
        elems = value.elements
        strides = [int(product(extents[d + 1 :])) for d in range(len(extents))]
        shape = tuple(extents[d] for d in self.order)
        step = [strides[d] for d in self.order]
        return grid_tokens(
            shape, lambda m: [elems[sum(i * s for i, s in zip(m, step, strict=True))]]
        )

    def execute(self, io: Any) -> Iterator[Any]:
        if len(self.inputs) == 1:
            yield from self._static(io)
        else:
            yield from self._by_ref(io)

    def _static(self, io: Any) -> Iterator[Any]:
        writer = BlockWriter(
            lambda t: io.send(0, t),
            len(self.repeat) + self._read_rank,
            input_rank=self.inputs[0].rank,
        )

        def replay(tok: Any) -> Iterator[Any]:
            read = self.read_tokens(io, tok)
            yield from writer.block(grid_tokens(self.repeat, lambda m: read, sub=self._read_rank))

        yield from expand_each(io, writer, replay)

    def _by_ref(self, io: Any) -> Iterator[Any]:
        c = self.ref_inner
        writer = BlockWriter(
            lambda t: io.send(0, t), self._read_rank, input_rank=self.inputs[1].rank
        )
        while True:
            buf = yield from io.recv(0)
            if buf is DONE:
                r = yield from io.recv(1)
                if r is not DONE:
                    raise io.fail("ref", f"reference continues with {r!r} after the last buffer")
                yield from writer.done()
                return
            if isinstance(buf, Stop):  # only reached when c == 0
                r = yield from io.recv(1)
                if not (isinstance(r, Stop) and r.level == buf.level):
                    raise io.fail(
                        "ref", f"reference token {r!r} does not line up with buffer-stream {buf!r}"
                    )
                yield from writer.outer_stop(r.level)
                continue
            read = self.read_tokens(io, buf)
            if c == 0:
                r = yield from io.recv(1)
                if not is_data(r):
                    raise io.fail(
                        "ref", f"reference token {r!r} where an element should pair with a buffer"
                    )
                yield from writer.block(read)
                continue
            while True:
                r = yield from io.recv(1)
                if r is DONE:
                    raise io.fail("ref", "reference ended while a buffer was being read")
                if is_data(r):
                    yield from writer.block(read)
                    continue
                yield from writer.outer_stop(r.level)
                if partition_closes_chunk(r.level, c):
                    if r.level > c:
                        b2 = yield from io.recv(0)
                        if not (isinstance(b2, Stop) and b2.level == r.level - c):
                            raise io.fail(
                                "in",
                                f"buffer-stream token {b2!r} does not line up with reference {r!r}",
                            )
                    break
