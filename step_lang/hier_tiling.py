"""Hierarchical tiling (paper App. B.2, Fig. 18): a graph on big tiles rewritten onto hardware tiles.

:func:`hier_tile` returns a new graph (the user's is not changed) in which no tile exceeds the
hardware tile ``rows x cols``. Every stream whose tiles exceed it becomes a *blocked* stream: a
``[R, C]`` tile becomes ``R/r x C/c`` tiles of ``[r, c]``, row-major, as two new innermost
dims ``[..., R/r, C/c]``. ``r`` is the largest divisor of ``R`` not above ``rows`` (``rows``
itself when it divides ``R``; a 20-row tile on 16-row hardware becomes two 10-row tiles), ``c``
likewise; :func:`uneven_splits` names the streams whose tiles so fill only part of a hardware
tile. Streams whose tiles fit are left as they are.

Operators (everything else whose tiles exceed the hardware tile, or that reads a blocked
stream, is refused with an error naming the node, its tile and the hardware tile):

* ``LinearOffChipLoad`` reads the same bytes as hardware tiles: the big tile's affine read
  plus two inner dims (refused when the read's tile numbers carry across a row of the tensor,
  which no affine read of hardware tiles can reproduce); a blocked ``ref`` is counted down to
  one token per big tile first.
* ``LinearOffChipStore`` writes the blocked stream when its order is the tensor's row-major
  order of hardware tiles (big tiles one hardware tile high, or spanning the tensor's width).
* Element-wise ``Map`` (every input tile the output's shape) runs on the hardware tiles.
* ``Map`` of ``matmul`` / ``matmul_t`` on ``[M, K] x [K, N]``: both operands are buffered
  (``Bufferize`` of the big tile, the storage the big-tile Map held) and read back
  (``Streamify``, affine) in the order ``(m, n, k)`` over hardware tiles; an ``Accum`` of
  ``matmul_acc`` folds ``k``. Output ``[..., M/r, N/c]``.
* ``Accum`` of ``matmul_acc`` over ``rank`` big-tile dims ``D``: each big tile's operands
  buffered and read ``(m, n, k)``; one ``Accum`` of rank ``rank + 1`` folds ``(*D, k)`` with
  held accumulators, one per output hardware tile ``(m, n)``.
* ``Accum`` of an element-wise fold (``accum_add``, ``accum_max``) over ``D`` (static or
  dynamic): a unit dim inside each hardware tile and one ``Accum(held=2, inner=1)``: each
  position folds on its own, in the original order.
* Dynamically sized tiles (rows a symbol, dynamic tiling's ``[n_e, D]``) keep their rows whole
  and split their columns: ``[n, C]`` is one row block of ``C/c`` tiles ``[n, c]``; a matmul
  with a dynamic ``M`` has one row block.
* ``Flatten`` and ``Promote`` of outer dims of a blocked stream (their ranks move up by two);
  ``RepeatStatic`` of a blocked stream replays each block (``Bufferize`` + ``Streamify``).
* Routing (``Partition``, ``Reassemble``, ``EagerMerge``), ``RandomOffChipLoad`` of
  ``expert_addr`` addresses, ``Reshape`` with padding, ``Accum`` of ``retile_row`` (over a
  dynamic dim too: packing through a permuted buffer read), ``RetileStreamify`` and
  broadcasting ``Map``: :mod:`step_lang.hier_tiling_routing`.

Accumulation order
    A hardware-tiled matmul sums its products in the original ``k`` order: big tiles in stream
    order, hardware tiles of ``K`` within each, the ``K`` columns of a hardware tile within
    that. With the BF16 functions (``s = +0; s += a*b`` in ``k`` order, FP32, the chain
    continued by ``matmul_acc``) that is the unsplit matmul's chain, so the rewritten graph is
    bit-exact. The fixed-point ``matmul`` rounds once per call: a split ``K`` is summed
    exactly over the hardware tiles and rounded once per big tile (``matmul_sum``), and an
    Accum of ``matmul_acc`` over big tiles adds those rounded products as it did (an Accum of
    ``accum_add``, held across the big tiles; ``overflow="wrap"`` only)
    (``docs/hierarchical_tiling.md``).

Queue depths the user set carry over to the same streams, scaled to hardware tiles (``d`` big
tiles become ``d * n_rows * n_cols`` hardware tiles).

Costs: off-chip bytes are unchanged (every load reads each byte it read before, once per read);
the buffers add on-chip bytes, reported per node by :func:`tiling_report`.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from . import functions as F
from . import hier_tiling_requests as requests
from . import hier_tiling_routing as routing
from .dims import Dim, is_static, product
from .errors import StepTypeError
from .graph import Graph, Node, OffChipTensor, Stream
from .metrics import metrics
from .ops import (
    Accum,
    Bufferize,
    Flatten,
    LinearOffChipLoad,
    LinearOffChipStore,
    Map,
    Promote,
    RepeatStatic,
    Streamify,
)
from .passes import remap_refs
from .registry import NodeRegistry
from .types import Tile

__all__ = [
    "Blocked",
    "TilingReport",
    "UnevenSplit",
    "hier_tile",
    "hw_split",
    "tiling_report",
    "uneven_splits",
]


def hw_split(extent: int, hw: int) -> int:
    """The hardware tile extent for a big-tile extent: its largest divisor not above ``hw``."""
    for what, v, low in (("extent", extent, 0), ("hw", hw, 1)):
        if isinstance(v, bool) or not isinstance(v, int) or v < low:
            raise StepTypeError(f"hw_split: {what} must be an integer of at least {low}, not {v!r}")
    if extent <= hw:
        return extent
    return max(d for d in range(1, hw + 1) if extent % d == 0)


@dataclass(frozen=True)
class Blocked:
    """How a big-tile stream became hardware tiles: ``[R, C]`` -> ``n_rows x n_cols`` of
    ``[rows, cols]`` (two new innermost dims); a dynamic ``R`` is one row block of
    ``[R, cols]`` tiles."""

    rows: Dim  # a symbol for dynamic tiles (then n_rows == 1)
    cols: int
    n_rows: int
    n_cols: int


@dataclass(frozen=True)
class UnevenSplit:
    """A stream whose big tile ``[R, C]`` is not a whole number of hardware tiles in some
    direction, so :func:`hier_tile` splits it into smaller ones (``[rows, cols]``, the largest
    that divide it) than the hardware tile ``[hw_rows, hw_cols]``."""

    stream: str
    tile: tuple[Dim, int]
    rows: Dim
    cols: int
    hw_rows: int
    hw_cols: int

    @property
    def use(self) -> float:
        """The part of a hardware tile each of these tiles fills (a dynamic row count, kept
        whole: its columns' part)."""
        rows = self.rows / self.hw_rows if isinstance(self.rows, int) else 1
        return rows * self.cols / self.hw_cols

    def describe(self) -> str:
        r, c = self.tile
        n_rows = r // self.rows if isinstance(r, int) else 1
        uneven = [f"{r} rows"] if isinstance(r, int) and self.rows < min(r, self.hw_rows) else []
        uneven += [f"{c} columns"] if self.cols < min(c, self.hw_cols) else []
        return (
            f"stream {self.stream}: its [{r}, {c}] tiles become {n_rows} x {c // self.cols} "
            f"hardware tiles of [{self.rows}, {self.cols}] each ({' and '.join(uneven)}: not a "
            f"multiple of the {self.hw_rows}x{self.hw_cols} hardware tile; each fills "
            f"{self.use:.1%} of it)"
        )


def uneven_splits(graph: Graph, rows: int = 16, cols: int = 16) -> list[UnevenSplit]:
    """The streams of ``graph`` that :func:`hier_tile` to ``rows x cols`` splits into tiles
    smaller than the hardware tile: an extent above the hardware's that the hardware's does
    not divide (``20`` rows on 16-row hardware: two 10-row tiles; a prime above 16: 1-row
    tiles). Nothing is padded, so these run on part of each hardware tile; a tool that tiles a
    user's graph says so (``step --hw-tile`` prints a note per stream)."""
    found = []
    for node in graph.topo_order():
        for s in node.outputs:
            t = s.elem
            if not isinstance(t, Tile) or not isinstance(t.cols, int):
                continue  # dynamic columns larger than the hardware's: hier_tile refuses them
            b = _split(t, rows, cols)
            uneven_rows = isinstance(b.rows, int) and b.rows < min(t.rows, rows)
            if uneven_rows or b.cols < min(t.cols, cols):
                found.append(UnevenSplit(s.name, (t.rows, t.cols), b.rows, b.cols, rows, cols))
    return found


def _split(t: Tile, rows: int, cols: int) -> Blocked:
    """How a tile ``t`` with static columns splits on ``rows x cols`` hardware tiles: each
    extent into its largest divisor that fits (:func:`hw_split`); a dynamic row count stays
    whole (one row block)."""
    c = hw_split(t.cols, cols)
    if not isinstance(t.rows, int):
        return Blocked(t.rows, c, 1, t.cols // c)
    r = hw_split(t.rows, rows)
    return Blocked(r, c, t.rows // r, t.cols // c)


@dataclass
class _Rewrite:
    graph: Graph
    rows: int
    cols: int
    new: Graph
    streams: dict[tuple[str, int], Stream] = field(default_factory=dict)
    blocked: dict[tuple[str, int], Blocked] = field(default_factory=dict)
    feedback: list[tuple[Node, Node]] = field(default_factory=list)

    # -- helpers ----------------------------------------------------------------------------

    def refuse(self, node: Node, text: str) -> StepTypeError:
        return node.error(None, f"hierarchical tiling to {self.rows}x{self.cols}: {text}")

    def fits(self, t: Any) -> bool:
        if not isinstance(t, Tile):
            return True
        return not (
            (is_static(t.rows) and t.rows > self.rows) or (is_static(t.cols) and t.cols > self.cols)
        )

    def split_of(self, node: Node, t: Tile) -> Blocked:
        """How tile ``t`` splits; a dynamic row count stays whole (one row block: the hardware's
        dynamic tiles hold up to ``HwConfig.dyn_tile_rows`` rows), only its columns split."""
        if not isinstance(t.cols, int):
            raise self.refuse(node, f"tile {t} has dynamic columns larger than the hardware tile")
        return _split(t, self.rows, self.cols)

    def src(self, s: Stream) -> Stream:
        return self.streams[(s.node.name, s.port)]

    def info(self, s: Stream) -> Blocked | None:
        return self.blocked.get((s.node.name, s.port))

    def tensor(self, t: OffChipTensor) -> OffChipTensor:
        return self.new.tensors[t.name]

    def bind(self, node: Node, new: Node | Stream, info: Blocked | None = None) -> None:
        self.bind_port(node, 0, new if isinstance(new, Stream) else new.out, info)

    def bind_port(self, node: Node, port: int, out: Stream, info: Blocked | None) -> None:
        """Output ``port`` of the user's ``node`` is ``out`` (blocked as ``info``; a dynamic
        row count is ``out``'s own)."""
        self.streams[(node.name, port)] = out
        if info is not None and not isinstance(info.rows, int):
            info = dataclasses.replace(info, rows=out.elem.rows)
        if info is not None:
            self.blocked[(node.name, port)] = info

    # -- the walk ---------------------------------------------------------------------------

    def run(self) -> Graph:
        for t in self.graph.tensors.values():
            self.new.tensor(t.name, t.shape, t.dtype)
        for node in self.graph.topo_order():
            touched = any(self.info(s) is not None for s in node.inputs) or not all(
                self.fits(t.elem) for t in node.out_types
            )
            if not touched:
                self.clone(node)
            elif type(node) not in SPLITS:
                raise self.refuse(node, self._why(node))
            else:
                SPLITS.entry(node)(self, node)
        for node, c in self.feedback:
            if any(self.info(s) is not None for s in node.inputs):
                raise self.refuse(node, "a loop carrying big tiles cannot be split")
            c.inputs = [self.src(s) for s in node.inputs]
        self._prune()
        self.new.queue_depths = self._depths()
        self.new.queue_scale = self._scales()
        return self.new

    def _scales(self) -> dict[str, int]:
        """Every blocked stream's queue holds, at a reader's default depth, the bytes it held
        before: ``n_rows * n_cols`` hardware tiles per big tile (``Graph.queue_scale``, times
        the scale the user's graph gave the stream, if it was tiled before). A
        stream read only by Bufferizes holds half of that: the Bufferize's second buffer takes
        the place of the queue slot the big-tile consumer had (the queue keeps half a block to
        take the producer's burst; ``docs/hierarchical_tiling.md``, "Queues")."""
        readers: dict[str, set[type]] = {}
        for s, n, _ in self.new.edges():
            readers.setdefault(s.name, set()).add(type(n))
        scales = {}
        for key, b in self.blocked.items():
            s = self.streams[key]
            n = b.n_rows * b.n_cols
            if s.node.name not in self.new.nodes or n == 1:
                continue
            scales[s.name] = max(1, n // 2) if readers.get(s.name) == {Bufferize} else n
        # a graph tiled before (hier_tile of a hier_tile'd graph) keeps its own scales: a queue
        # of the same tokens, each now split in ``n``, holds ``scale * n`` of them
        for node in self.graph.nodes.values():
            for port, old in enumerate(node.outputs):
                new = self.streams[(node.name, port)]
                if old.name in self.graph.queue_scale and new.node.name in self.new.nodes:
                    scales[new.name] = self.graph.queue_scale[old.name] * scales.get(new.name, 1)
        return scales

    def _prune(self) -> None:
        """Drop the copied nodes that only fed rewritten ones (an ``expert_addr`` generator of
        big-tile addresses, replaced by one per load): every output of the user's graph is
        consumed, so an unconsumed copy fed nodes that now read something else."""
        # A node the user left unconsumed (an unfinished graph) stays.
        used = {s for s, _, _ in self.graph.edges()}
        kept = {n.name for n in self.graph.nodes.values() if not all(s in used for s in n.outputs)}
        while True:
            consumed = {s for s, _, _ in self.new.edges()}
            dead = [
                n
                for n in self.new.nodes.values()
                if n.outputs and n.name not in kept and not any(s in consumed for s in n.outputs)
            ]
            if not dead:
                return
            for n in dead:
                del self.new.nodes[n.name]

    def _depths(self) -> dict[str, int]:
        """The user's queue depths on the same streams: in tokens of the new stream, so a queue
        of ``d`` big tiles becomes ``d * n_rows * n_cols`` hardware tiles (the same bytes)."""
        depths = {}
        for node in self.graph.nodes.values():
            for port, s in enumerate(node.outputs):
                new = self.streams[(node.name, port)]
                if s.name in self.graph.queue_depths and new.node.name in self.new.nodes:
                    b = self.blocked.get((node.name, port))
                    scale = b.n_rows * b.n_cols if b is not None else 1
                    depths[new.name] = self.graph.queue_depths[s.name] * scale
        return depths

    def _why(self, node: Node) -> str:
        for s, port in zip(node.inputs, node.input_names, strict=True):
            if self.info(s) is not None:
                return (
                    f"port {port} reads big tiles {s.elem} and a {node.kind} has no "
                    f"hardware-tile form"
                )
        big = next(t.elem for t in node.out_types if not self.fits(t.elem))
        return f"its output tile {big} exceeds the hardware tile and a {node.kind} cannot be split"

    def clone(self, node: Node) -> None:
        """The node itself (its types do not change) on the new graph's streams."""
        c = copy.copy(node)
        c.graph = self.new
        if node.is_feedback:  # its input is produced later in the walk: bound in run()
            c.inputs = []
            self.feedback.append((node, c))
        remap_refs(c, self.src, lambda n: n, self.tensor)
        self.new._register(c)
        for port in range(len(node.out_types)):
            self.streams[(node.name, port)] = Stream(c, port)

    # -- loads and stores -------------------------------------------------------------------

    def _load(self, node: LinearOffChipLoad) -> None:
        ref = None
        if node.inputs:
            ref = self.src(node.inputs[0])
            if self.info(node.inputs[0]) is not None:  # one read per big tile, as before
                ref = routing.blocked_ref(self, node, node.inputs[0])
        if self.fits(node.tile_type):  # only the ref was blocked: the same read
            same = LinearOffChipLoad(
                self.tensor(node.tensor),
                tile=node.tile,
                out_shape=node.out_shape,
                stride=node.stride,
                base=node.base,
                ref=ref,
                elem_bytes=node.elem_bytes,
                on_demand=node.on_demand,
                fetch=node.fetch,
                name=node.name,
            )
            self.bind(node, same)
            return
        b = self.split_of(node, node.tile_type)
        big = node.tiled  # (*outer, TR, TC) in big tiles
        hw = (*big[:-2], big[-2] * b.n_rows, big[-1] * b.n_cols)
        scale = (1,) * (len(big) - 2) + (b.n_rows, b.n_cols)
        hw_stride = [int(product(hw[p + 1 :])) for p in range(len(hw))]

        def digits(k: int) -> list[int]:
            out = []
            for radix in reversed(big):
                k, d = divmod(k, radix)
                out.append(d)
            return out[::-1]

        base = digits(node.base)
        per_dim = [
            digits(s) if n > 1 else [0] * len(big)
            for n, s in zip(node.out_shape, node.stride, strict=True)
        ]
        for p, radix in enumerate(big):
            reach = base[p] + sum(
                (n - 1) * d[p] for n, d in zip(node.out_shape, per_dim, strict=True)
            )
            if reach >= radix:
                raise self.refuse(
                    node,
                    f"the read of tile {node.tile[0]}x{node.tile[1]} (out_shape {list(node.out_shape)}, "
                    f"stride {list(node.stride)}) carries across dim {p} of the tiled tensor "
                    f"{list(big)}; no affine read of hardware tiles reproduces it",
                )

        def hw_index(d: Sequence[int]) -> int:
            return sum(x * s * h for x, s, h in zip(d, scale, hw_stride, strict=True))

        stride = [hw_index(d) for d in per_dim] + [hw_stride[-2], 1]
        new = LinearOffChipLoad(
            self.tensor(node.tensor),
            tile=(b.rows, b.cols),
            out_shape=(*node.out_shape, b.n_rows, b.n_cols),
            stride=stride,
            base=hw_index(base),
            ref=ref,
            elem_bytes=node.elem_bytes,
            on_demand=node.on_demand,
            fetch=(b.n_rows, b.n_cols),
            name=node.name,
        )
        self.bind(node, new, b)

    def _store(self, node: LinearOffChipStore) -> None:
        x = node.inputs[0]
        b = self.info(x)
        if b is None:  # a tile that fits, produced as it is
            self.clone(node)
            return
        if b.n_rows > 1 and node.tiled[-1] > 1:
            raise self.refuse(
                node,
                f"tiles {x.elem} in a tensor {node.tiled[-1]} tiles wide arrive as {b.n_rows} "
                f"rows of hardware tiles each, not in the tensor's row-major order",
            )
        LinearOffChipStore(
            self.src(x),
            self.tensor(node.tensor),
            elem_bytes=node.elem_bytes,
            fetch=(b.n_rows, b.n_cols),
            name=node.name,
        )

    # -- shape operators on the outer dims ---------------------------------------------------

    def _flatten(self, node: Any) -> None:
        b = self.info(node.inputs[0])
        new = Flatten(self.src(node.inputs[0]), node.lo + 2, node.hi + 2, name=node.name)
        self.bind(node, new, b)

    def _promote(self, node: Any) -> None:
        b = self.info(node.inputs[0])
        if node.rank is None:
            new = Promote(self.src(node.inputs[0]), name=node.name)
        else:
            new = Promote(self.src(node.inputs[0]), node.rank + 2, name=node.name)
        self.bind(node, new, b)

    def _repeat(self, node: Any) -> None:
        """Each big tile ``count`` times: its block of hardware tiles buffered and replayed."""
        x = node.inputs[0]
        b = self.info(x)
        buf = Bufferize(self.src(x), 2, name=f"{node.name}_buf").out
        self.bind(node, Streamify(buf, repeat=(node.count,), name=node.name), b)

    # -- compute ----------------------------------------------------------------------------

    def _map(self, node: Map) -> None:
        meta = node.fn.meta
        if meta in ("matmul", "matmul_t"):
            self._matmul(node, meta == "matmul_t", reduce_dims=())
            return
        if node.fn is F.row_append:
            requests.split_row_append(self, node)
            return
        if meta == "rowsum":
            requests.split_row_sum(self, node)
            return
        out = node.out_types[0].elem
        same = isinstance(out, Tile) and all(
            isinstance(t, Tile) and (t.rows, t.cols) == (out.rows, out.cols) for t in node.arg_types
        )
        if meta == "broadcast" and not same and routing.split_broadcast_map(self, node):
            return
        if meta not in ("same", "broadcast") or not same or len(node.inputs) != len(node.arg_types):
            raise self.refuse(
                node,
                f"function '{node.fn.name}' on tiles {[str(t) for t in node.arg_types]} is not "
                f"element-wise on equal tiles; only element-wise functions and matmuls split",
            )
        infos = {self.info(s) for s in node.inputs}
        b = next(iter(infos))
        if len(infos) != 1 or b is None:
            raise self.refuse(node, "its inputs are not split alike")
        new = Map(*[self.src(s) for s in node.inputs], fn=node.fn, name=node.name)
        self.bind(node, new, b)

    def _accum(self, node: Accum) -> None:
        meta = node.fn.meta
        if meta == "ignores_values":  # a count: one token per big tile
            requests.split_count(self, node)
            return
        reduced = node.inputs[0].shape[len(node.inputs[0].shape) - node.rank :]
        if node.fn is F.retile_row:
            if all(isinstance(d, int) for d in reduced):
                routing.split_concat_rows(self, node)
            else:
                routing.split_pack_dynamic(self, node)
            return
        if meta in ("matmul", "matmul_t"):
            self._matmul(node, meta == "matmul_t", reduce_dims=tuple(reduced))
            return
        out = node.out_types[0].elem
        t = node.arg_types[0] if len(node.arg_types) == 1 else None
        if meta != "same" or not isinstance(t, Tile) or (t.rows, t.cols) != (out.rows, out.cols):
            raise self.refuse(
                node,
                f"an Accum of '{node.fn.name}' on tiles {[str(a) for a in node.arg_types]} has "
                f"no hardware-tile form (matmul_acc and element-wise folds split)",
            )
        self._fold(node)

    def _fold(self, node: Accum) -> None:
        """An element-wise fold over big tiles: each hardware tile position folds on its own.
        The blocked stream ``[.., *D, nr, nc]`` gets a unit dim inside (``Promote``) and one
        ``Accum(held=2, inner=1)`` keeps the ``nr * nc`` accumulators while ``D`` streams by,
        so each element sees the original order and nothing is buffered (``D`` may be
        dynamic)."""
        x = node.inputs[0]
        b = self.info(x)
        if b is None:
            raise self.refuse(node, "its input is not split")
        unit = Promote(self.src(x), 0, name=f"{node.name}_unit").out
        new = Accum(unit, fn=node.fn, rank=node.rank + 1, held=2, inner=1, name=node.name)
        self.bind(node, new, b)

    def _matmul(self, node: Node, transpose_b: bool, reduce_dims: tuple[int, ...]) -> None:
        """``node``'s matmul over hardware tiles: each big tile's operands buffered and read in
        the order ``(m, n, k)``; over reduced big-tile dims ``D`` (an Accum of ``matmul_acc``),
        one accumulator per output hardware tile ``(m, n)`` held across ``D`` (``Accum(held=2,
        inner=1)``), so each big tile is consumed as it arrives, as the big-tile Accum does."""
        a_s, b_s = node.inputs
        ta = node.arg_types[0]
        out = node.out_types[0].elem
        if self.rows != self.cols:
            raise self.refuse(node, "a matmul splits on square hardware tiles only")
        h = self.rows
        # A dynamic M stays one row block (dynamic tiles: ``split_of``).
        m_r = hw_split(ta.rows, h) if isinstance(ta.rows, int) else ta.rows
        k_c = hw_split(ta.cols, h)
        n_c = hw_split(out.cols, h)
        nm = ta.rows // m_r if isinstance(ta.rows, int) else 1
        nk, nn = ta.cols // k_c, out.cols // n_c
        n_red = len(reduce_dims)
        # Fixed point rounds once per matmul: K split over hardware tiles is summed exactly and
        # rounded once per big tile (``matmul_sum``), then added across D as matmul_acc adds.
        exact = _is_fixed(node.fn) and nk > 1
        if exact and n_red and node.fn.numerics.overflow != "wrap":
            raise self.refuse(
                node,
                f"fixed-point '{node.fn.name}' with K = {ta.cols} > {h} under "
                f"overflow='{node.fn.numerics.overflow}': the products of a big tile, rounded "
                f"once, are added across the Accum as wrapped {out.dtype} values, which only "
                f"'wrap' keeps equal",
            )
        # An output tile that fits (nm = nn = 1) stays a plain stream: no (m, n) dims.
        lead = 2 if (nm, nn) != (1, 1) else 0
        # A: buffer (nm, nk) per big tile; read (nm, nn, nk).
        a_rd = Streamify(
            self._buffer(node, "a", a_s),
            out_shape=(nm, nn, nk)[2 - lead :],
            stride=(nk, 0, 1)[2 - lead :],
            name=f"{node.name}_a_read",
        ).out
        # B: buffer (nk, nn) (transposed: (nn, nk)) per big tile; read (nm, nn, nk).
        b_rd = Streamify(
            self._buffer(node, "b", b_s),
            out_shape=(nm, nn, nk)[2 - lead :],
            stride=((0, nk, 1) if transpose_b else (0, 1, nn))[2 - lead :],
            name=f"{node.name}_b_read",
        ).out
        fn = _acc_fn(node.fn, out, transpose_b, exact)
        if exact and n_red:  # each big tile's product, then the sum across D
            prod = Accum(a_rd, b_rd, fn=fn, rank=1, name=f"{node.name}_tile").out
            add = _functions_of(node.fn).accum_add
            if lead:  # [.., *D, nm, nn]: one accumulator per (m, n), held across D
                unit = Promote(prod, 0, name=f"{node.name}_unit").out
                new = Accum(unit, fn=add, rank=n_red + 1, held=2, inner=1, name=node.name)
            else:
                new = Accum(prod, fn=add, rank=n_red, name=node.name)
        elif n_red and lead:  # fold (*D, k) for each (m, n): the (m, n) accumulators are held
            new = Accum(a_rd, b_rd, fn=fn, rank=n_red + 1, held=2, inner=1, name=node.name)
        else:  # (*D, k) are the innermost dims
            new = Accum(a_rd, b_rd, fn=fn, rank=n_red + 1, name=node.name)
        self.bind(node, new, Blocked(m_r, n_c, nm, nn) if lead else None)

    def as_blocked(self, node: Node, s: Stream, tag: str) -> tuple[Stream, Blocked]:
        """``s`` on the new graph, blocked; a stream of tiles that fit as blocks of one tile
        (two new dims of 1, ``<node>_<tag>_row`` and ``_col``)."""
        b = self.info(s)
        if b is not None:
            return self.src(s), b
        x = Promote(self.src(s), 0, name=f"{node.name}_{tag}_row").out
        x = Promote(x, 0, name=f"{node.name}_{tag}_col").out
        return x, Blocked(s.elem.rows, s.elem.cols, 1, 1)

    def _buffer(self, node: Node, which: str, s: Stream) -> Stream:
        """The operand's hardware tiles of one big tile in a buffer."""
        x, _ = self.as_blocked(node, s, which)
        return Bufferize(x, 2, name=f"{node.name}_{which}_buf").out


#: How each operator splits (:meth:`_Rewrite.run` copies every other node whose tiles fit and
#: whose inputs are not blocked, and refuses the rest).
SPLITS: NodeRegistry[Callable[[_Rewrite, Any], None]] = NodeRegistry("hierarchical tiling")
SPLITS.add(_Rewrite._load, LinearOffChipLoad)
SPLITS.add(_Rewrite._store, LinearOffChipStore)
SPLITS.add(_Rewrite._map, Map)
SPLITS.add(_Rewrite._accum, Accum)
SPLITS.add(_Rewrite._flatten, Flatten)
SPLITS.add(_Rewrite._promote, Promote)
SPLITS.add(_Rewrite._repeat, RepeatStatic)
routing.register(SPLITS)
requests.register(SPLITS)


def _is_fixed(fn: Any) -> bool:
    from .numerics import is_fixed_point

    return is_fixed_point(fn)


def _acc_fn(fn: Any, out: Tile, transpose_b: bool, exact: bool = False) -> Any:
    """The Accum function of ``fn``'s arithmetic (Map ``matmul`` or Accum ``matmul_acc``) over
    the ``K`` hardware tiles: ``matmul_acc`` (a BF16 chain continued), or with ``exact`` the
    fixed-point ``matmul_sum`` (the exact sum, rounded once)."""
    from .numerics import functions, is_hardware_function

    if exact:
        return _functions_of(fn).matmul_sum_out(out.dtype, transpose_b=transpose_b)
    if is_hardware_function(fn):
        return functions(fn.numerics).matmul_acc_out(out.dtype, transpose_b=transpose_b)
    return F.matmul_acc(transpose_b, out.dtype)


def _functions_of(fn: Any) -> Any:
    """The hardware function set ``fn`` belongs to."""
    from .numerics import functions

    return functions(fn.numerics)


def hier_tile(graph: Graph, rows: int = 16, cols: int = 16) -> Graph:
    """``graph`` rewritten so that no tile exceeds ``rows x cols`` (see the module docstring).

    Returns a new graph named ``<name>_hw<rows>x<cols>``; ``graph`` is not changed. Raises
    :class:`~step_lang.errors.StepTypeError` naming the node it cannot split."""
    if not isinstance(graph, Graph):
        raise StepTypeError(f"hier_tile: graph must be a step_lang Graph, not {graph!r}")
    for what, v in (("rows", rows), ("cols", cols)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise StepTypeError(f"hier_tile: {what} must be a positive integer, not {v!r}")
    new = Graph(f"{graph.name}_hw{rows}x{cols}")
    return _Rewrite(graph, rows, cols, new).run()


@dataclass(frozen=True)
class TilingReport:
    """Costs before and after :func:`hier_tile` (``convention`` of :func:`metrics`)."""

    convention: str
    offchip_before: Any
    offchip_after: Any
    onchip_before: Any
    onchip_after: Any
    #: ``name -> (before, after)`` on-chip bytes of every node whose bytes changed (``None``:
    #: the node does not exist on that side).
    onchip_by_node: dict[str, tuple[Any, Any]]

    def table(self) -> str:
        lines = [
            f"off-chip bytes: {self.offchip_before} -> {self.offchip_after}",
            f"on-chip bytes:  {self.onchip_before} -> {self.onchip_after}",
            f"{'node':<24} {'before':>12} {'after':>12}",
        ]
        for name, (b, a) in self.onchip_by_node.items():
            lines.append(
                f"{name:<24} {'-' if b is None else str(b):>12} {'-' if a is None else str(a):>12}"
            )
        return "\n".join(lines)


def tiling_report(before: Graph, after: Graph, convention: str = "paper") -> TilingReport:
    """Off-chip and on-chip bytes of ``before`` and ``after`` (its :func:`hier_tile` form)."""
    mb, ma = metrics(before, convention), metrics(after, convention)
    b = {n.name: n.onchip_bytes for n in mb.nodes}
    a = {n.name: n.onchip_bytes for n in ma.nodes}
    changed = {
        name: (b.get(name), a.get(name))
        for name in [*b, *(n for n in a if n not in b)]
        if b.get(name) != a.get(name)
    }
    return TilingReport(
        convention, mb.offchip_bytes, ma.offchip_bytes, mb.onchip_bytes, ma.onchip_bytes, changed
    )
