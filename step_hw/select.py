"""`ToSelector`: integer ``[1, n]`` tiles to ``n``-way multi-hot selectors (``functions.to_selector``)."""

from __future__ import annotations

from typing import Any

from amaranth.hdl import Module
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from step_lang import ops
from step_lang.errors import StepTypeError, op_message
from step_lang.types import Selector

from .config import HwConfig
from .payload import Kind, TokenFormat

__all__ = ["ToSelector"]


class ToSelector(wiring.Component):
    """Turn each ``[1, n]`` integer tile into a selector whose bit ``i`` is set when element ``i``
    is non-zero.

    Ports
    -----
    i : In(stream of ``[1, n]`` tiles)
    o : Out(stream of ``n``-bit selectors)

    Protocol: :mod:`amaranth.lib.stream`; ``o.valid`` and ``o.payload`` come from registers.
    Latency: 1 cycle. Throughput: one token per cycle (initiation interval 1).
    Stop tokens: stop and done tokens pass through unchanged, in order.
    """

    def __init__(self, *, tile_format: TokenFormat, n: int):
        if tile_format.kind != "tile" or tile_format.rows != 1 or tile_format.cols != n:
            raise ValueError(f"ToSelector needs [1, {n}] tiles, not {tile_format}")
        self.tile_format = tile_format
        self.sel_format = TokenFormat("selector", n=n, level_bits=tile_format.level_bits)
        super().__init__({"i": In(tile_format.signature()), "o": Out(self.sel_format.signature())})

    @classmethod
    def from_node(cls, node: Any, config: HwConfig) -> ToSelector:
        """The block of a ``Map`` node with ``functions.to_selector``."""
        fn = getattr(node, "fn", None)
        out = node.out_types[0].elem if node.out_types else None
        if (
            not isinstance(node, ops.Map)
            or getattr(fn, "name", None) != "to_selector"
            or not isinstance(out, Selector)
        ):
            raise StepTypeError(
                op_message(node.kind, node.name, None, "is not a Map with to_selector")
            )
        fmt = TokenFormat.for_elem(
            node.inputs[0].elem, config, where=op_message(node.kind, node.name, "in0", "input")
        )
        return cls(tile_format=fmt, n=out.n)

    @property
    def in_ports(self) -> list[stream.Interface]:
        return [self.i]

    @property
    def out_ports(self) -> list[stream.Interface]:
        return [self.o]

    def elaborate(self, platform) -> Module:
        m = Module()
        n = self.sel_format.n
        m.d.comb += self.i.ready.eq(~self.o.valid | self.o.ready)
        with m.If(self.o.valid & self.o.ready):
            m.d.sync += self.o.valid.eq(0)
        with m.If(self.i.valid & self.i.ready):
            m.d.sync += [
                self.o.valid.eq(1),
                self.o.payload.kind.eq(self.i.payload.kind),
                self.o.payload.level.eq(self.i.payload.level),
            ]
            with m.If(self.i.payload.kind == Kind.DATA):
                row = self.i.payload.data[0]
                m.d.sync += self.o.payload.data.eq(sum(((row[k] != 0) << k) for k in range(n)))
            with m.Else():
                m.d.sync += self.o.payload.data.eq(0)
        return m
