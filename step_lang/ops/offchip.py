"""Off-chip memory operators: linear and random loads and stores of tiles.

A tensor of shape ``[..., R, C]`` read in ``tr x tc`` tiles has the *tiled shape*
``[..., R/tr, C/tc]``; tiles are numbered row-major over it. Addresses, strides and bases are in
tiles. Reads past the last tile are rejected when the graph is built (static) or run (random).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import sympy as sp

from ..dims import Dim, product
from ..graph import Node, OffChipTensor, Stream
from ..stoprules import BlockWriter, grid_tokens
from ..tokens import DONE, Stop, is_data
from ..types import StreamType, Tile, bool_
from ._io import expand_each, recv_aligned

__all__ = [
    "LOADS",
    "STORES",
    "LinearOffChipLoad",
    "LinearOffChipStore",
    "RandomOffChipLoad",
    "RandomOffChipStore",
]


def _positive_pair(node: Node, value: Any, port: str) -> tuple[int, int]:
    if (
        not isinstance(value, (tuple, list))
        or len(value) != 2
        or not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in value)
    ):
        raise node.error(
            port, f"tile must be a pair of positive integers (rows, cols), not {value!r}"
        )
    return int(value[0]), int(value[1])


def _tensor(node: Node, tensor: Any, port: str) -> OffChipTensor:
    if not isinstance(tensor, OffChipTensor):
        raise node.error(
            port, f"expected an OffChipTensor (Graph.tensor), got {type(tensor).__name__}"
        )
    if tensor.graph is not node.graph:
        raise node.error(port, f"tensor '{tensor.name}' belongs to graph '{tensor.graph.name}'")
    if len(tensor.shape) < 2:
        raise node.error(
            port,
            f"tensor '{tensor.name}' of shape {list(tensor.shape)} has fewer than 2 dims to tile",
        )
    return tensor


def tiled_shape(
    node: Node, tensor: OffChipTensor, tile: tuple[int, int], port: str
) -> tuple[int, ...]:
    """The tensor's shape in tiles; the tile must divide its last two dims."""
    r, c = tensor.shape[-2:]
    if r % tile[0] or c % tile[1]:
        raise node.error(
            port,
            f"tile {tile[0]}x{tile[1]} does not divide the last two dims {r}x{c} of tensor '{tensor.name}'",
        )
    return (*tensor.shape[:-2], r // tile[0], c // tile[1])


def tile_index(shape: Sequence[int], tile: tuple[int, int], k: int) -> tuple:
    """The numpy index of tile number ``k`` (row-major over the tiled shape) of a tensor: its
    outer indices and the row and column slices (``ValueError`` past the last tile)."""
    *outer, r, c = shape
    tr, tc = tile
    tiled = (*outer, r // tr, c // tc)
    if not 0 <= k < math.prod(tiled):
        raise ValueError(f"tile {k} is past the {math.prod(tiled)} tiles of shape {list(tiled)}")
    idx = []
    for n in reversed(tiled):
        k, i = divmod(k, n)
        idx.append(i)
    *outer_idx, row, col = reversed(idx)
    return (*outer_idx, slice(row * tr, (row + 1) * tr), slice(col * tc, (col + 1) * tc))


class _TileAt:
    """A tile of a load's walk or block, read when it is sent: the hardware streams a walk and
    a fetch block (a tile leaves once its bursts arrived, before later tiles are read), so a
    store that writes a later tile after taking an earlier one races with the read
    (:mod:`step_lang.races`); reading the whole walk first would order every read before every
    send."""

    __slots__ = ("number",)

    def __init__(self, number: int):
        self.number = number


def _sending_tiles(node: Any, io: Any) -> Any:
    """``put`` for a load's :class:`~step_lang.stoprules.BlockWriter` or walk: reads each
    :class:`_TileAt` as it is sent."""

    def put(token: Any) -> Iterator[Any]:
        if isinstance(token, _TileAt):
            token = io.read_tile(node.tensor, node.tile, token.number)
        yield from io.send(0, token)

    return put


def _row_major_strides(shape: Sequence[int]) -> tuple[int, ...]:
    strides, acc = [], 1
    for n in reversed(shape):
        strides.append(acc)
        acc *= n
    return tuple(reversed(strides))


class _OffChip(Node):
    """Shared parts of the off-chip operators.

    Cost options (keyword arguments of every off-chip operator):

    * ``elem_bytes`` — bytes per element counted for traffic and staging, when the modelled
      memory holds a narrower type than the interpreter computes with (the artifact's
      ``mock_bf16``: fp32 data counted as 2-byte bf16). Default: the tensor's dtype size.
    * ``on_demand`` — staging memory is allocated only while the driving stream is non-empty
      (dynamic tiling allocates per active expert); counted as ``tile x min(1, ||stream||)``.
    * ``fetch=(nr, nc)`` (linear loads and stores) — the memory is read (written) in blocks of
      ``nr x nc`` tiles: the tiles of the stream's two innermost dims, which must be ``[nr, nc]``.
      A block is one transfer of ``nr*rows x nc*cols`` elements (its rows rounded up to whole
      requests once, not per tile) staged on chip: the big tile that hierarchical tiling
      (:mod:`step_lang.hier_tiling`) split into these tiles. The values are unchanged; only
      the timing profiles' memory requests and the staging bytes differ.
    """

    tensor: OffChipTensor
    tile: tuple[int, int]
    elem_bytes: int | None = None
    on_demand: bool = False
    fetch: tuple[int, int] | None = None

    def _fetch_option(self, fetch: Any, inner: tuple) -> None:
        """Check ``fetch`` against the stream's two innermost dims ``inner``."""
        if fetch is None:
            return
        pair = _positive_pair(self, fetch, "fetch")
        if len(inner) < 2 or tuple(inner[-2:]) != pair:
            raise self.error(
                "fetch",
                f"fetch {list(pair)} must equal the stream's two innermost dims, "
                f"not {list(inner[-2:])}",
            )
        self.fetch = pair

    @property
    def fetch_bytes(self) -> int:
        """Bytes of one memory transfer: a tile, or a ``fetch`` block of tiles."""
        nr, nc = self.fetch or (1, 1)
        return self.tile_bytes * nr * nc

    def _cost_options(self, elem_bytes: int | None, on_demand: bool) -> None:
        if elem_bytes is not None and (
            isinstance(elem_bytes, bool) or not isinstance(elem_bytes, int) or elem_bytes < 1
        ):
            raise self.error(None, f"elem_bytes must be a positive integer, not {elem_bytes!r}")
        if not isinstance(on_demand, bool):
            raise self.error(None, f"on_demand must be a bool, not {on_demand!r}")
        self.elem_bytes, self.on_demand = elem_bytes, on_demand

    @property
    def tile_type(self) -> Tile:
        return Tile(self.tensor.dtype, *self.tile)

    @property
    def tile_bytes(self) -> int:
        """Bytes of one tile as counted by the cost model."""
        per = self.elem_bytes if self.elem_bytes is not None else self.tensor.dtype.nbytes
        return self.tile[0] * self.tile[1] * per

    def onchip_bytes(self, convention: str) -> Dim:
        # Paper: double-buffered staging of one tile (fetch block); artifact figures: one.
        staging = self.fetch_bytes * (2 if convention == "paper" else 1)
        if self.on_demand and self.inputs:
            return staging * sp.Min(1, self.inputs[0].type.cardinality)
        return staging


class LinearOffChipLoad(_OffChip):
    """Read tiles of a tensor along an affine pattern, once or once per reference element.

    ``out_shape`` (in tiles) and ``stride`` define the read: the tile at multi-index ``m`` is tile
    number ``base + sum(m[d] * stride[d])`` of the tensor. Stride 0 re-reads. By default the whole
    tensor is read row-major. Without ``ref`` the output is ``[1, *out_shape]``; with ``ref`` the
    read repeats for every element of ``ref`` and the output is ``[*ref.shape, *out_shape]`` (the
    reference's contents are ignored; its stop tokens are raised by ``len(out_shape)``).
    """

    kind = "LinearOffChipLoad"
    zero_costs = frozenset({"flops"})
    tiles_in_memory = True  # its output tiles sit in a memory unit

    def __init__(
        self,
        tensor: OffChipTensor,
        *,
        tile: tuple[int, int],
        out_shape: Sequence[int] | None = None,
        stride: Sequence[int] | None = None,
        base: int = 0,
        ref: Stream | None = None,
        elem_bytes: int | None = None,
        on_demand: bool = False,
        fetch: tuple[int, int] | None = None,
        name: str | None = None,
    ):
        graph = tensor.graph if isinstance(tensor, OffChipTensor) else None
        super().__init__(graph, name)
        self._cost_options(elem_bytes, on_demand)
        self.tensor = _tensor(self, tensor, "tensor")
        self.tile = _positive_pair(self, tile, "tile")
        self.tiled = tiled_shape(self, self.tensor, self.tile, "tile")
        n_tiles = int(product(self.tiled))
        out_shape = self.tiled if out_shape is None else self._sequence(out_shape, "out_shape")
        if not all(isinstance(n, int) and not isinstance(n, bool) and n >= 1 for n in out_shape):
            raise self.error(
                "out_shape", f"out_shape must be positive integers (tiles), not {list(out_shape)}"
            )
        stride = (
            _row_major_strides(out_shape) if stride is None else self._sequence(stride, "stride")
        )
        if len(stride) != len(out_shape):
            raise self.error(
                "stride",
                f"stride {list(stride)} has {len(stride)} entries, out_shape {list(out_shape)} has {len(out_shape)}",
            )
        if not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in stride):
            raise self.error(
                "stride", f"strides must be non-negative integers (tiles), not {list(stride)}"
            )
        if isinstance(base, bool) or not isinstance(base, int) or base < 0:
            raise self.error("base", f"base must be a non-negative tile index, not {base!r}")
        last = base + sum((n - 1) * s for n, s in zip(out_shape, stride, strict=True))
        if last >= n_tiles:
            raise self.error(
                "stride",
                f"the read reaches tile #{last} but tensor '{self.tensor.name}' has {n_tiles} tiles "
                f"(tiled shape {list(self.tiled)})",
            )
        self.out_shape, self.stride, self.base = out_shape, stride, base
        self._fetch_option(fetch, out_shape)
        inputs = []
        if ref is not None:
            ref = self._stream(ref, "ref")
            inputs.append(("ref", ref))
            shape = (*ref.shape, *out_shape)
        else:
            shape = (1, *out_shape)
        self._finish(inputs, [("out", StreamType(self.tile_type, shape))])

    def params(self) -> dict[str, Any]:
        p = {
            "tensor": self.tensor.name,
            "tile": self.tile,
            "out_shape": list(self.out_shape),
            "stride": list(self.stride),
        }
        if self.fetch is not None:
            p["fetch"] = self.fetch
        return p

    def offchip_bytes(self, convention: str) -> Dim:
        return self.out_types[0].cardinality * self.tile_bytes

    def tile_number(self, m: tuple[int, ...]) -> int:
        """The tensor tile read for element ``m`` of ``out_shape``: ``base + m . stride``."""
        return self.base + sum(i * s for i, s in zip(m, self.stride, strict=True))

    def _walk(self) -> list:
        """The walk's tokens, its tiles as :class:`_TileAt` (read as they are sent)."""
        return grid_tokens(self.out_shape, lambda m: [_TileAt(self.tile_number(m))])

    def execute(self, io: Any) -> Iterator[Any]:
        put = _sending_tiles(self, io)
        if not self.inputs:
            for t in self._walk():
                yield from put(t)
            yield from io.send(0, DONE)
            return
        writer = BlockWriter(put, len(self.out_shape), input_rank=self.inputs[0].rank)
        # read again for every reference element: stores may have changed memory
        yield from expand_each(io, writer, lambda tok: writer.block(self._walk()))


class LinearOffChipStore(_OffChip):
    """Write a stream of tiles to a tensor, tile after tile in row-major tile order.

    The stream must hold exactly as many tiles as the tensor; its tile shape sets the tiling.
    """

    kind = "LinearOffChipStore"
    zero_costs = frozenset({"flops"})

    def __init__(
        self,
        x: Stream,
        tensor: OffChipTensor,
        *,
        elem_bytes: int | None = None,
        fetch: tuple[int, int] | None = None,
        name: str | None = None,
    ):
        graph = x.graph if isinstance(x, Stream) else None
        super().__init__(graph, name)
        self._cost_options(elem_bytes, False)
        x = self._stream(x, "in")
        self._fetch_option(fetch, x.shape)
        self.tensor = _tensor(self, tensor, "tensor")
        elem = x.elem
        if not isinstance(elem, Tile) or not elem.is_static:
            raise self.error("in", f"stores need statically shaped tiles, got {elem}")
        if elem.dtype != self.tensor.dtype:
            raise self.error(
                "in",
                f"tile dtype {elem.dtype} differs from tensor '{self.tensor.name}' dtype {self.tensor.dtype}",
            )
        self.tile = (elem.rows, elem.cols)
        self.tiled = tiled_shape(self, self.tensor, self.tile, "in")
        self.n_tiles = int(product(self.tiled))
        card = x.type.cardinality
        if isinstance(card, int) and card != self.n_tiles:
            raise self.error(
                "in",
                f"stream {x.type} holds {card} tiles but tensor '{self.tensor.name}' has {self.n_tiles}",
            )
        self._finish([("in", x)], [])

    def params(self) -> dict[str, Any]:
        p: dict[str, Any] = {"tensor": self.tensor.name}
        if self.fetch is not None:
            p["fetch"] = self.fetch
        return p

    def offchip_bytes(self, convention: str) -> Dim:
        return self.inputs[0].type.cardinality * self.tile_bytes

    def execute(self, io: Any) -> Iterator[Any]:
        k = 0
        while True:
            tok = yield from io.recv(0)
            if tok is DONE:
                break
            if not is_data(tok):
                continue
            if k >= self.n_tiles:
                raise io.fail(
                    "in", f"more than {self.n_tiles} tiles for tensor '{self.tensor.name}'"
                )
            io.write_tile(self.tensor, self.tile, k, io.check_tile(tok, self.tile, "in"))
            k += 1
        if k != self.n_tiles:
            raise io.fail(
                "in", f"{k} tiles arrived but tensor '{self.tensor.name}' has {self.n_tiles}"
            )


def block_tiles(
    tensor_shape: Sequence[int], tile: tuple[int, int], fetch: tuple[int, int], k: int
) -> list[int]:
    """The tile numbers (row-major over ``tensor_shape`` tiled by ``tile``) of block ``k`` of the
    tensor tiled by ``fetch`` blocks of ``tile``, in the block's row-major order."""
    *outer, r, c = tensor_shape
    nr, nc = fetch
    big = (*outer, r // (tile[0] * nr), c // (tile[1] * nc))
    *lead, bi, bj = np.unravel_index(k, big)
    small = (*outer, r // tile[0], c // tile[1])
    return [
        int(np.ravel_multi_index((*lead, bi * nr + i, bj * nc + j), small))
        for i in range(nr)
        for j in range(nc)
    ]


def _address(node: Node, s: Stream, port: str) -> Stream:
    e = s.elem
    if not isinstance(e, Tile) or e.rows != 1 or e.cols != 1 or not e.dtype.is_integer:
        raise node.error(port, f"addresses are [1,1] integer tiles, got {e}")
    return s


def _is_token(tok: Any, want: Any) -> bool:
    """``tok`` is the stop or done token ``want`` (data tokens are arrays: never)."""
    return (isinstance(tok, Stop) or tok is DONE) and tok == want


def _checked_address(io: Any, node: Any, tok: Any, port: str) -> int:
    k = int(np.asarray(tok).reshape(-1)[0])
    if not 0 <= k < node.n_addresses:
        what = "block" if node.fetch is not None else "tile"
        raise io.fail(
            port,
            f"{what} address {k} outside tensor '{node.tensor.name}' of {node.n_addresses} {what}s",
        )
    return k


class RandomOffChipLoad(_OffChip):
    """Read the tile whose index arrives on ``raddr``; the output has the shape of ``raddr``.

    With ``fetch=(nr, nc)`` an index names a block of ``nr x nc`` tiles (tile ``k`` of the
    tensor tiled by ``nr*rows x nc*cols``), read as one transfer; the output is
    ``[*raddr.shape, nr, nc]``, each block's tiles row-major (its stops: ``raddr``'s, two
    levels higher, and the block's own).
    """

    kind = "RandomOffChipLoad"
    zero_costs = frozenset({"flops"})
    tiles_in_memory = True  # its output tiles sit in a memory unit

    def __init__(
        self,
        raddr: Stream,
        tensor: OffChipTensor,
        *,
        tile: tuple[int, int],
        elem_bytes: int | None = None,
        on_demand: bool = False,
        fetch: tuple[int, int] | None = None,
        name: str | None = None,
    ):
        graph = raddr.graph if isinstance(raddr, Stream) else None
        super().__init__(graph, name)
        self._cost_options(elem_bytes, on_demand)
        raddr = _address(self, self._stream(raddr, "raddr"), "raddr")
        self.tensor = _tensor(self, tensor, "tensor")
        self.tile = _positive_pair(self, tile, "tile")
        self.tiled = tiled_shape(self, self.tensor, self.tile, "tile")
        shape = tuple(raddr.shape)
        if fetch is not None:
            self.fetch = _positive_pair(self, fetch, "fetch")
            block = (self.tile[0] * self.fetch[0], self.tile[1] * self.fetch[1])
            self.n_blocks = int(product(tiled_shape(self, self.tensor, block, "fetch")))
            shape = (*shape, *self.fetch)
        self.n_tiles = int(product(self.tiled))
        self._finish([("raddr", raddr)], [("out", StreamType(self.tile_type, shape))])

    def params(self) -> dict[str, Any]:
        p: dict[str, Any] = {"tensor": self.tensor.name, "tile": self.tile}
        if self.fetch is not None:
            p["fetch"] = self.fetch
        return p

    @property
    def n_addresses(self) -> int:
        """Valid indices: tiles, or blocks with ``fetch``."""
        return self.n_blocks if self.fetch is not None else self.n_tiles

    def offchip_bytes(self, convention: str) -> Dim:
        return self.out_types[0].cardinality * self.tile_bytes

    def execute(self, io: Any) -> Iterator[Any]:
        if self.fetch is not None:
            yield from self._execute_blocks(io)
            return
        while True:
            tok = yield from io.recv(0)
            if not is_data(tok):
                yield from io.send(0, tok)
                if tok is DONE:
                    return
                continue
            k = _checked_address(io, self, tok, "raddr")
            yield from io.send(0, io.read_tile(self.tensor, self.tile, k))

    def _execute_blocks(self, io: Any) -> Iterator[Any]:
        writer = BlockWriter(_sending_tiles(self, io), 2, input_rank=self.inputs[0].rank)

        def block(tok: Any) -> Iterator[Any]:
            k = _checked_address(io, self, tok, "raddr")
            tiles = block_tiles(self.tensor.shape, self.tile, self.fetch, k)
            yield from writer.block(
                grid_tokens(self.fetch, lambda m: [_TileAt(tiles[m[0] * self.fetch[1] + m[1]])])
            )

        yield from expand_each(io, writer, block)


class RandomOffChipStore(_OffChip):
    """Write each ``wdata`` tile at the tile index from ``waddr``; emit a Bool ack per write.

    ``waddr`` and ``wdata`` have the same shape; the ack stream (``[1,1]`` bool tiles) has it too.
    With ``fetch=(nr, nc)`` an index names a block of ``nr x nc`` tiles (as
    :class:`RandomOffChipLoad`): ``wdata`` is ``[*waddr.shape, nr, nc]``, the block's tiles
    row-major, written as one transfer and acknowledged once (the ack has ``waddr``'s shape).
    """

    kind = "RandomOffChipStore"
    zero_costs = frozenset({"flops"})

    def __init__(
        self,
        waddr: Stream,
        wdata: Stream,
        tensor: OffChipTensor,
        *,
        elem_bytes: int | None = None,
        fetch: tuple[int, int] | None = None,
        name: str | None = None,
    ):
        graph = waddr.graph if isinstance(waddr, Stream) else None
        super().__init__(graph, name)
        self._cost_options(elem_bytes, False)
        waddr = _address(self, self._stream(waddr, "waddr"), "waddr")
        wdata = self._stream(wdata, "wdata")
        if fetch is not None:
            self._fetch_option(fetch, wdata.shape)
        self.tensor = _tensor(self, tensor, "tensor")
        elem = wdata.elem
        if not isinstance(elem, Tile) or not elem.is_static:
            raise self.error("wdata", f"stores need statically shaped tiles, got {elem}")
        if elem.dtype != self.tensor.dtype:
            raise self.error(
                "wdata",
                f"tile dtype {elem.dtype} differs from tensor '{self.tensor.name}' dtype {self.tensor.dtype}",
            )
        data_shape = wdata.shape[:-2] if self.fetch is not None else wdata.shape
        if len(waddr.shape) != len(data_shape) or any(
            isinstance(a, int) and isinstance(b, int) and a != b
            for a, b in zip(waddr.shape, data_shape, strict=True)
        ):
            from ..dims import shape_str

            raise self.error(
                "wdata",
                f"shape {shape_str(wdata.shape)} differs from waddr shape {shape_str(waddr.shape)}"
                + (f" plus the fetch block {list(self.fetch)}" if self.fetch is not None else ""),
            )
        self.tile = (elem.rows, elem.cols)
        self.tiled = tiled_shape(self, self.tensor, self.tile, "wdata")
        self.n_tiles = int(product(self.tiled))
        if self.fetch is not None:
            block = (self.tile[0] * self.fetch[0], self.tile[1] * self.fetch[1])
            self.n_blocks = int(product(tiled_shape(self, self.tensor, block, "fetch")))
        self._finish(
            [("waddr", waddr), ("wdata", wdata)],
            [("ack", StreamType(Tile(bool_, 1, 1), waddr.shape))],
        )

    def params(self) -> dict[str, Any]:
        p: dict[str, Any] = {"tensor": self.tensor.name}
        if self.fetch is not None:
            p["fetch"] = self.fetch
        return p

    n_addresses = RandomOffChipLoad.n_addresses

    def offchip_bytes(self, convention: str) -> Dim:
        return self.inputs[1].type.cardinality * self.tile_bytes

    def execute(self, io: Any) -> Iterator[Any]:
        if self.fetch is not None:
            yield from self._execute_blocks(io)
            return
        while True:
            addr, data = yield from recv_aligned(io)
            if not is_data(addr):
                yield from io.send(0, addr)
                if addr is DONE:
                    return
                continue
            k = _checked_address(io, self, addr, "waddr")
            io.write_tile(self.tensor, self.tile, k, io.check_tile(data, self.tile, "wdata"))
            yield from io.send(0, np.ones((1, 1), dtype=bool))

    def _execute_blocks(self, io: Any) -> Iterator[Any]:
        """One address, then its block's tiles (row stops inside, one closing stop ``>= 2``
        after, which carries ``waddr``'s following stop two levels up)."""
        nr, nc = self.fetch
        inner = grid_tokens(self.fetch, lambda m: ["tile"])[:-1]  # the block without its close
        merged = None  # waddr's stop already seen on wdata (closing a block)
        while True:
            addr = yield from io.recv(0)
            if merged is not None:
                if not _is_token(addr, Stop(merged)):
                    raise io.fail(
                        "waddr", f"{addr!r} where wdata closed a block with S{merged + 2}"
                    )
                yield from io.send(0, addr)
                merged = None
                continue
            if addr is DONE or isinstance(addr, Stop):
                want = DONE if addr is DONE else Stop(addr.level + 2)
                got = yield from io.recv(1)
                if not _is_token(got, want):
                    raise io.fail("wdata", f"{got!r} where waddr's {addr!r} needs {want!r}")
                yield from io.send(0, addr)
                if addr is DONE:
                    return
                continue
            k = _checked_address(io, self, addr, "waddr")
            tiles = []
            for expect in inner:
                tok = yield from io.recv(1)
                if expect == "tile" and is_data(tok):
                    tiles.append(io.check_tile(tok, self.tile, "wdata"))
                elif expect == "tile" or not _is_token(tok, expect):
                    raise io.fail(
                        "wdata", f"{tok!r} inside a block of {nr}x{nc} tiles (expected {expect!r})"
                    )
            close = yield from io.recv(1)
            if not (isinstance(close, Stop) and close.level >= 2):
                raise io.fail("wdata", f"{close!r} after a block of {nr}x{nc} tiles (expected S2+)")
            for t, number in zip(
                tiles, block_tiles(self.tensor.shape, self.tile, self.fetch, k), strict=True
            ):
                io.write_tile(self.tensor, self.tile, number, t)
            yield from io.send(0, np.ones((1, 1), dtype=bool))
            if close.level > 2:
                merged = close.level - 2


#: The off-chip loads and stores (every reader that tells memory operators apart reads these).
LOADS = (LinearOffChipLoad, RandomOffChipLoad)
STORES = (LinearOffChipStore, RandomOffChipStore)
