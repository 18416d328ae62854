"""Hierarchical tiling of per-request operators (decode attention's).

The handlers of :mod:`step_lang.hier_tiling` for the operators that read and write whole big
tiles at data-dependent addresses, repeat a request's big tile, update one row of a big tile,
reduce a big tile's rows, or generate big tiles. Each receives the rewrite (``rw``) and the
user's node and builds the node's hardware-tile form on the new graph; a blocked stream
``[..., nr, nc]`` of ``[r, c]`` tiles stands for ``[...]`` of ``[nr * r, nc * c]`` tiles.

* ``RandomOffChipLoad`` / ``RandomOffChipStore`` of big tiles (addresses from any generator):
  the same addresses, each naming a ``fetch`` block of ``nr x nc`` hardware tiles (one
  transfer, the same bytes). The hardware reads a block as consecutive hardware tiles, so its
  tiles must be: one row of hardware tiles (``nr = 1``) or the tensor's full width. (Addresses
  from ``expert_addr`` are rewritten instead, :func:`step_lang.hier_tiling_routing.split_random_load`.)
* ``Expand`` of a blocked stream: each block buffered and read once per element of the
  reference (``Streamify`` with ``ref``); a blocked reference is counted down to one token per
  big tile.
* ``Map`` of ``row_append`` (the KV cache's new row): each hardware tile of the big tile gets the
  row's piece of its columns at its own offset (``block_row_offsets``: ``k - i * r`` in row block
  ``i``) through ``row_append_part``, which leaves a tile whose rows do not hold the offset
  unchanged.
* ``Map`` of ``row_sum`` over column blocks: an ``Accum`` of the chain-continuing
  ``row_sum_acc`` (BF16 hardware functions) over each row block's ``nc`` tiles: the same FP32
  chain, left to right, so the result is bit-exact.
* ``FlatMap`` of a function with a ``pieces`` form (``FlatMapFn.pieces``, e.g. attention's
  padding masks): the function emits every big tile as ``nc`` hardware tiles, regrouped into
  ``[.., 1, nc]`` blocks.
* ``Accum`` of ``accum_count`` over a blocked stream: the blocks counted down to one token each
  first (a count does not read values).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from . import functions as F
from .graph import Node, Stream
from .ops import (
    Accum,
    Bufferize,
    Expand,
    FlatMap,
    Flatten,
    Map,
    Promote,
    RandomOffChipLoad,
    RandomOffChipStore,
    Reshape,
    Streamify,
)
from .types import Tile

if TYPE_CHECKING:
    from .hier_tiling import Blocked, _Rewrite

__all__ = [
    "block_count",
    "register",
    "row_pieces",
    "split_count",
    "split_row_append",
    "split_row_sum",
]


def _consecutive(rw: _Rewrite, node: Node, b: Blocked, tiled: tuple[int, ...]) -> None:
    """Refuse a block whose hardware tiles are not consecutive in the tensor's tile order."""
    if b.n_rows > 1 and tiled[-1] > 1:
        raise rw.refuse(
            node,
            f"its {b.n_rows * b.rows}x{b.n_cols * b.cols} tiles of tensor '{node.tensor.name}' "
            f"({tiled[-1]} tiles wide) are not one run of {b.rows}x{b.cols} hardware tiles; a "
            f"random access reads a block of consecutive hardware tiles (tiles one hardware "
            f"tile high, or spanning the tensor's width)",
        )


def split_random_load(rw: _Rewrite, node: RandomOffChipLoad) -> None:
    """A read of big tiles at data-dependent addresses: the same addresses, each a block of
    ``nr x nc`` hardware tiles (``fetch``)."""
    from . import hier_tiling_routing as routing

    gen = node.inputs[0].node
    if type(gen) is FlatMap and getattr(gen.fn, "name", None) == "expert_addr":
        routing.split_random_load(rw, node)
        return
    if node.fetch is not None:
        raise rw.refuse(node, f"it already reads blocks of {list(node.fetch)} tiles")
    b = rw.split_of(node, node.tile_type)
    _consecutive(rw, node, b, node.tiled)
    new = RandomOffChipLoad(
        rw.src(node.inputs[0]),
        rw.tensor(node.tensor),
        tile=(b.rows, b.cols),
        elem_bytes=node.elem_bytes,
        on_demand=node.on_demand,
        fetch=(b.n_rows, b.n_cols),
        name=node.name,
    )
    rw.bind(node, new, b)


def split_random_store(rw: _Rewrite, node: RandomOffChipStore) -> None:
    """A write of big tiles at data-dependent addresses: each address a block of hardware
    tiles (``fetch``), acknowledged once."""
    waddr, wdata = node.inputs
    b = rw.info(wdata)
    if b is None or rw.info(waddr) is not None or node.fetch is not None:
        raise rw.refuse(node, f"port wdata reads big tiles {wdata.elem} it cannot split")
    _consecutive(rw, node, b, node.tiled)
    new = RandomOffChipStore(
        rw.src(waddr),
        rw.src(wdata),
        rw.tensor(node.tensor),
        elem_bytes=node.elem_bytes,
        fetch=(b.n_rows, b.n_cols),
        name=node.name,
    )
    rw.bind(node, new)


def block_count(rw: _Rewrite, node: Node, s: Stream, tag: str) -> Stream:
    """``s`` on the new graph with one ``[1,1]`` token per big tile (a stream whose values are
    not read: a reference, a count's input)."""
    if rw.info(s) is None:
        return rw.src(s)
    from .numerics import accum_count

    return Accum(rw.src(s), fn=accum_count("int32"), rank=2, name=f"{node.name}_{tag}").out


def split_expand(rw: _Rewrite, node: Expand) -> None:
    """Each block of the input buffered and read once per element of the reference."""
    x, ref = node.inputs
    b = rw.info(x)
    ref_new = block_count(rw, node, ref, "ref")
    if b is None:
        rw.bind(node, Expand(rw.src(x), ref_new, node.rank, name=node.name))
        return
    # The block and the expanded unit dims in one buffer: [..] of [1 (rank), nr, nc].
    buf = Bufferize(rw.src(x), node.rank + 2, name=f"{node.name}_buf").out
    rd = Streamify(
        buf,
        ref=ref_new,
        out_shape=(b.n_rows, b.n_cols),
        stride=(b.n_cols, 1),
        name=node.name,
    )
    rw.bind(node, rd, b)


def row_pieces(rw: _Rewrite, node: Node, s: Stream, b: Blocked, tag: str) -> Stream | None:
    """A ``[1, C]`` row operand against blocked ``[R, C]`` tiles: ``[.., nr, nc]`` of its
    ``[1, c]`` pieces, the row's block read once per row block. ``None``: ``s`` is not split
    that way."""
    from .hier_tiling import Blocked

    sb = rw.info(s)
    if sb is None:  # fits: nc == 1
        if b.n_cols != 1:
            return None
        x = _spread(rw.src(s), b.n_rows, f"{node.name}_{tag}_rows")
        return Promote(x, 0, name=f"{node.name}_{tag}_cols").out
    if sb != Blocked(1, b.cols, 1, b.n_cols):
        return None
    if b.n_rows == 1:
        return rw.src(s)
    buf = Bufferize(rw.src(s), 2, name=f"{node.name}_{tag}_buf").out
    x = Streamify(buf, repeat=(b.n_rows,), name=f"{node.name}_{tag}_rows").out  # [.., nr, 1, nc]
    return Flatten(x, 1, 2, name=f"{node.name}_{tag}_blk").out


def _spread(s: Stream, n: int, name: str) -> Stream:
    from .hier_tiling_routing import _spread as spread

    return spread(s, n, name)


def split_row_append(rw: _Rewrite, node: Map) -> None:
    """``row_append(tile, row, offset)`` on every hardware tile: the row's piece of its columns
    at the offset within its row block (``block_row_offsets``), ``row_append_part``."""
    tile, row, offset = node.inputs
    b = rw.info(tile)
    if b is None or rw.info(offset) is not None:
        raise rw.refuse(node, f"its tiles {tile.elem} are not split as row_append needs")
    piece = row_pieces(rw, node, row, b, "row")
    if piece is None:
        raise rw.refuse(node, f"its row {row.elem} is not split like the tile {tile.elem}")
    k = Promote(rw.src(offset), 0, name=f"{node.name}_k").out
    fn = F.block_row_offsets(b.rows, b.n_rows, b.n_cols)
    ks = FlatMap(k, fn=fn, name=f"{node.name}_offsets").out  # [.., nr * nc]
    ks = Reshape(ks, b.n_cols, 0, name=f"{node.name}_offsets_blk").out  # [.., nr, nc]
    new = Map(rw.src(tile), piece, ks, fn=F.row_append_part, name=node.name)
    rw.bind(node, new, b)


def split_row_sum(rw: _Rewrite, node: Map) -> None:
    """``row_sum`` of blocked tiles: per row block, an Accum of ``row_sum_acc`` over its ``nc``
    tiles (the FP32 chain continued left to right); ``[.., nr, 1]`` of ``[r, 1]``."""
    from .hier_tiling import Blocked

    x = node.inputs[0]
    b = rw.info(x)
    if b is None:
        raise rw.refuse(node, "its input is not split")
    if b.n_cols == 1:  # each hardware tile holds whole rows
        rw.bind(node, Map(rw.src(x), fn=node.fn, name=node.name), Blocked(b.rows, 1, b.n_rows, 1))
        return
    acc_fn = _row_sum_acc(node.fn)
    if acc_fn is None:
        raise rw.refuse(
            node,
            f"'{node.fn.name}' over {b.n_cols} column blocks needs a chain-continuing row sum; "
            f"only the BF16 hardware functions have one (row_sum_acc), so the sum would round "
            f"differently",
        )
    if b.n_rows == 1:  # [.., 1, nc] folded whole: a plain stream of [r, 1]
        rw.bind(node, Accum(rw.src(x), fn=acc_fn, rank=2, name=node.name))
        return
    acc = Accum(rw.src(x), fn=acc_fn, rank=1, name=f"{node.name}_acc").out  # [.., nr]
    rw.bind(node, Promote(acc, 0, name=node.name), Blocked(b.rows, 1, b.n_rows, 1))


def _row_sum_acc(fn: Any) -> Any:
    from .numerics import is_hardware_function

    nm = getattr(fn, "numerics", None)
    if not is_hardware_function(fn) or nm is None or not nm.is_float:
        return None
    from .float_numerics import row_sum_acc

    return row_sum_acc(nm)


def split_flatmap(rw: _Rewrite, node: FlatMap) -> None:
    """A FlatMap whose generated big tiles split into column pieces (``fn.pieces``)."""
    from .hier_tiling import Blocked

    out = node.out_types[0].elem
    if any(rw.info(s) is not None for s in node.inputs):
        raise rw.refuse(node, "it reads big tiles; a FlatMap splits only the tiles it generates")
    b = rw.split_of(node, out) if isinstance(out, Tile) else None
    if b is None or node.fn.rank != 0 or node.fn.pieces is None or b.n_rows != 1:
        raise rw.refuse(
            node,
            f"its function '{node.fn.name}' generates tiles {out} with no form on "
            f"{rw.rows}x{rw.cols} hardware tiles (a rank-0 function with a pieces form, one "
            f"hardware tile high)",
        )
    fn = node.fn.pieces(b.n_cols)
    gen = FlatMap(*[rw.src(s) for s in node.inputs], fn=fn, name=f"{node.name}_pieces").out
    # Every tile's nc pieces in a row; the pad is never used (the count is a multiple of nc),
    # but the hardware's Reshape needs one for a dynamic dim.
    pad = np.zeros((b.rows, b.cols), out.dtype.numpy)
    grouped = Reshape(gen, b.n_cols, 0, pad=pad, name=f"{node.name}_blk").out  # [.., D, nc]
    rw.bind(node, Promote(grouped, 1, name=node.name), Blocked(b.rows, b.cols, 1, b.n_cols))


def split_count(rw: _Rewrite, node: Accum) -> None:
    """An Accum of ``accum_count`` over blocked tiles: one token per big tile, then counted."""
    x = node.inputs[0]
    per_tile = block_count(rw, node, x, "blocks")
    rw.bind(node, Accum(per_tile, fn=node.fn, rank=node.rank, name=node.name))


def register(splits: Any) -> None:
    """Add this module's node handlers to :data:`step_lang.hier_tiling.SPLITS` (``Map`` and
    ``Accum`` dispatch to :func:`split_row_append`, :func:`split_row_sum` and
    :func:`split_count` by function)."""
    splits.add(split_random_load, RandomOffChipLoad)
    splits.add(split_random_store, RandomOffChipStore)
    splits.add(split_expand, Expand)
    splits.add(split_flatmap, FlatMap)
