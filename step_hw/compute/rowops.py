"""Data-movement and control Map units (``row_append``, ``row_append_part``, ``region_id``,
``region_select``) and the ``count`` Accum unit.

These functions move or make data without arithmetic, so they are not in
:func:`step_lang.numerics.functions`; the units recognise them by name and ``params``:

* ``row_append`` (``step_lang.functions``): :class:`RowAppendUnit`;
* ``row_append_part`` (``step_lang.functions``; ``row_append`` on one hardware tile of a big
  tile, ``step_lang.hier_tiling``): :class:`RowAppendPartUnit`;
* ``region_id<r>`` (``examples.attention.region_id``, parameter ``region``): :class:`RegionIdUnit`;
* ``region_select`` (``examples.attention.region_select``, parameter ``n``):
  :class:`RegionSelectUnit`;
* ``count`` (``step_lang.numerics.accum_count``; ``functions.accum_count`` is int64 and has no
  hardware encoding): :class:`CountUnit`.

:func:`step_hw.unit_functions.block_for` picks the unit of a node.
"""

from __future__ import annotations

from typing import Any

from amaranth.hdl import Const, Module, Mux, Signal, Value

from step_lang import functions, ops
from step_lang.types import Selector

from ..checks import (
    INT_BITS,
    check_format,
    check_int,
    check_int_bits,
    check_node,
    check_shape,
    node_call,
    node_formats,
)
from ..config import HwConfig
from ..function_params import check_region, region_id_params
from ..payload import Kind, TokenFormat
from . import arith
from ._unit import Datapath, FoldUnit, StreamUnit, check_bits, scalar_format

__all__ = [
    "CountUnit",
    "RegionIdUnit",
    "RegionSelectUnit",
    "RowAppendPartUnit",
    "RowAppendUnit",
]


class _RowOp(StreamUnit):
    """A Map of one token per cycle: :meth:`_result` gives the output data and an error condition
    from the zipped inputs' data (the control of ``FoldUnit`` in ``"map"`` mode, plus the error
    flag)."""

    def __init__(self, in_formats, out_format):
        super().__init__(in_formats, out_format, error=True)

    @property
    def initiation_interval(self) -> int:
        """Cycles per input token with an always-ready output."""
        return 1

    def _result(self, m: Module) -> tuple[Value, Value]:
        raise NotImplementedError

    def elaborate(self, platform) -> Module:
        m = Module()
        out = self.out
        valid, take, kind, level = self._join(m)
        free = ~out.valid | out.ready
        with m.If(out.ready):
            m.d.sync += out.valid.eq(0)  # a load below (later statement) wins
        data, bad = self._result(m)
        with m.If(valid & free):
            m.d.comb += take.eq(1)
            with m.If(kind == Kind.DATA):
                self._emit(m, Kind.DATA, 0, data)
                with m.If(bad):
                    m.d.sync += self.error.eq(1)
            with m.Else():
                self._emit(m, kind, level)
        return m


_MAP_PROTOCOL = """
    Protocol
        :mod:`amaranth.lib.stream` on every port. Zipped inputs are taken together, in a cycle
        where all are valid and the output register is empty or being emptied (``ready`` depends
        on the inputs' ``valid`` and on ``out.ready``, never the reverse); ``out.valid`` comes
        from a register.
    Latency
        1 cycle (combinational datapath into the output register).
    Throughput
        Initiation interval 1: one token (element, stop or done) per cycle.
    Stop tokens
        Stops and the done token pass through unchanged, in order (Map).
"""


class RowAppendUnit(_RowOp):
    """Map ``row_append``: ``(tile, row, offset)`` → ``tile`` with row ``offset`` replaced by
    ``row``.

    Parameters
    ----------
    shape : (rows, cols)
        The tile's shape (the row is ``[1, cols]``).
    elem_bits : int
        Element width (8, 16 or 32) of tile and row.
    offset_bits : int
        Width (8, 16 or 32) of the ``[1,1]`` offset element.
    level_bits : int
        Width of the stop-level field.

    Ports
    -----
    in0, in1, in2 : In(TokenFormat.signature())
        Tiles, rows and offsets, zipped.
    out : Out(TokenFormat.signature())
        The tiles with the row written.
    misaligned : Out(1)
        Sticky: the inputs' tokens did not line up.
    error : Out(1)
        Sticky: an offset outside ``[0, rows)`` (the interpreter raises; the tile passes
        unchanged).
    """

    __doc__ += _MAP_PROTOCOL

    def __init__(
        self, *, shape: tuple[int, int], elem_bits: int, offset_bits: int, level_bits: int = 3
    ):
        owner = type(self).__name__
        rows, cols = check_shape(owner, "shape", shape)
        check_bits(owner, elem_bits, 0)
        check_int_bits(owner, "offset_bits", offset_bits)
        check_int(owner, "level_bits", level_bits)
        tile = TokenFormat("tile", rows, cols, elem_bits, level_bits=level_bits)
        row = TokenFormat("tile", 1, cols, elem_bits, level_bits=level_bits)
        super().__init__([tile, row, scalar_format(offset_bits, level_bits)], tile)

    #: The step_lang function this unit computes.
    _function = functions.row_append

    @classmethod
    def from_node(cls, node: Any, config: HwConfig) -> RowAppendUnit:
        """The unit of a Map of ``step_lang.functions.row_append`` (``row_append_part`` for
        :class:`RowAppendPartUnit`); raises :class:`StepTypeError` naming the node otherwise."""
        check_node(node, (ops.Map,), cls.__name__)
        want = cls._function
        if node.fn is not want:
            raise node.error(None, f"function '{node.fn.name}' is not {want.name}")
        ins, out = node_formats(node, config)
        return node_call(
            node,
            cls,
            shape=(out.rows, out.cols),
            elem_bits=out.elem_bits,
            offset_bits=ins[2].elem_bits,
            level_bits=config.level_bits,
        )

    def _result(self, m: Module) -> tuple[Value, Value]:
        fmt = self.out_format
        tile, row = self.in0.payload.data, self.in1.payload.data
        k = self.in2.payload.data[0][0]
        res = Signal(fmt.data_shape, name="result")
        for r in range(fmt.rows):
            m.d.comb += res[r].eq(Mux(k == r, row[0], tile[r]))
        return res, (k < 0) | (k >= fmt.rows)


class RowAppendPartUnit(RowAppendUnit):
    """Map ``row_append_part``: ``(tile, row, offset)`` → ``tile`` with row ``offset`` replaced
    by ``row`` when ``0 <= offset < rows``, else ``tile`` unchanged (the offset names a row of
    another hardware tile of the big tile, ``step_lang.hier_tiling``).

    Parameters and ports as :class:`RowAppendUnit`, except:

    error : Out(1)
        Never raised: every offset is valid (the function has no error case).
    """

    __doc__ += _MAP_PROTOCOL

    _function = functions.row_append_part

    def _result(self, m: Module) -> tuple[Value, Value]:
        # The same datapath: no row matches an offset outside [0, rows), so the tile passes.
        res, _ = super()._result(m)
        return res, Const(0)


class RegionIdUnit(_RowOp):
    """Map ``region_id<r>``: every element → the ``[1,1]`` constant ``region``.

    Parameters
    ----------
    in_format : TokenFormat
        The input stream's format (any element: tile or selector).
    region : int
        The id written (a non-negative integer that fits ``elem_bits``).
    elem_bits : int
        Width (8, 16 or 32) of the output element.

    Ports
    -----
    in0 : In(in_format.signature())
    out : Out(``[1,1]`` integer tiles)
    error : Out(1)
        Never raised (the function has no error case).
    """

    __doc__ += _MAP_PROTOCOL

    def __init__(self, *, in_format: TokenFormat, region: int, elem_bits: int):
        owner = "RegionIdUnit"
        check_format(owner, "in_format", in_format)
        check_int_bits(owner, "elem_bits", elem_bits)
        self._region = check_region(owner, region, elem_bits)
        super().__init__([in_format], scalar_format(elem_bits, in_format.level_bits))

    @property
    def region(self) -> int:
        return self._region

    @classmethod
    def from_node(cls, node: Any, config: HwConfig) -> RegionIdUnit:
        """The unit of a Map of ``region_id`` (``examples.attention``); raises
        :class:`StepTypeError` naming the node otherwise."""
        return cls(**region_id_params(node, config))

    def _result(self, m: Module) -> tuple[Value, Value]:
        res = Signal(self.out_format.data_shape, name="result")
        m.d.comb += res[0][0].eq(self._region)
        return res, Const(0)


class RegionSelectUnit(_RowOp):
    """Map ``region_select``: a ``[1,1]`` region id ``i`` → the one-hot ``n``-way selector of
    ``i``.

    Parameters
    ----------
    n : int
        Selector width.
    in_bits : int
        Width (8, 16 or 32) of the id element.
    level_bits : int
        Width of the stop-level field.

    Ports
    -----
    in0 : In(``[1,1]`` integer tiles)
    out : Out(``n``-bit selectors)
    error : Out(1)
        Sticky: an id outside ``[0, n)`` (the interpreter raises; the block writes an empty
        selector).
    """

    __doc__ += _MAP_PROTOCOL

    def __init__(self, *, n: int, in_bits: int, level_bits: int = 3):
        owner = "RegionSelectUnit"
        check_int(owner, "n", n)
        check_int_bits(owner, "in_bits", in_bits)
        check_int(owner, "level_bits", level_bits)
        self._n = n
        sel = TokenFormat("selector", n=n, level_bits=level_bits)
        super().__init__([scalar_format(in_bits, level_bits)], sel)

    @property
    def n(self) -> int:
        return self._n

    @classmethod
    def from_node(cls, node: Any, config: HwConfig) -> RegionSelectUnit:
        """The unit of a Map of ``region_select`` (``examples.attention``); raises
        :class:`StepTypeError` naming the node otherwise."""
        check_node(node, (ops.Map,), cls.__name__)
        out_elem = node.out_types[0].elem
        if node.fn.name != "region_select" or not isinstance(out_elem, Selector):
            raise node.error(None, f"function '{node.fn.name}' is not region_select")
        ins, _ = node_formats(node, config)
        if ins[0].kind != "tile" or (ins[0].rows, ins[0].cols) != (1, 1):
            raise node.error("in0", "RegionSelectUnit needs [1,1] integer tiles")
        return node_call(
            node, cls, n=out_elem.n, in_bits=ins[0].elem_bits, level_bits=config.level_bits
        )

    def _result(self, m: Module) -> tuple[Value, Value]:
        i = self.in0.payload.data[0][0]
        bad = (i < 0) | (i >= self._n)
        res = Signal(self._n, name="result")
        for j in range(self._n):
            m.d.comb += res[j].eq(i == j)
        return res, bad


class _CountDatapath(Datapath):
    """``acc + 1`` (wrapping), whatever the inputs hold."""

    may_overflow = True  # the interpreter's count raises where this wraps

    def __init__(self, bits: int):
        self.bits = bits

    def build(self, m: Module, *, xs, acc, step, advance, finish, clear) -> Any:
        res = Signal(TokenFormat("tile", 1, 1, self.bits).data_shape, name="result")
        m.d.comb += res[0][0].eq(arith.wrap(acc[0][0] + 1, self.bits))
        self.overflow_rows = [arith.overflows(acc[0][0] + 1, self.bits)]
        return res


class CountUnit(FoldUnit):
    """Accum ``count``: the number of elements of each rank-``rank`` group, as a ``[1,1]``
    integer tile.

    Parameters
    ----------
    in_format : TokenFormat
        The input stream's format (any element; only its token kinds matter).
    rank : int
        Dims folded into one count (Accum's ``rank``), ``1 <= rank <= in_format.max_level``.
    elem_bits : int
        Width (8, 16 or 32) of the count (it wraps; the interpreter raises).

    Ports
    -----
    in0 : In(in_format.signature())
    out : Out(``[1,1]`` integer tiles)

    Protocol
        As :class:`~step_hw.compute.AccumUnit` (the same control, ``FoldUnit``): ``out.valid``
        comes from a register; ``in0.ready`` depends on ``in0.valid`` and ``out.ready`` only.
    Latency
        1 cycle from the stop that closes a group to its count being offered.
    Throughput
        One data token per cycle; a stop of level ``>= rank`` takes one cycle to write the
        count, and a second one for the stop ``level - rank`` it becomes (when positive).
    Stop tokens
        Accum's rule (``stoprules.accum_stop``): stops below ``rank`` vanish, a stop ``s >=
        rank`` writes the count and then ``Stop(s - rank)`` if positive; done passes through.
    """

    def __init__(self, *, in_format: TokenFormat, rank: int, elem_bits: int):
        owner = "CountUnit"
        check_format(owner, "in_format", in_format)
        check_int_bits(owner, "elem_bits", elem_bits)
        top = in_format.max_level
        if isinstance(rank, bool) or not isinstance(rank, int):
            raise TypeError(f"{owner} rank must be an integer in [1, {top}], not {rank!r}")
        if not 1 <= rank <= top:
            raise ValueError(f"{owner} rank must be an integer in [1, {top}], not {rank}")
        out = scalar_format(elem_bits, in_format.level_bits)
        super().__init__([in_format], out, _CountDatapath(elem_bits), mode="accum", rank=rank)

    @classmethod
    def from_node(cls, node: Any, config: HwConfig) -> CountUnit:
        """The unit of an Accum of ``count`` with a hardware-width result
        (``step_lang.numerics.accum_count``); raises :class:`StepTypeError` naming the node
        otherwise."""
        check_node(node, (ops.Accum,), cls.__name__)
        if node.fn.name != "count":
            raise node.error(None, f"function '{node.fn.name}' is not count")
        ins, out = node_formats(node, config)
        if out.kind != "tile" or (out.rows, out.cols) != (1, 1) or out.elem_bits not in INT_BITS:
            raise node.error("out", "CountUnit writes [1,1] 8-, 16- or 32-bit integer tiles")
        return node_call(node, cls, in_format=ins[0], rank=node.rank, elem_bits=out.elem_bits)
