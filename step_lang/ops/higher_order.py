"""Higher-order operators: Map, Accum, Scan, FlatMap (with RetileStreamify) and Zip.

Map, Accum, Scan and FlatMap take one or more inputs of the same shape; several inputs are zipped
implicitly (their tokens must line up one by one). A single input of tuples (from :class:`Zip`) is
unpacked when the function takes as many arguments as the tuple has items.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from ..dims import Dim, absorb, dims_equal, product, shape_str
from ..functions import AccumFn, FlatMapFn, MapFn, retile_cols, retile_rows, retile_rows_masked
from ..graph import Node, Stream
from ..stoprules import BlockWriter, accum_stop, held_stop, partition_closes_chunk
from ..tokens import DONE, Stop, is_data, to_tokens
from ..types import ElemType, StreamType, Tile, TupleType
from ._io import recv_aligned

__all__ = ["Accum", "FlatMap", "Map", "RetileStreamify", "Scan", "Zip"]


def _zip_inputs(
    node: Node, inputs: Sequence[Any]
) -> tuple[list[tuple[str, Stream]], tuple[Dim, ...]]:
    if not inputs:
        raise node.error(None, "needs at least one input stream")
    ports = [f"in{i}" for i in range(len(inputs))]
    streams = [node._stream(s, p) for s, p in zip(inputs, ports, strict=True)]
    shape = list(streams[0].shape)
    for s, p in zip(streams[1:], ports[1:], strict=True):
        if s.rank != streams[0].rank:
            raise node.error(
                p,
                f"shape {shape_str(s.shape)} has rank {s.rank}, port 'in0' has {shape_str(streams[0].shape)} (rank {streams[0].rank})",
            )
        for k, d in enumerate(s.shape):
            eq = dims_equal(d, shape[k])
            if eq is False:
                raise node.error(
                    p,
                    f"shape {shape_str(s.shape)} differs from {shape_str(streams[0].shape)} on port 'in0'",
                )
            if eq is None and isinstance(d, int):
                shape[k] = d  # a static dim pins the symbolic one
    return list(zip(ports, streams, strict=True)), tuple(shape)


def _arg_types(streams: Sequence[Stream], arity: int) -> tuple[ElemType, ...]:
    types = tuple(s.elem for s in streams)
    if (
        len(types) == 1
        and isinstance(types[0], TupleType)
        and arity == len(types[0].items)
        and arity > 1
    ):
        return types[0].items
    return types


class _FnNode(Node):
    """An operator that applies a function to its inputs' elements (Map, Accum, Scan, FlatMap):
    the one home of how a zipped input's tuples become the function's arguments."""

    arg_types: tuple[ElemType, ...]

    def _set_arg_types(self, streams: Sequence[Stream], arity: int) -> None:
        self.arg_types = _arg_types(streams, arity)
        self.unpacks_tuple = len(streams) == 1 and len(self.arg_types) > 1

    def fn_args(self, toks: Sequence[Any]) -> tuple[Any, ...]:
        """The function's arguments from one token per input: a zipped input's tuple taken
        apart when :attr:`unpacks_tuple`."""
        return tuple(toks[0]) if self.unpacks_tuple else tuple(toks)


def _check_fn(node: Node, fn: Any, cls: type, what: str) -> None:
    if not isinstance(fn, cls):
        got = f"{type(fn).__name__} '{fn}'" if hasattr(fn, "name") else repr(fn)
        raise node.error(None, f"fn must be {what} from step_lang.functions, got {got}")


class Map(_FnNode):
    """Apply ``fn`` to every element (or every tuple of zipped elements); stop tokens pass through."""

    kind = "Map"
    is_compute = True
    zero_costs = frozenset({"offchip_bytes"})

    def __init__(self, *inputs: Stream, fn: MapFn, name: str | None = None):
        graph = inputs[0].graph if inputs and isinstance(inputs[0], Stream) else None
        super().__init__(graph, name)
        _check_fn(self, fn, MapFn, "a MapFn")
        ins, shape = _zip_inputs(self, inputs)
        self.fn = fn
        self._set_arg_types([s for _, s in ins], fn.arity)
        elem = fn.out_type(self.error, *self.arg_types)
        self._finish(ins, [("out", StreamType(elem, shape))])

    def params(self) -> dict[str, Any]:
        return {"fn": str(self.fn)}

    def flops(self) -> Dim:
        return self.out_types[0].cardinality * self.fn.flops(*self.arg_types)

    def onchip_bytes(self, convention: str) -> Dim:
        if convention == "paper" and self.fn.name.startswith("matmul"):
            a, w = self.arg_types
            return 16 * a.cols * a.dtype.nbytes + w.size_bytes
        return 0

    def execute(self, io: Any) -> Iterator[Any]:
        out = self.out_types[0].elem
        while True:
            toks = yield from recv_aligned(io)
            first = toks[0]
            if not is_data(first):
                yield from io.send(0, first)
                if first is DONE:
                    return
                continue
            yield from io.send(0, self.fn.apply(out, *self.fn_args(toks)))


class _Reduce(_FnNode):
    """Shared construction of Accum and Scan."""

    def _build(
        self,
        inputs: Sequence[Stream],
        fn: AccumFn,
        rank: int,
        keep_shape: bool,
        held: int = 0,
        inner: int = 0,
    ) -> None:
        _check_fn(self, fn, AccumFn, "an AccumFn")
        ins, shape = _zip_inputs(self, inputs)
        rank_in = len(shape) - 1 - held
        if isinstance(rank, bool) or not isinstance(rank, int) or not 1 <= rank <= rank_in:
            raise self.error(
                "in0",
                f"rank must be an integer in [1, {rank_in}] for input shape {shape_str(shape)}"
                + (f" with {held} held dims" if held else "")
                + f", not {rank!r}",
            )
        self.fn, self.rank = fn, rank
        self._set_arg_types([s for _, s in ins], fn.arity)
        n = len(shape)
        hshape = shape[n - inner - held : n - inner]
        bad = [d for d in hshape if not isinstance(d, int) or d < 1]
        if bad:
            raise self.error(
                "in0",
                f"held dims {shape_str(hshape)} of input shape {shape_str(shape)} must be static "
                f"and positive",
            )
        reduced = (*shape[n - rank - held : n - inner - held], *shape[n - inner :])
        elem = fn.out_type(self.error, self.arg_types, reduced)
        if keep_shape and elem != fn.out_type(self.error, self.arg_types, (1,) * len(reduced)):
            raise self.error(
                "in0",
                f"function '{fn.name}' grows its accumulator with the group ({elem} after "
                f"{shape_str(reduced)}); a Scan emits it after every element, so its tiles "
                "would differ; use Accum",
            )
        if isinstance(elem, Tile):
            elem = Tile(
                elem.dtype,
                absorb(elem.rows, lambda: self.fresh_ragged("rows")),
                absorb(elem.cols, lambda: self.fresh_ragged("cols")),
            )
        out_shape = shape if keep_shape else (*shape[: n - rank - held], *hshape)
        self._finish(ins, [("out", StreamType(elem, tuple(out_shape)))])

    def params(self) -> dict[str, Any]:
        return {"fn": str(self.fn), "rank": self.rank}

    def flops(self) -> Dim:
        return self.inputs[0].type.cardinality * self.fn.flops(*self.arg_types)

    def _init(self, first: tuple[Any, ...] | None) -> Any:
        return self.fn.init(self.out_types[0].elem, first)


class Accum(_Reduce):
    """Fold the innermost ``rank`` dims with ``fn``; emit one accumulator per group.

    ``[.., D_{b-1}..D_0]`` becomes ``[..]`` (``b = rank``). A stop of level ``s >= b`` emits the
    accumulator and re-initialises it; ``s > b`` is then written as ``Stop(s - b)``.

    **Held accumulators** (``held=h``, ``inner=i``): the innermost ``rank + h`` dims are
    ``[*R_out, *H, *R_in]`` with ``h`` static *held* dims ``H`` between ``rank - i`` outer and
    ``i`` inner reduced dims. The node keeps one accumulator per position of ``H`` (``prod(H)``
    of them), folds every element into the accumulator of its position, and at the end of a
    group (a stop of level ``s >= rank + h``) emits the ``prod(H)`` accumulators in ``H``'s
    order, as a stream ``[.., *H]``, the last followed by ``Stop(s - rank)``. So
    ``[.., D, M, N, K]`` with ``rank=2, held=2, inner=1`` folds ``D`` and ``K`` for each
    ``(m, n)`` without buffering ``D``: each accumulator sees its elements in stream order,
    ``D``-major, ``K``-minor (the hardware-tiled form of an Accum over big tiles,
    ``docs/hierarchical_tiling.md``).
    """

    kind = "Accum"
    is_compute = True
    zero_costs = frozenset({"offchip_bytes"})

    def __init__(
        self,
        *inputs: Stream,
        fn: AccumFn,
        rank: int,
        held: int = 0,
        inner: int = 0,
        name: str | None = None,
    ):
        graph = inputs[0].graph if inputs and isinstance(inputs[0], Stream) else None
        super().__init__(graph, name)
        self.held, self.inner = self._check_held(inputs, rank, held, inner)
        self._build(inputs, fn, rank, keep_shape=False, held=self.held, inner=self.inner)

    def _check_held(
        self, inputs: Sequence[Any], rank: Any, held: Any, inner: Any
    ) -> tuple[int, int]:
        for what, v in (("held", held), ("inner", inner)):
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise self.error(None, f"{what} must be a non-negative integer, not {v!r}")
        if held == 0:
            if inner:
                raise self.error(None, f"inner = {inner} needs held dims (held = 0)")
            return 0, 0
        if isinstance(rank, bool) or not isinstance(rank, int) or not inner < rank:
            raise self.error(
                None,
                f"held dims must lie inside an outer reduced dim: inner = {inner} must be "
                f"below rank = {rank!r}",
            )
        return held, inner

    @property
    def held_shape(self) -> tuple[int, ...]:
        """The held dims ``H`` (empty for a plain Accum)."""
        if not self.held:
            return ()
        shape = self.inputs[0].shape
        n = len(shape)
        return tuple(shape[n - self.inner - self.held : n - self.inner])

    def params(self) -> dict[str, Any]:
        out = super().params()
        if self.held:
            out.update(held=self.held, inner=self.inner)
        return out

    def onchip_bytes(self, convention: str) -> Dim:
        out = self.out_types[0].elem.size_bytes * product(self.held_shape)
        if convention == "paper" and self.fn.name.startswith("matmul"):
            a, w = self.arg_types
            return 16 * a.cols * a.dtype.nbytes + w.size_bytes + out
        return out

    def execute(self, io: Any) -> Iterator[Any]:
        """One accumulator per held position (one without held dims); the position advances
        after every element (``inner = 0``) or at every stop that closes the inner reduced
        dims."""
        out = self.out_types[0].elem
        hshape = self.held_shape
        n_pos = int(product(hshape))
        group = self.rank + self.held  # a stop of this level or above closes a group
        accs: list[Any] = [None] * n_pos
        pos, started = 0, False
        while True:
            toks = yield from recv_aligned(io)
            first = toks[0]
            if first is DONE:
                if started:
                    raise io.fail("in0", "stream ended inside an accumulation group")
                yield from io.send(0, DONE)
                return
            if isinstance(first, Stop):
                if self.inner and first.level >= self.inner:
                    pos = (pos + 1) % n_pos
                if first.level < group:
                    continue
                if pos != 0:
                    raise io.fail(
                        "in0", f"a group ended at held position {pos} of {n_pos} ({list(hshape)})"
                    )
                for i, acc in enumerate(accs):
                    value = acc if acc is not None else self._init(None)
                    yield from io.send(0, self.fn.emit(out, value))
                    last = i == n_pos - 1
                    level = accum_stop(first.level, self.rank) if last else held_stop(i, hshape)
                    if level:
                        yield from io.send(0, Stop(level))
                accs, started = [None] * n_pos, False
                continue
            args = self.fn_args(toks)
            if accs[pos] is None:
                accs[pos] = self._init(args)
            accs[pos] = self.fn.update(out, accs[pos], *args)
            started = True
            if self.held and not self.inner:
                pos = (pos + 1) % n_pos


class Scan(_Reduce):
    """Like Accum, but emit the accumulator after every element; the shape is unchanged.

    The accumulator restarts after every stop of level ``>= rank``.
    """

    kind = "Scan"
    is_compute = True
    zero_costs = frozenset({"offchip_bytes"})

    def __init__(self, *inputs: Stream, fn: AccumFn, rank: int, name: str | None = None):
        graph = inputs[0].graph if inputs and isinstance(inputs[0], Stream) else None
        super().__init__(graph, name)
        self._build(inputs, fn, rank, keep_shape=True)

    def onchip_bytes(self, convention: str) -> Dim:
        return self.out_types[0].elem.size_bytes

    def execute(self, io: Any) -> Iterator[Any]:
        out = self.out_types[0].elem
        acc, started = None, False
        while True:
            toks = yield from recv_aligned(io)
            first = toks[0]
            if not is_data(first):
                if first is DONE or partition_closes_chunk(first.level, self.rank):
                    acc, started = None, False
                yield from io.send(0, first)
                if first is DONE:
                    return
                continue
            args = self.fn_args(toks)
            if not started:
                acc, started = self._init(args), True
            acc = self.fn.update(out, acc, *args)
            yield from io.send(0, self.fn.emit(out, acc))


class FlatMap(_FnNode):
    """Replace every element by the sub-stream ``fn`` makes of it, concatenated in order.

    With a rank-``c`` sub-stream, ``[D_a..D_1, D_0]`` becomes ``[D_a..D_1, D', *inner]``: the
    input's innermost dim merges with the sub-streams' outermost (``D'``, ragged unless static).
    """

    kind = "FlatMap"
    zero_costs = frozenset({"onchip_bytes", "offchip_bytes", "flops"})

    def __init__(self, *inputs: Stream, fn: FlatMapFn, name: str | None = None):
        graph = inputs[0].graph if inputs and isinstance(inputs[0], Stream) else None
        super().__init__(graph, name)
        self._build(inputs, fn)

    def _build(self, inputs: Sequence[Stream], fn: FlatMapFn) -> None:
        _check_fn(self, fn, FlatMapFn, "a FlatMapFn")
        ins, shape = _zip_inputs(self, inputs)
        self.fn = fn
        self._set_arg_types([s for _, s in ins], fn.arity)
        elem, inner, count = fn.out_type(self.error, *self.arg_types)
        merged = (
            self.fresh_ragged("n")
            if count is None
            else absorb(product((shape[-1], count)), lambda: self.fresh_ragged("n"))
        )
        self._finish(ins, [("out", StreamType(elem, (*shape[:-1], merged, *inner)))])

    def params(self) -> dict[str, Any]:
        return {"fn": str(self.fn)}

    def execute(self, io: Any) -> Iterator[Any]:
        out = self.out_types[0].elem
        writer = BlockWriter(lambda t: io.send(0, t), self.fn.rank, input_rank=self.inputs[0].rank)
        while True:
            toks = yield from recv_aligned(io)
            first = toks[0]
            if first is DONE:
                yield from writer.done()
                return
            if isinstance(first, Stop):
                yield from writer.outer_stop(first.level)
                continue
            sub = self.fn.apply(out, *self.fn_args(toks))
            yield from writer.block(to_tokens(sub, self.fn.rank)[:-1])


class RetileStreamify(FlatMap):
    """Split every tile into its rows (``split="rows"``) or columns; optionally drop padded rows.

    ``is_pad`` is a stream of the same shape whose elements are ``[R, 1]`` bool tiles marking the
    padding rows of each tile (e.g. Reshape's padding flags packed by ``Accum(retile_row)``).
    """

    kind = "RetileStreamify"

    def __init__(
        self,
        x: Stream,
        *,
        split: str = "rows",
        is_pad: Stream | None = None,
        name: str | None = None,
    ):
        graph = x.graph if isinstance(x, Stream) else None
        Node.__init__(self, graph, name)
        if split not in ("rows", "cols"):
            raise self.error("in0", f"split must be 'rows' or 'cols', not {split!r}")
        if is_pad is not None and split != "rows":
            raise self.error("in1", "padding masks apply to split='rows' only")
        self.split = split
        if is_pad is None:
            self._build([x], retile_rows if split == "rows" else retile_cols)
        else:
            self._build([x, is_pad], retile_rows_masked)

    def params(self) -> dict[str, Any]:
        return {"split": self.split, "masked": len(self.inputs) == 2}


class Zip(Node):
    """Pair two streams of the same shape into a stream of tuples."""

    kind = "Zip"
    zero_costs = frozenset({"onchip_bytes", "offchip_bytes", "flops"})

    def __init__(self, a: Stream, b: Stream, *, name: str | None = None):
        graph = a.graph if isinstance(a, Stream) else None
        super().__init__(graph, name)
        ins, shape = _zip_inputs(self, [a, b])
        self._finish(ins, [("out", StreamType(TupleType((ins[0][1].elem, ins[1][1].elem)), shape))])

    def execute(self, io: Any) -> Iterator[Any]:
        while True:
            a, b = yield from recv_aligned(io)
            yield from io.send(0, (a, b) if is_data(a) else a)
            if a is DONE:
                return
