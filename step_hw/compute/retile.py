"""The RetileStreamify unit: split each tile into a stream of its rows (or columns)."""

from __future__ import annotations

from typing import Any

from amaranth.hdl import Module, Signal

from step_lang import ops

from ..block_rules import RETILE_FUNCTIONS, unit_tiles_rule
from ..checks import check_bool, check_choice, check_int, check_node, node_formats
from ..config import HwConfig
from ..payload import Kind, TokenFormat
from ._unit import StreamUnit, elems

__all__ = ["RetileUnit"]


class RetileUnit(StreamUnit):
    """RetileStreamify: every ``[R, C]`` tile becomes ``R`` row tiles ``[1, C]`` (``split="rows"``)
    or ``C`` column tiles ``[R, 1]`` (``split="cols"``), in order.

    With ``masked`` (rows only) a second, zipped input carries ``[R, 1]`` bool tiles; rows whose
    flag is set (padding) are dropped.

    Parameters
    ----------
    rows, cols : int
        The input tile's shape. ``rows=None``: a dynamic tile of up to ``max_rows`` rows
        (``step_hw.payload``; ``split="rows"``, unmasked), split into as many row tiles as its
        ``rows`` field says (none for a 0-row tile).
    max_rows : int
        The bound of a dynamic input (``HwConfig.dyn_tile_rows``); only with ``rows=None``.
    elem_bits : int
        Element width (8, 16 or 32).
    split : str
        ``"rows"`` or ``"cols"``.
    masked : bool
        Take a padding mask on ``in1`` (``split="rows"`` only).
    level_bits : int
        Width of the stop-level field.

    Ports
    -----
    in0 : In(TokenFormat.signature())
        Tiles.
    in1 : In(TokenFormat.signature())
        (``masked``.) ``[R, 1]`` one-bit padding flags, zipped with ``in0``.
    out : Out(TokenFormat.signature())
        Row (column) tiles.
    misaligned : Out(1)
        (``masked``.) Sticky: set when the inputs' tokens did not line up.

    Protocol
        :mod:`amaranth.lib.stream`. A tile is read in place while its pieces are written and
        taken with the last one; ``out.valid`` is a register.
    Latency
        1 cycle from a tile being valid to its first piece being offered.
    Throughput
        One piece per cycle: ``R`` (``C``) cycles per tile, masked rows included (they take a
        cycle without an output beat); a dynamic tile of ``n`` rows takes ``n`` cycles, a 0-row
        tile one cycle without an output beat; one cycle per stop or done token.
    Stop tokens
        The FlatMap block rule with a rank-0 sub-stream (``BlockWriter`` with ``inner = 0``):
        stops and the done token pass through unchanged; the pieces of a tile extend the
        innermost dimension.
    """

    def __init__(
        self,
        *,
        rows: int | None,
        cols: int,
        elem_bits: int,
        split: str = "rows",
        masked: bool = False,
        level_bits: int = 3,
        max_rows: int | None = None,
    ):
        owner = "RetileUnit"
        dynamic = rows is None
        if dynamic:
            if max_rows is None:
                raise ValueError(f"{owner} max_rows is required for a dynamic tile (rows=None)")
            check_int(owner, "max_rows", max_rows)
            if split != "rows" or masked:
                raise ValueError(
                    f"{owner} splits a dynamic tile into rows only, unmasked "
                    f"(split={split!r}, masked={masked!r})"
                )
            rows = max_rows
        elif max_rows is not None:
            raise ValueError(f"{owner} max_rows applies to a dynamic tile (rows=None) only")
        check_int(owner, "rows", rows)
        check_int(owner, "cols", cols)
        check_choice(owner, "elem_bits", elem_bits, (8, 16, 32))
        check_choice(owner, "split", split, ("rows", "cols"))
        check_bool(owner, "masked", masked)
        check_int(owner, "level_bits", level_bits)
        if masked and split != "rows":
            raise ValueError("RetileUnit masked applies to split='rows' only")
        self._split, self._masked = split, masked
        tile = TokenFormat("tile", rows, cols, elem_bits, level_bits=level_bits, dynamic=dynamic)
        ins = [tile]
        if masked:
            ins.append(TokenFormat("tile", rows, 1, 1, level_bits=level_bits))
        piece = (1, cols) if split == "rows" else (rows, 1)
        super().__init__(ins, TokenFormat("tile", *piece, elem_bits, level_bits=level_bits))

    @property
    def split(self) -> str:
        return self._split

    @property
    def masked(self) -> bool:
        return self._masked

    @classmethod
    def from_node(cls, node: Any, config: HwConfig) -> RetileUnit:
        """The unit of a step_lang ``RetileStreamify`` node (or a FlatMap of ``retile_rows``,
        ``retile_cols``, ``retile_rows_masked``); raises :class:`StepTypeError` otherwise."""
        check_node(node, (ops.RetileStreamify, ops.FlatMap), cls.__name__)
        ins, _ = node_formats(node, config)
        unit_tiles_rule(node, config, "RetileUnit")
        split, masked = RETILE_FUNCTIONS[node.fn]
        return cls(
            rows=None if ins[0].dynamic else ins[0].rows,
            max_rows=ins[0].rows if ins[0].dynamic else None,
            cols=ins[0].cols,
            elem_bits=ins[0].elem_bits,
            split=split,
            masked=masked,
            level_bits=config.level_bits,
        )

    def elaborate(self, platform) -> Module:
        m = Module()
        out = self.out
        valid, take, kind, level = self._join(m)
        free = ~out.valid | out.ready
        with m.If(out.ready):
            m.d.sync += out.valid.eq(0)
        tile = self.in_formats[0]
        pieces = tile.rows if self._split == "rows" else tile.cols
        index = Signal(range(pieces), name="index")
        x = elems(self.in0.payload.data, tile)
        # The last piece: a static count, or a dynamic tile's row count (0 rows: no piece).
        count = self.in0.payload.data.rows if tile.dynamic else pieces
        last = Signal(name="last_piece")
        m.d.comb += last.eq((index == count - 1) | (count == 0))
        piece = Signal(self.out_format.data_shape, name="piece")
        keep = Signal(init=1, name="keep")
        with m.Switch(index):
            for i in range(pieces):
                with m.Case(i):
                    if self._split == "rows":
                        m.d.comb += piece[0].eq(x[i])
                    else:
                        m.d.comb += [piece[r][0].eq(x[r][i]) for r in range(tile.rows)]
                    if self._masked:
                        m.d.comb += keep.eq(~self.in1.payload.data[i][0])
        if tile.dynamic:
            with m.If(count == 0):
                m.d.comb += keep.eq(0)
        with m.If(valid):
            with m.If(kind == Kind.DATA), m.If(~keep | free):
                with m.If(keep):
                    self._emit(m, Kind.DATA, 0, piece)
                with m.If(last):
                    m.d.comb += take.eq(1)
                    m.d.sync += index.eq(0)
                with m.Else():
                    m.d.sync += index.eq(index + 1)
            with m.Elif(free):
                m.d.comb += take.eq(1)
                self._emit(m, kind, level)
        return m
