"""The FlatMap ``expert_addr`` block of configuration time-multiplexing (``examples.moe``).

Each one-hot selector ``e`` (the expert whose tile EagerMerge forwarded) becomes the tile
addresses of that expert's weights, ``base + e * tiles + j`` for ``j < tiles``, one per cycle; a
RandomOffChipLoad then reads them. Build graphs with ``step_lang.numerics.expert_addr`` (an
``int32`` result; ``step_lang.functions.expert_addr`` is ``int64``, which has no hardware
encoding). :func:`step_hw.addrgen.flatmap_unit` picks this block for a FlatMap of
``expert_addr``.
"""

from __future__ import annotations

from typing import Any

from amaranth.hdl import Module, Signal

from step_lang.graph import Node

from .compute._unit import StreamUnit
from .config import HwConfig
from .function_params import check_expert_addresses, expert_addr_params
from .payload import Kind, TokenFormat

__all__ = ["ExpertAddr"]


class ExpertAddr(StreamUnit):
    """FlatMap ``expert_addr``: a one-hot selector over ``n`` experts → ``tiles`` addresses
    ``base + e * tiles + j`` (``[1,1]`` integer tiles).

    Parameters
    ----------
    n : int
        Selector width (experts of the region).
    tiles : int
        Weight tiles per expert (the run of addresses per selector).
    base : int
        Address of expert 0's first tile (non-negative).
    elem_bits : int
        Width (8, 16 or 32) of the address elements; every address must fit.
    level_bits : int
        Width of the stop-level field.

    Ports
    -----
    in0 : In(``n``-bit selectors)
    out : Out(``[1,1]`` integer tiles)
    error : Out(1)
        Sticky: a selector with no bit or several bits set (the interpreter raises); the block
        writes no address for it.

    Protocol
        :mod:`amaranth.lib.stream` on every port. A selector is read in place while its
        addresses are written and taken with the last one (at once, without output, when it is
        not one-hot); ``out.valid`` comes from a register.
    Latency
        1 cycle from a selector being valid to its first address being offered.
    Throughput
        One address per cycle: ``tiles`` cycles per selector; one cycle per stop or done token.
    Stop tokens
        FlatMap with a rank-0 sub-stream (``stoprules.block_stop(level, 0) == level``): stops and
        the done token pass through unchanged, in order; the addresses of a selector extend the
        innermost dimension.
    """

    def __init__(self, *, n: int, tiles: int, base: int = 0, elem_bits: int, level_bits: int = 3):
        check_expert_addresses("ExpertAddr", n, tiles, base, elem_bits, level_bits)
        self._n, self._tiles, self._base = n, tiles, base
        sel = TokenFormat("selector", n=n, level_bits=level_bits)
        out = TokenFormat("tile", 1, 1, elem_bits, level_bits=level_bits)
        super().__init__([sel], out, error=True)

    @property
    def n(self) -> int:
        return self._n

    @property
    def tiles(self) -> int:
        return self._tiles

    @property
    def base(self) -> int:
        return self._base

    @property
    def initiation_interval(self) -> int:
        """Cycles per output address (and per selector without addresses) with a ready output."""
        return 1

    @classmethod
    def from_node(cls, node: Any, config: HwConfig) -> ExpertAddr:
        """The block of a FlatMap of ``expert_addr`` (``step_lang.numerics.expert_addr``);
        raises :class:`StepTypeError` naming the node otherwise (an int64 result included)."""
        if not isinstance(node, Node):
            raise TypeError(f"{cls.__name__}.from_node needs a step_lang node, not {node!r}")
        return cls(**expert_addr_params(node, config))

    def elaborate(self, platform) -> Module:
        m = Module()
        out = self.out
        valid, take, kind, level = self._join(m)
        free = ~out.valid | out.ready
        with m.If(out.ready):
            m.d.sync += out.valid.eq(0)  # a load below (later statement) wins
        sel = self.in0.payload.data
        n, tiles, bits = self._n, self._tiles, self.out_format.elem_bits
        # One-hot check and the first address of the selected expert, as constants per case.
        one_hot = Signal(name="one_hot")
        first = Signal(range(self._base + n * tiles), name="first")
        with m.Switch(sel):
            for e in range(n):
                with m.Case(1 << e):
                    m.d.comb += [one_hot.eq(1), first.eq(self._base + e * tiles)]
        j = Signal(range(tiles), name="j")
        addr = Signal(self.out_format.data_shape, name="addr")
        m.d.comb += addr[0][0].eq((first + j)[:bits].as_signed())
        with m.If(valid):
            with m.If(kind == Kind.DATA):
                with m.If(~one_hot):
                    m.d.comb += take.eq(1)  # no address; the interpreter raises here
                    m.d.sync += self.error.eq(1)
                with m.Elif(free):
                    self._emit(m, Kind.DATA, 0, addr)
                    with m.If(j == tiles - 1):
                        m.d.comb += take.eq(1)
                        m.d.sync += j.eq(0)
                    with m.Else():
                        m.d.sync += j.eq(j + 1)
            with m.Elif(free):
                m.d.comb += take.eq(1)
                self._emit(m, kind, level)
        return m
