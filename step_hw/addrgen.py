"""FlatMap address and control generators: ``cache_read_addr``, ``last_tile_flags``,
``block_row_offsets`` and the padding tiles of ``pad_bias`` / ``pad_mask``.

Each turns one element (a zipped tuple of ``[1,1]`` integer tiles) into a run of output elements
whose length the element's data decides, one per cycle. They are FlatMaps with a rank-0
sub-stream, so stop tokens pass through unchanged (``stoprules.block_stop(level, 0) == level``)
and the pieces of one element extend the innermost dimension.

The step_lang functions carry what the hardware needs as their name and ``params``:

* ``cache_read_addr`` (``row_offset``; ``step_lang.numerics.cache_read_addr`` for an int32
  result, ``step_lang.functions.cache_read_addr`` is int64 and has no hardware encoding):
  :class:`CacheReadAddr`;
* ``last_tile_flags`` (``step_lang.functions``): :class:`LastTileFlags`;
* ``block_row_offsets`` (``step_lang.functions``; ``rows``, ``n_rows``, ``n_cols``):
  :class:`BlockRowOffsets`;
* ``pad_bias`` / ``pad_mask`` (``examples.attention``; ``kv_tile``, ``valid``, ``pad``, and
  ``pieces`` when split by hierarchical tiling): :class:`PadTiles`.

:func:`flatmap_unit` picks the block of a FlatMap node (``retile_*`` functions go to
:class:`~step_hw.compute.RetileUnit`).
"""

from __future__ import annotations

from typing import Any

from amaranth.hdl import Const, Module, Mux, Signal, Value, unsigned

from step_lang import ops
from step_lang.errors import StepTypeError, op_message

from .checks import check_int, check_int_bits, node_call
from .compute._unit import StreamUnit, check_bits, scalar_format
from .config import HwConfig
from .function_params import (
    block_row_offsets_params,
    cache_read_addr_params,
    check_block_row_offsets,
    check_fill,
    check_pieces,
    check_row_offset,
    last_tile_flags_params,
    pad_tiles_params,
)
from .payload import Kind, TokenFormat
from .unit_functions import block_for

__all__ = [
    "BlockRowOffsets",
    "CacheReadAddr",
    "LastTileFlags",
    "PadTiles",
    "flatmap_unit",
]


class _Expander(StreamUnit):
    """Control shared by the generators: each data token becomes ``count`` pieces.

    Subclasses give :meth:`_plan` (the piece count of the current element, the sticky-error
    condition) and :meth:`_piece` (the ``j``-th piece). The element is read in place while its
    pieces are written and taken with the last one (or at once, without output, when the count is
    0 or negative). ``_piece`` may keep state of its own (e.g. a position within a tile), updated
    on ``step``: high in each cycle a piece is written.
    """

    def __init__(self, in_formats, out_format, counter_bits: int):
        super().__init__(in_formats, out_format, error=True)
        self._counter_bits = counter_bits

    @property
    def initiation_interval(self) -> int:
        """Cycles per output piece (and per input element without pieces) with a ready output."""
        return 1

    def _plan(self, m: Module) -> tuple[Value, Value]:
        raise NotImplementedError

    def _piece(self, m: Module, j: Value, last: Value, step: Value) -> Value:
        raise NotImplementedError

    def elaborate(self, platform) -> Module:
        m = Module()
        out = self.out
        valid, take, kind, level = self._join(m)
        free = ~out.valid | out.ready
        with m.If(out.ready):
            m.d.sync += out.valid.eq(0)  # a load below (later statement) wins
        count, bad = self._plan(m)
        j = Signal(unsigned(self._counter_bits), name="j")
        last = Signal(name="last")
        step = Signal(name="step")  # a piece is written this cycle
        m.d.comb += last.eq(j == count - 1)
        piece = self._piece(m, j, last, step)
        with m.If(valid):
            with m.If(kind == Kind.DATA):
                with m.If(count <= 0):
                    m.d.comb += take.eq(1)  # an empty sub-stream: nothing to write
                    with m.If(bad):
                        m.d.sync += self.error.eq(1)
                with m.Elif(free):
                    m.d.comb += step.eq(1)
                    self._emit(m, Kind.DATA, 0, piece)
                    with m.If(last):
                        m.d.comb += take.eq(1)
                        m.d.sync += j.eq(0)
                        with m.If(bad):
                            m.d.sync += self.error.eq(1)
                    with m.Else():
                        m.d.sync += j.eq(j + 1)
            with m.Elif(free):
                m.d.comb += take.eq(1)
                self._emit(m, kind, level)
        return m


_PROTOCOL = """
    Protocol
        :mod:`amaranth.lib.stream` on every port. Zipped inputs are taken together, with the
        last piece of their element (``ready`` depends on the inputs' ``valid`` and on
        ``out.ready``, never the reverse); ``out.valid`` comes from a register.
    Latency
        1 cycle from an element being valid to its first piece being offered.
    Throughput
        One piece per cycle: an element of ``n`` pieces takes ``n`` cycles, one of none takes 1
        cycle (without an output beat); one cycle per stop or done token (initiation interval 1
        per output token).
    Stop tokens
        FlatMap with a rank-0 sub-stream: stops and the done token pass through unchanged, in
        order; the pieces of an element extend the innermost dimension.
"""


class CacheReadAddr(_Expander):
    """FlatMap ``cache_read_addr``: ``(idx, tiles)`` → ``idx * row_offset + j`` for
    ``j < tiles``.

    Parameters
    ----------
    row_offset : int
        Tiles per cache row (the address stride between indices); at most ``2**16``.
    in_bits : tuple of two ints
        Widths (8, 16 or 32) of the ``idx`` and ``tiles`` elements.
    elem_bits : int
        Width (8, 16 or 32) of the address elements (they wrap to it; the interpreter raises).
    level_bits : int
        Width of the stop-level field.

    Ports
    -----
    in0, in1 : In(``[1,1]`` integer tiles)
        ``idx`` and ``tiles``, zipped.
    out : Out(``[1,1]`` integer tiles)
        The addresses.
    misaligned : Out(1)
        Sticky: the inputs' tokens did not line up.
    error : Out(1)
        Sticky: ``tiles > row_offset`` (the interpreter raises; the block writes ``row_offset``
        addresses) or ``tiles < 0`` (the interpreter raises; the block writes none).
        ``tiles == 0`` writes none, as the interpreter.
    """

    __doc__ += _PROTOCOL

    def __init__(
        self, *, row_offset: int, in_bits: tuple[int, int], elem_bits: int, level_bits: int = 3
    ):
        owner = "CacheReadAddr"
        check_row_offset(owner, row_offset)
        if not isinstance(in_bits, (tuple, list)) or len(in_bits) != 2:
            raise TypeError(f"{owner} in_bits must be a pair of widths, not {in_bits!r}")
        for i, b in enumerate(in_bits):
            check_int_bits(owner, f"in_bits[{i}]", b)
        check_int_bits(owner, "elem_bits", elem_bits)
        check_int(owner, "level_bits", level_bits)
        self._row_offset = row_offset
        ins = [scalar_format(b, level_bits) for b in in_bits]
        super().__init__(ins, scalar_format(elem_bits, level_bits), row_offset.bit_length())

    @property
    def row_offset(self) -> int:
        return self._row_offset

    @classmethod
    def from_node(cls, node: Any, config: HwConfig) -> CacheReadAddr:
        """The block of a FlatMap of ``cache_read_addr``; raises :class:`StepTypeError` naming
        the node otherwise (an int64 result included)."""
        return node_call(node, cls, **cache_read_addr_params(node, config))

    def _plan(self, m: Module) -> tuple[Value, Value]:
        tiles = self.in1.payload.data[0][0]
        over = tiles > self._row_offset
        count = Signal(range(-1, self._row_offset + 1), name="count")
        m.d.comb += count.eq(Mux(tiles <= 0, 0, Mux(over, self._row_offset, tiles)))
        return count, over | (tiles < 0)

    def _piece(self, m: Module, j: Value, last: Value, step: Value) -> Value:
        bits = self.out_format.elem_bits
        addr = Signal(self.out_format.data_shape, name="addr")
        idx = self.in0.payload.data[0][0]
        m.d.comb += addr[0][0].eq((idx * self._row_offset + j)[:bits].as_signed())
        return addr


class LastTileFlags(_Expander):
    """FlatMap ``last_tile_flags``: a tile count ``n`` → ``n`` two-way selectors, bit 1 on the
    last, bit 0 on the others.

    Parameters
    ----------
    in_bits : int
        Width (8, 16 or 32) of the count element.
    level_bits : int
        Width of the stop-level field.

    Ports
    -----
    in0 : In(``[1,1]`` integer tiles)
        Tile counts (``n == 0`` writes no selector, as the interpreter).
    out : Out(2-bit selectors)
    error : Out(1)
        Sticky: ``n < 0`` (the interpreter raises; the block writes no selector).
    """

    __doc__ += _PROTOCOL

    def __init__(self, *, in_bits: int, level_bits: int = 3):
        owner = "LastTileFlags"
        check_int_bits(owner, "in_bits", in_bits)
        check_int(owner, "level_bits", level_bits)
        sel = TokenFormat("selector", n=2, level_bits=level_bits)
        super().__init__([scalar_format(in_bits, level_bits)], sel, in_bits)

    @classmethod
    def from_node(cls, node: Any, config: HwConfig) -> LastTileFlags:
        """The block of a FlatMap of ``last_tile_flags``; raises :class:`StepTypeError` naming
        the node otherwise."""
        return node_call(node, cls, **last_tile_flags_params(node, config))

    def _plan(self, m: Module) -> tuple[Value, Value]:
        n = self.in0.payload.data[0][0]
        return Mux(n <= 0, 0, n), n < 0

    def _piece(self, m: Module, j: Value, last: Value, step: Value) -> Value:
        return Mux(last, 0b10, 0b01)


class BlockRowOffsets(_Expander):
    """FlatMap ``block_row_offsets``: a row offset ``k`` of a big tile of ``n_rows x n_cols``
    hardware tiles of ``rows`` rows → one offset per hardware tile, in row-major order:
    ``k - i * rows`` for the ``n_cols`` tiles of row block ``i``.

    Parameters
    ----------
    rows, n_rows, n_cols : int
        The function's parameters (positive integers).
    elem_bits : int
        Width (8, 16 or 32) of ``k`` and of the offsets (they wrap to it; the interpreter
        raises).
    level_bits : int
        Width of the stop-level field.

    Ports
    -----
    in0 : In(``[1,1]`` integer tiles)
        Row offsets ``k``.
    out : Out(``[1,1]`` integer tiles)
        ``n_rows * n_cols`` offsets per ``k``.
    error : Out(1)
        Sticky: ``k - (n_rows - 1) * rows`` is below the element range (the interpreter
        raises; the block writes the wrapped offsets).
    """

    __doc__ += _PROTOCOL

    def __init__(self, *, rows: int, n_rows: int, n_cols: int, elem_bits: int, level_bits: int = 3):
        owner = "BlockRowOffsets"
        check_block_row_offsets(owner, rows, n_rows, n_cols)
        check_int_bits(owner, "elem_bits", elem_bits)
        check_int(owner, "level_bits", level_bits)
        self._rows, self._n_rows, self._n_cols = rows, n_rows, n_cols
        fmt = scalar_format(elem_bits, level_bits)
        super().__init__([fmt], fmt, (n_rows * n_cols).bit_length())

    @property
    def rows(self) -> int:
        return self._rows

    @property
    def n_rows(self) -> int:
        return self._n_rows

    @property
    def n_cols(self) -> int:
        return self._n_cols

    @classmethod
    def from_node(cls, node: Any, config: HwConfig) -> BlockRowOffsets:
        """The block of a FlatMap of ``block_row_offsets``; raises :class:`StepTypeError`
        naming the node otherwise."""
        return node_call(node, cls, **block_row_offsets_params(node, config))

    def _plan(self, m: Module) -> tuple[Value, Value]:
        k = self.in0.payload.data[0][0]
        lo = -(2 ** (self.out_format.elem_bits - 1))
        count = self._n_rows * self._n_cols
        return Const(count, range(count + 1)), k - (self._n_rows - 1) * self._rows < lo

    def _piece(self, m: Module, j: Value, last: Value, step: Value) -> Value:
        rows, n_cols = self._rows, self._n_cols
        top = (self._n_rows - 1) * rows
        # The row block's offset i * rows and the tile within the block, advanced per piece;
        # both are back at 0 after the last piece (n_rows * n_cols of them).
        sub = Signal(range(top + 1), name="block_sub")
        col = Signal(range(n_cols), name="block_col")
        with m.If(step):
            with m.If(col == n_cols - 1):
                m.d.sync += [col.eq(0), sub.eq(Mux(sub == top, 0, sub + rows))]
            with m.Else():
                m.d.sync += col.eq(col + 1)
        bits = self.out_format.elem_bits
        off = Signal(self.out_format.data_shape, name="offset")
        k = self.in0.payload.data[0][0]
        m.d.comb += off[0][0].eq((k - sub)[:bits].as_signed())
        return off


class PadTiles(_Expander):
    """FlatMap ``pad_bias`` / ``pad_mask``: ``(n, offset)`` → ``n`` ``[1, kv_tile]`` tiles,
    ``valid`` everywhere except the columns past ``offset`` of the last tile, which hold ``pad``.
    With ``pieces = p`` (hierarchical tiling, ``FlatMapFn.pieces``) every tile is written as
    ``p`` tiles of ``[1, kv_tile / p]``, left to right: ``n * p`` tiles, element ``x`` of piece
    ``q`` being column ``q * kv_tile / p + x``.

    Parameters
    ----------
    kv_tile : int
        Columns of a (whole) tile.
    valid, pad : int
        The two element values (integers that fit ``elem_bits``).
    in_bits : tuple of two ints
        Widths (8, 16 or 32) of the ``n`` and ``offset`` elements.
    elem_bits : int
        Width (8, 16 or 32) of the output elements.
    level_bits : int
        Width of the stop-level field.
    pieces : int
        Pieces per tile, a divisor of ``kv_tile`` (default 1: whole tiles).

    Ports
    -----
    in0, in1 : In(``[1,1]`` integer tiles)
        ``n`` and ``offset``, zipped.
    out : Out(``[1, kv_tile / pieces]`` tiles)
    misaligned : Out(1)
        Sticky: the inputs' tokens did not line up.
    error : Out(1)
        Sticky: ``n < 1`` or ``offset`` outside ``[0, kv_tile)`` (the interpreter raises; the
        block writes no tile for ``n < 1``, and compares columns with ``offset`` as it is).
    """

    __doc__ += _PROTOCOL

    def __init__(
        self,
        *,
        kv_tile: int,
        valid: int,
        pad: int,
        in_bits: tuple[int, int],
        elem_bits: int,
        level_bits: int = 3,
        pieces: int = 1,
    ):
        owner = "PadTiles"
        check_int(owner, "kv_tile", kv_tile)
        check_pieces(owner, kv_tile, pieces)
        if not isinstance(in_bits, (tuple, list)) or len(in_bits) != 2:
            raise TypeError(f"{owner} in_bits must be a pair of widths, not {in_bits!r}")
        for i, b in enumerate(in_bits):
            check_int_bits(owner, f"in_bits[{i}]", b)
        check_bits(owner, elem_bits, 0)
        check_int(owner, "level_bits", level_bits)
        check_fill(owner, "valid", valid, elem_bits)
        check_fill(owner, "pad", pad, elem_bits)
        self._kv_tile, self._valid, self._pad = kv_tile, valid, pad
        self._pieces, self._width = pieces, kv_tile // pieces
        ins = [scalar_format(b, level_bits) for b in in_bits]
        out = TokenFormat("tile", 1, self._width, elem_bits, level_bits=level_bits)
        super().__init__(ins, out, in_bits[0] + (pieces - 1).bit_length())

    @property
    def pieces(self) -> int:
        return self._pieces

    @classmethod
    def from_node(cls, node: Any, config: HwConfig) -> PadTiles:
        """The block of a FlatMap of ``pad_bias`` or ``pad_mask`` (``examples.attention``) with
        integer ``valid`` and ``pad`` values; raises :class:`StepTypeError` naming the node
        otherwise (a float bias of ``-inf`` included)."""
        return node_call(node, cls, **pad_tiles_params(node, config))

    def _plan(self, m: Module) -> tuple[Value, Value]:
        n, k = self.in0.payload.data[0][0], self.in1.payload.data[0][0]
        bad = (n < 1) | (k < 0) | (k >= self._kv_tile)
        return Mux(n <= 0, 0, n * self._pieces), bad

    def _piece(self, m: Module, j: Value, last: Value, step: Value) -> Value:
        tile = Signal(self.out_format.data_shape, name="tile")
        k = self.in1.payload.data[0][0]
        p, w = self._pieces, self._width
        if p == 1:
            for c in range(w):
                m.d.comb += tile[0][c].eq(Mux(last & (k < c), self._pad, self._valid))
            return tile
        # The piece's first column within its tile, advanced per piece (back at 0 after each
        # tile), and whether the piece belongs to the last tile (j >= (n - 1) * p).
        base = Signal(range(self._kv_tile), name="column")
        with m.If(step):
            m.d.sync += base.eq(Mux(base == (p - 1) * w, 0, base + w))
        n = self.in0.payload.data[0][0]
        in_last = Signal(name="last_tile")
        m.d.comb += in_last.eq(j >= (n - 1) * p)
        for x in range(w):
            m.d.comb += tile[0][x].eq(Mux(in_last & (k < base + x), self._pad, self._valid))
        return tile


# -- from_node helpers ---------------------------------------------------------------------------


def flatmap_unit(node: Any, config: HwConfig) -> Any:
    """The block of a FlatMap node (:func:`step_hw.unit_functions.block_for`): a generator of
    this module, the :class:`~step_hw.compute.RetileUnit` of a ``retile_*`` function or the
    :class:`~step_hw.expert_addr.ExpertAddr`; raises :class:`StepTypeError` naming the node
    otherwise."""
    from .compute import RetileUnit
    from .expert_addr import ExpertAddr

    if not isinstance(node, ops.FlatMap):
        kind, name = getattr(node, "kind", type(node).__name__), getattr(node, "name", "?")
        raise StepTypeError(op_message(str(kind), name, None, "is not a FlatMap"))
    blocks = {
        "CacheReadAddr": CacheReadAddr,
        "LastTileFlags": LastTileFlags,
        "BlockRowOffsets": BlockRowOffsets,
        "PadTiles": PadTiles,
        "RetileUnit": RetileUnit,
        "ExpertAddr": ExpertAddr,
    }
    return blocks[block_for(node, config)].from_node(node, config)
