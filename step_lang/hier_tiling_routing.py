"""Hierarchical tiling of routing, packing and broadcasting (the MoE layer's operators).

The handlers of :mod:`step_lang.hier_tiling` for the operators that move whole big tiles
around or change how rows are grouped into tiles. Each receives the rewrite (``rw``: its
``src``, ``info``, ``bind`` and ``refuse``) and the user's node, and builds the node's
hardware-tile form on the new graph. A blocked stream ``[..., nr, nc]`` of ``[r, c]`` tiles
stands for ``[...]`` of ``[nr * r, nc * c]`` tiles (:class:`~step_lang.hier_tiling.Blocked`).

* ``Partition``, ``Reassemble``, ``EagerMerge``, ``Parallelize`` (and ``Broadcast``,
  ``Sink``) route whole blocks: the routed chunk's rank grows by the two block dims (a Reassemble of rank-0 chunks needs ``count``: see
  :func:`split_reassemble`).
* ``RandomOffChipLoad`` whose addresses come from a FlatMap of ``expert_addr``: the same
  generator over hardware tiles (``tiles * nr * nc`` addresses from ``base * nr * nc``), its
  run of addresses buffered and read in block order (``Bufferize`` + ``Streamify``).
* ``Reshape`` of rank 0 (with padding and padding flags): the blocks flattened into the chunked
  dim, chunks of ``chunk * nr * nc`` hardware tiles, the pad tile split alike.
* ``Accum`` of ``retile_row`` (packing rows into a tile): each group buffered and its row pieces
  read column block by column block; over a dynamic dim, the same with a permuted read
  (``Streamify(order=)``) of the buffer of pieces, one dynamic tile per column block.
* ``RetileStreamify`` (optionally masked): each hardware tile split into rows, the rows of a
  row block read back in row-major order, padded rows dropped row by row; dynamic tiles through
  a permuted read of their row pieces.
* broadcasting ``Map`` (``[R, C]`` against ``[1, 1]``, ``[R, 1]``, ``[1, C]``): the small
  operand repeated once per hardware tile it meets.
* a ``LinearOffChipLoad`` whose ``ref`` is blocked reads once per big tile: the ref counted
  down to one ``[1,1]`` token per block (``Accum`` of ``count``).

Everything is built from operators and functions with hardware blocks (``step_hw``): Flatten,
Promote, Reshape, RepeatStatic, Bufferize, Streamify, Accum (``retile_row``, ``count``),
RetileStreamify and FlatMap ``expert_addr``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from . import functions as F
from .dims import is_static
from .graph import Node, Stream
from .ops import (
    Accum,
    Broadcast,
    Bufferize,
    EagerMerge,
    FlatMap,
    Flatten,
    Map,
    Parallelize,
    Partition,
    Promote,
    RandomOffChipLoad,
    Reassemble,
    RepeatStatic,
    Reshape,
    RetileStreamify,
    Sink,
    Streamify,
)
from .types import Tile

if TYPE_CHECKING:
    from .hier_tiling import Blocked, _Rewrite

__all__ = [
    "blocked_ref",
    "register",
    "split_broadcast_map",
    "split_concat_rows",
    "split_pack_dynamic",
]


def _blocked(rw: _Rewrite, node: Node, streams: list[Stream]) -> Blocked:
    """The one split every stream in ``streams`` has (they carry the same big tiles; dynamic
    row counts may differ: the node's output names its own)."""
    from dataclasses import replace

    infos = {
        b if b is None or isinstance(b.rows, int) else replace(b, rows=None)
        for b in (rw.info(s) for s in streams)
    }
    if len(infos) != 1 or None in infos:
        raise rw.refuse(node, "its inputs are not split alike")
    return next(iter(infos))


def _spread(s: Stream, n: int, name: str) -> Stream:
    """``s`` with a new innermost dim of ``n`` copies of each element."""
    if n == 1:
        return Promote(s, 0, name=name).out
    return RepeatStatic(s, n, name=name).out


# -- routing ---------------------------------------------------------------------------------


def split_partition(rw: _Rewrite, node: Partition) -> None:
    """Whole blocks routed: rank ``b`` becomes ``b + 2``; the selector is unchanged."""
    x, sel = node.inputs
    b = _blocked(rw, node, [x])
    new = Partition(rw.src(x), rw.src(sel), node.rank + 2, name=node.name)
    for port in range(len(node.out_types)):
        rw.bind_port(node, port, new.outputs[port], b)


def split_reassemble(rw: _Rewrite, node: Reassemble) -> None:
    """One block per selected input: chunks of rank ``a + 2``.

    A selector that selects nothing closes an empty innermost dim when the chunks have rank 0,
    but an empty non-innermost dim (an error, docs/semantics.md) once they are blocks; so a
    Reassemble of rank-0 chunks splits only with a ``count`` (every selector sets ``count >= 1``
    bits, checked at run time by both graphs)."""
    *ins, sel = node.inputs
    b = _blocked(rw, node, ins)
    if node.chunk_rank == 0 and not node.count:
        raise rw.refuse(
            node,
            f"it gathers single {ins[0].elem} tiles without a count; as blocks of "
            f"{b.n_rows}x{b.n_cols} hardware tiles a selector that selects nothing would make "
            f"an empty non-innermost dim (give count=)",
        )
    new = Reassemble([rw.src(s) for s in ins], rw.src(sel), count=node.count, name=node.name)
    rw.bind(node, new, b)


def split_merge(rw: _Rewrite, node: EagerMerge) -> None:
    """Whole blocks merged (a block is one outermost slice of the blocked input)."""
    b = _blocked(rw, node, list(node.inputs))
    new = EagerMerge([rw.src(s) for s in node.inputs], name=node.name)
    rw.bind_port(node, 0, new.outputs[0], b)
    rw.bind_port(node, 1, new.outputs[1], None)


def split_parallelize(rw: _Rewrite, node: Parallelize) -> None:
    """Whole blocks dealt round-robin: chunks of rank ``b + 2``, the same chunk count."""
    x = node.inputs[0]
    b = _blocked(rw, node, [x])
    new = Parallelize(rw.src(x), node.n, node.rank + 2, name=node.name)
    for port in range(len(node.out_types)):
        rw.bind_port(node, port, new.outputs[port], b)


def split_broadcast(rw: _Rewrite, node: Broadcast) -> None:
    """Copies of the blocked stream."""
    x = node.inputs[0]
    b = _blocked(rw, node, [x])
    new = Broadcast(rw.src(x), node.n, name=node.name)
    for port in range(len(node.out_types)):
        rw.bind_port(node, port, new.outputs[port], b)


def split_sink(rw: _Rewrite, node: Sink) -> None:
    """The blocked stream drained."""
    Sink(rw.src(node.inputs[0]), name=node.name)


# -- off-chip addresses ------------------------------------------------------------------------


def split_random_load(rw: _Rewrite, node: RandomOffChipLoad) -> None:
    """Big-tile addresses from ``expert_addr`` become hardware-tile addresses.

    Big tile ``a`` of a tensor tiled ``[..., TR, TC]`` is hardware tiles ``(i, c)`` at
    ``(a - a % TC) * nr * nc + i * TC * nc + (a % TC) * nc + c``. A run of ``tiles`` big tiles
    from ``base + e * tiles`` covers the hardware tiles ``[first * nr * nc, (first + tiles) *
    nr * nc)`` when it is made of whole rows of big tiles (or a big tile's hardware tiles are
    consecutive: ``nr = 1`` or ``TC = 1``). Then ``expert_addr(tiles * nr * nc, base * nr *
    nc)`` names exactly those, each once, and a buffer of one run read in block order
    ``(big tile, i, c)`` gives the blocked stream: the same bytes, once each."""
    raddr = node.inputs[0]
    b = rw.split_of(node, node.tile_type)
    gen = raddr.node
    fn = getattr(gen, "fn", None)
    if type(gen) is not FlatMap or getattr(fn, "name", None) != "expert_addr":
        raise rw.refuse(
            node,
            f"its addresses name big tiles {node.tile_type}; each must become "
            f"{b.n_rows}x{b.n_cols} hardware-tile addresses, and only an expert_addr generator "
            f"can be rewritten to make them (no hardware Map does address arithmetic and "
            f"cache_read_addr's run length is data-dependent)",
        )
    params = dict(fn.params)
    tiles, base = params["tiles"], params["base"]
    sel = gen.inputs[0]
    d0 = sel.shape[-1]
    if not isinstance(tiles, int) or not is_static(d0):
        raise rw.refuse(node, f"its expert_addr runs ({tiles} tiles per {d0}) are not static")
    nr, nc = b.n_rows, b.n_cols
    nb, tc = nr * nc, node.tiled[-1]
    # (extent, stride) of the big-tile dims of one run's read, then the stride of i.
    if nr == 1 or tc == 1:  # a big tile's hardware tiles are consecutive
        big, i_stride = [(tiles, nb)], nc
    elif base % tc == 0 and tiles % tc == 0:  # runs of whole rows of big tiles
        big, i_stride = [(tiles // tc, tc * nb), (tc, nc)], tc * nc
        big = [d for d in big if d[0] > 1] or big[-1:]
    else:
        raise rw.refuse(
            node,
            f"its expert_addr runs of {tiles} big tiles from {base} are not whole rows of the "
            f"{node.tiled[-2]}x{tc} tiles of tensor '{node.tensor.name}', so their "
            f"{b.rows}x{b.cols} hardware tiles are not one run of addresses",
        )
    hw_fn = F.expert_addr(tiles * nb, base * nb, out_dtype=gen.out_types[0].elem.dtype)
    run = FlatMap(rw.src(sel), fn=hw_fn, name=f"{node.name}_addr").out  # [.., d0 * tiles * nb]
    merged = len(big)
    if d0 > 1 or run.rank == 0:  # one run per buffer: [.., d0, tiles * nb]
        run = Reshape(run, tiles * nb, 0, name=f"{node.name}_addr_runs").out
        merged += 1
    buf = Bufferize(run, 1, name=f"{node.name}_addr_buf").out
    rd = Streamify(
        buf,
        out_shape=(*[n for n, _ in big], nr, nc),
        stride=(*[s for _, s in big], i_stride, 1),
        name=f"{node.name}_addr_read",
    ).out
    addr = rd  # [.., (d0), *big, nr, nc] -> [.., d0 * tiles, nr, nc]
    if merged > 1:
        addr = Flatten(rd, 2, 1 + merged, name=f"{node.name}_addr_flat").out
    new = RandomOffChipLoad(
        addr,
        rw.tensor(node.tensor),
        tile=(b.rows, b.cols),
        elem_bytes=node.elem_bytes,
        on_demand=node.on_demand,
        name=node.name,
    )
    rw.bind(node, new, b)


def blocked_ref(rw: _Rewrite, node: Node, ref: Stream) -> Stream:
    """A blocked ``ref`` as one ``[1,1]`` token per big tile (a reference's values are ignored:
    only its shape and stops count), so the load reads once per big tile as before."""
    from .numerics import accum_count

    return Accum(rw.src(ref), fn=accum_count("int32"), rank=2, name=f"{node.name}_ref").out


# -- grouping rows into tiles ------------------------------------------------------------------


def split_reshape(rw: _Rewrite, node: Reshape) -> None:
    """Chunks of ``chunk`` big tiles as chunks of ``chunk * nr * nc`` hardware tiles.

    Rank 0: the blocks are flattened into the chunked dim (a big tile's hardware tiles are
    consecutive in it), chunked with the pad tile split into hardware tiles (all of them must be
    equal: one pad element for every padded hardware tile), and the block dims split off again.
    Padding flags mark hardware tiles; the flag of a big tile is its first hardware tile's.
    Rank ``b > 0``: the same Reshape at rank ``b + 2`` (no padding there)."""
    x = node.inputs[0]
    b = _blocked(rw, node, [x])
    nr, nc = b.n_rows, b.n_cols
    flags = len(node.out_types) == 2
    if node.rank > 0:
        if flags:
            raise rw.refuse(
                node, "padding flags of a Reshape above rank 0 would mark hardware tiles"
            )
        rw.bind(node, Reshape(rw.src(x), node.chunk, node.rank + 2, name=node.name), b)
        return
    pad = None
    if node.pad is not None:
        arr = np.asarray(node.pad)
        pieces = [
            arr[i * b.rows : (i + 1) * b.rows, j * b.cols : (j + 1) * b.cols]
            for i in range(nr)
            for j in range(nc)
        ]
        if any(not np.array_equal(p, pieces[0], equal_nan=True) for p in pieces[1:]):
            raise rw.refuse(
                node,
                f"its pad tile {x.elem} differs between its {b.rows}x{b.cols} hardware tiles; a "
                f"Reshape pads with one element",
            )
        pad = pieces[0].copy()
    flat = Flatten(rw.src(x), 0, 2, name=f"{node.name}_flat").out
    new = Reshape(flat, node.chunk * nr * nc, 0, pad=pad, pad_flags=flags, name=node.name)
    data = Reshape(new.outputs[0], nr * nc, 0, name=f"{node.name}_blocks").out
    data = Reshape(data, nc, 0, name=f"{node.name}_cols").out
    rw.bind_port(node, 0, data, b)
    if flags:
        fbuf = Bufferize(new.outputs[1], 1, name=f"{node.name}_flags_buf").out
        first = Streamify(
            fbuf, out_shape=(node.chunk,), stride=(nr * nc,), name=f"{node.name}_flags"
        ).out
        rw.bind_port(node, 1, first, None)


def split_concat_rows(rw: _Rewrite, node: Accum) -> None:
    """``Accum(retile_row)`` over ``t`` tiles of ``[a, C]``: the ``[t * a, C]`` result in
    hardware tiles of ``r`` rows. Each group is buffered; a result tile ``(m, c)`` concatenates
    the ``r / ra`` row pieces (hardware tiles of ``ra`` rows) it covers, read in the order
    ``(m, c, piece)``, so the rows stack in the original order."""
    from .hier_tiling import Blocked, hw_split

    x = node.inputs[0]
    t_in, out = x.elem, node.out_types[0].elem
    if node.rank != 1 or not isinstance(out.rows, int) or not isinstance(t_in.rows, int):
        raise rw.refuse(
            node, f"an Accum of retile_row into {out} over rank {node.rank} has no static rows"
        )
    src, bin_ = rw.as_blocked(node, x, "in")
    r, c = hw_split(out.rows, rw.rows), bin_.cols
    if r % bin_.rows:
        raise rw.refuse(
            node,
            f"its {bin_.rows}-row pieces of {t_in} do not stack into {r}-row hardware tiles of "
            f"{out}",
        )
    q, nr, nc = r // bin_.rows, out.rows // r, bin_.n_cols
    buf = Bufferize(src, 3, name=f"{node.name}_buf").out  # [t, na, nc] pieces, row-major
    rd = Streamify(buf, out_shape=(nr, nc, q), stride=(q * nc, 1, nc), name=f"{node.name}_read").out
    # t * na pieces = nr * q: each read once. (A result that fits leaves the node untouched.)
    rw.bind(node, Accum(rd, fn=node.fn, rank=1, name=node.name), Blocked(r, c, nr, nc))


def split_pack_dynamic(rw: _Rewrite, node: Accum) -> None:
    """``Accum(retile_row)`` over a dynamic dim ``n`` of row tiles ``[a, C]`` (dynamic tiling's
    packing of an expert's tokens into one ``[n * a, C]`` tile): the ``[n * a, c]`` tile of
    every column block, each built from its column's pieces. The group's pieces ``[n, 1, nc]``
    are buffered and read column block first (``Streamify(order=(1, 2, 0))``: ``[1, nc, n]``),
    and an ``Accum(retile_row)`` stacks each column's ``n`` pieces in the original row order."""
    from .hier_tiling import Blocked

    x = node.inputs[0]
    out = node.out_types[0].elem
    src, bin_ = rw.as_blocked(node, x, "in")
    if node.rank != 1 or bin_.n_rows != 1 or isinstance(out.rows, int):
        raise rw.refuse(
            node,
            f"packing {x.elem} into {out} over rank {node.rank}: only rows one hardware tile "
            f"high packed over one dynamic dim split",
        )
    buf = Bufferize(src, 3, name=f"{node.name}_buf").out  # [n, 1, nc] pieces
    rd = Streamify(buf, order=(1, 2, 0), name=f"{node.name}_read").out  # [1, nc, n]
    new = Accum(rd, fn=node.fn, rank=1, name=node.name)
    if new.out_types[0].elem.rows != out.rows:  # the same symbol: downstream types line up
        raise rw.refuse(node, f"its packed tile {new.out_types[0].elem} is not {out}")
    rw.bind(node, new, Blocked(out.rows, bin_.cols, 1, bin_.n_cols))


def split_retile_streamify(rw: _Rewrite, node: RetileStreamify) -> None:
    """Rows of blocked ``[R, C]`` tiles (optionally without the padded ones).

    Each hardware tile is split into its rows; a row block's pieces (``nc`` tiles of ``r`` rows)
    are buffered and read row by row, so row ``i``'s ``nc`` pieces follow each other. Padded
    rows are dropped piece by piece (each ``[1, c]`` piece with its row's flag, a masked split
    of a one-row tile, :func:`_row_flags`), and the pieces grouped by ``nc`` again:
    ``[n, 1, nc]``."""
    from .hier_tiling import Blocked

    x = node.inputs[0]
    if node.split != "rows":
        raise rw.refuse(
            node,
            f"port in0 reads big tiles {x.elem} and a RetileStreamify split into columns has "
            f"no hardware-tile form",
        )
    b = _blocked(rw, node, [x])
    nc, r = b.n_cols, b.rows
    if not isinstance(r, int):  # dynamic tiles [n, c]: one row block
        if len(node.inputs) == 2:
            raise rw.refuse(node, f"a padding mask of dynamic tiles {x.elem} does not split")
        unit = Promote(rw.src(x), 0, name=f"{node.name}_unit").out  # [.., 1, nc, 1]
        rows = RetileStreamify(unit, name=f"{node.name}_split").out  # [.., 1, nc, n]
        if nc > 1:  # each row's nc pieces in turn: [.., 1, n, nc]
            buf = Bufferize(rows, 2, name=f"{node.name}_buf").out
            rows = Streamify(buf, order=(1, 0), name=f"{node.name}_read").out
    else:
        rows = RetileStreamify(rw.src(x), name=f"{node.name}_split").out  # [.., nr, nc * r]
    if nc > 1 and isinstance(r, int):
        buf = Bufferize(rows, 1, name=f"{node.name}_buf").out
        rows = Streamify(
            buf, out_shape=(r, nc), stride=(1, r), name=f"{node.name}_read"
        ).out  # [.., nr, r, nc]
    deep = 3 if nc > 1 else 2  # the dims below the big tile's
    if len(node.inputs) == 2:
        flags = _row_flags(rw, node, node.inputs[1], b)
        rows = RetileStreamify(rows, is_pad=flags, name=f"{node.name}_keep").out
    if nc == 1:  # rows of [1, C] fit: a plain stream of rows
        rw.bind(node, Flatten(rows, 0, deep, name=node.name))
        return
    flat = Flatten(rows, 0, deep, name=f"{node.name}_flat").out
    # Pieces back into rows. Every kept row has nc pieces, so the pad is never used; the
    # hardware's Reshape needs one for a dynamic dim (it cannot report a short vector).
    pad = np.zeros((1, b.cols), x.elem.dtype.numpy)
    grouped = Reshape(flat, nc, 0, pad=pad, name=node.name).out
    rw.bind(node, Promote(grouped, 1, name=f"{node.name}_row"), Blocked(1, b.cols, 1, nc))


def _row_flags(rw: _Rewrite, node: Node, mask: Stream, b: Blocked) -> Stream:
    """The padding flag of every ``[1, c]`` piece, ``[.., nr, r, nc]`` (``[.., nr, r]`` when
    ``nc = 1``) of ``[1,1]`` bool.

    The hardware splits no bool tile (its RetileUnit takes 8- to 32-bit elements), so the flags
    are not taken from the packed ``[R, 1]`` mask but from the per-row flags it packs (an
    ``Accum(retile_row)`` of ``[1,1]`` flags, Reshape's ``pad_flags``): buffered per tile (one
    reference travels where the packed mask did) and read ``nc`` times per row."""
    pack = mask.node
    flags = pack.inputs[0] if isinstance(pack, Accum) and pack.fn is F.retile_row else None
    if (
        flags is None
        or pack.rank != 1
        or not isinstance(flags.elem, Tile)
        or (flags.elem.rows, flags.elem.cols) != (1, 1)
        or rw.info(flags) is not None
        or flags.shape[-1] != b.rows * b.n_rows
    ):
        raise rw.refuse(
            node,
            f"its padding mask {mask.elem} must be an Accum(retile_row) of one [1,1] flag per row "
            f"(the hardware splits no bool tile)",
        )
    buf = Bufferize(rw.src(flags), 1, name=f"{node.name}_flags_buf").out
    shape, stride = (b.n_rows, b.rows, b.n_cols), (b.rows, 1, 0)
    if b.n_cols == 1:  # the pieces are the rows: [.., nr, r]
        shape, stride = shape[:2], stride[:2]
    return Streamify(buf, out_shape=shape, stride=stride, name=f"{node.name}_flags").out


# -- broadcasting ----------------------------------------------------------------------------


def split_broadcast_map(rw: _Rewrite, node: Map) -> bool:
    """An element-wise Map whose operands broadcast (``[R, C]`` against ``[1, 1]``, ``[R, 1]``
    or ``[1, C]``): each small operand is repeated once per hardware tile of the result it meets,
    as the tile it meets there (``[1, 1]``, ``[r, 1]``, ``[1, c]``). Returns False when the
    operands are not of that form (the caller refuses)."""
    from .hier_tiling import Blocked, hw_split

    out = node.out_types[0].elem
    if not isinstance(out, Tile) or not all(isinstance(t, Tile) for t in node.arg_types):
        return False
    if len(node.inputs) != len(node.arg_types) or not (
        isinstance(out.rows, int) and isinstance(out.cols, int)
    ):
        return False
    full = [
        s
        for s, t in zip(node.inputs, node.arg_types, strict=True)
        if (t.rows, t.cols) == (out.rows, out.cols)
    ]
    if not full:
        return False
    b = _blocked(rw, node, full)
    if (b.rows, b.cols) != (hw_split(out.rows, rw.rows), hw_split(out.cols, rw.cols)):
        return False
    nr, nc = b.n_rows, b.n_cols
    args = []
    for k, (s, t) in enumerate(zip(node.inputs, node.arg_types, strict=True)):
        tag = f"{node.name}_in{k}"
        if (t.rows, t.cols) == (out.rows, out.cols):
            args.append(rw.src(s))
        elif (t.rows, t.cols) == (1, 1) or (t.rows == out.rows and t.cols == 1 and nr == 1):
            x = _spread(rw.src(s), nr, f"{tag}_rows")
            args.append(_spread(x, nc, f"{tag}_cols"))
        elif t.rows == out.rows and t.cols == 1:  # [R, 1], blocked [nr, 1] of [r, 1]
            if rw.info(s) != Blocked(b.rows, 1, nr, 1):
                return False
            x = Flatten(rw.src(s), 0, 1, name=f"{tag}_blk").out
            args.append(_spread(x, nc, f"{tag}_cols"))
        elif t.rows == 1 and t.cols == out.cols:  # [1, C]
            sb = rw.info(s)
            if sb is None:  # fits: nc == 1
                x = _spread(rw.src(s), nr, f"{tag}_rows")
                args.append(Promote(x, 0, name=f"{tag}_cols").out)
            elif sb != Blocked(1, b.cols, 1, nc):
                return False
            elif nr == 1:
                args.append(rw.src(s))
            else:  # its block of nc tiles once per row block
                buf = Bufferize(rw.src(s), 2, name=f"{tag}_buf").out
                x = Streamify(buf, repeat=(nr,), name=f"{tag}_rows").out  # [.., nr, 1, nc]
                args.append(Flatten(x, 1, 2, name=f"{tag}_blk").out)
        else:
            return False
    rw.bind(node, Map(*args, fn=node.fn, name=node.name), b)
    return True


def register(splits: Any) -> None:
    """Add this module's handlers to :data:`step_lang.hier_tiling.SPLITS`."""
    splits.add(split_partition, Partition)
    splits.add(split_reassemble, Reassemble)
    splits.add(split_merge, EagerMerge)
    splits.add(split_parallelize, Parallelize)
    splits.add(split_broadcast, Broadcast)
    splits.add(split_sink, Sink)
    splits.add(split_reshape, Reshape)
    splits.add(split_retile_streamify, RetileStreamify)
