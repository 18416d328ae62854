"""AXI4 store controllers: LinearStore (consecutive tiles) and RandomStore (indexed tiles, acks)."""

from __future__ import annotations

import enum
from collections.abc import Sequence
from typing import Any

from amaranth.hdl import Cat, Const, Module, Mux, Signal, Value, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from step_lang import ops
from step_lang.types import Tile, bool_

from .. import contract
from ..checks import (
    address_format,
    build_for_node,
    check_config,
    memory_tile,
    no_cost_width,
    outstanding,
    where,
)
from ..config import HwConfig
from ..payload import Kind, TokenFormat
from ..payload_fields import token_layout
from ..queue import Queue
from .axi import BURST_INCR, AXI4Signature, BurstGenerator, TileGeometry
from .load import order_output

__all__ = ["LinearStore", "RandomStore", "TileWriter"]


class Cmd(enum.IntEnum):
    """Commands of :class:`TileWriter`."""

    TILE = 0
    STOP = 1
    DONE = 2
    #: No write; answered with a false acknowledgement (an out-of-range index).
    NAK = 3


def ack_format(level_bits: int) -> TokenFormat:
    """The ack stream's format: ``[1,1]`` bool tiles (``Tile(bool, 1, 1)``)."""
    return TokenFormat.for_elem(Tile(bool_, 1, 1), HwConfig(level_bits=level_bits))


class TileWriter(wiring.Component):
    """Writes tiles over AXI4 in command order; acknowledges each write after its B response.

    The shared back end of :class:`LinearStore` and :class:`RandomStore`.

    Ports
    -----
    cmd : In(stream of {kind (:class:`Cmd`), level, index, data})
    o : Out(ack stream, ``[1,1]`` bool tiles)
        Per ``TILE`` a true tile once every burst of that tile has its B response; per ``NAK`` a
        false tile; ``STOP``/``DONE`` pass through in order.
    axi : Out(AXI4Signature(write only))
    error : Out(1)
        Sticky: a write returned ``SLVERR``/``DECERR``.

    Structure: commands enter an order queue; a ``TILE`` also enters an address queue (to the
    :class:`~step_hw.memory.axi.BurstGenerator` and AW) and a data queue (to W). An AW handshake
    records the burst's length and first lane for W and its tile-completion flag for B. At most
    ``max_outstanding`` bursts are between their AW handshake and their B response; W beats of a
    burst are sent only after its AW (so a subordinate never waits for an address).
    """

    def __init__(
        self,
        *,
        geometry: TileGeometry,
        tile_format: TokenFormat,
        config: HwConfig,
        max_outstanding: int,
    ):
        self._geo = geometry
        self._fmt = tile_format
        self._max_outstanding = max_outstanding
        self._ack = ack_format(tile_format.level_bits)
        self.cmd_layout = token_layout(
            tile_format.level_bits,
            index=unsigned(geometry.index_width),
            data=unsigned(tile_format.data_bits),
        )
        super().__init__(
            {
                "cmd": In(stream.Signature(self.cmd_layout)),
                "o": Out(self._ack.signature()),
                "axi": Out(AXI4Signature.for_config(config, read=False)),
                "error": Out(1),
            }
        )

    def elaborate(self, platform) -> Module:
        m = Module()
        geo, fmt = self._geo, self._fmt
        mo = self._max_outstanding
        axi = self.axi
        order_layout = token_layout(fmt.level_bits)
        order_depth = contract.order_queue_depth(mo)
        m.submodules.order = order = Queue(shape=order_layout, depth=order_depth)
        m.submodules.addrs = addrs = Queue(
            shape=unsigned(geo.index_width), depth=contract.ADDR_QUEUE_DEPTH
        )
        m.submodules.tiles = tiles = Queue(
            shape=unsigned(fmt.data_bits), depth=contract.TILE_QUEUE_DEPTH
        )
        m.submodules.bursts = gen = BurstGenerator(geo)
        lane_bits = (geo.lanes - 1).bit_length()
        winfo_layout = data.StructLayout({"len": unsigned(8), "lane": unsigned(max(1, lane_bits))})
        m.submodules.winfo = winfo = Queue(shape=winfo_layout, depth=max(3, mo + 1))
        m.submodules.binfo = binfo = Queue(shape=unsigned(1), depth=max(3, mo + 1))
        wiring.connect(m, addrs.o, gen.tiles)
        error = Signal()
        m.d.comb += self.error.eq(error)

        # -- commands -> order, address and data queues --------------------------------------
        cmd = self.cmd
        is_tile = cmd.payload.kind == Cmd.TILE
        m.d.comb += [
            order.i.payload.kind.eq(cmd.payload.kind),
            order.i.payload.level.eq(cmd.payload.level),
            order.i.valid.eq(cmd.valid & (~is_tile | (addrs.i.ready & tiles.i.ready))),
            addrs.i.payload.eq(cmd.payload.index),
            addrs.i.valid.eq(cmd.valid & is_tile & order.i.ready & tiles.i.ready),
            tiles.i.payload.eq(cmd.payload.data),
            tiles.i.valid.eq(cmd.valid & is_tile & order.i.ready & addrs.i.ready),
            cmd.ready.eq(order.i.ready & (~is_tile | (addrs.i.ready & tiles.i.ready))),
        ]

        # -- AW ---------------------------------------------------------------------------
        inflight = Signal(range(mo + 1))
        can_issue = (inflight < mo) & winfo.i.ready & binfo.i.ready
        burst = gen.bursts.payload
        m.d.comb += [
            axi.awid.eq(0),
            axi.awaddr.eq(burst.addr),
            axi.awlen.eq(burst.len),
            axi.awsize.eq(geo.size_code),
            axi.awburst.eq(BURST_INCR),
            axi.awvalid.eq(gen.bursts.valid & can_issue),
            gen.bursts.ready.eq(axi.awready & can_issue),
        ]
        aw_done = axi.awvalid & axi.awready
        m.d.comb += [
            winfo.i.payload.len.eq(burst.len),
            winfo.i.payload.lane.eq(burst.lane),
            winfo.i.valid.eq(aw_done),
            binfo.i.payload.eq(burst.last),
            binfo.i.valid.eq(aw_done),
        ]
        b_done = axi.bvalid & axi.bready
        with m.If(aw_done & ~b_done):
            m.d.sync += inflight.eq(inflight + 1)
        with m.Elif(~aw_done & b_done):
            m.d.sync += inflight.eq(inflight - 1)

        # -- W: tiles -> beats ----------------------------------------------------------------
        bpt, bits, lanes = geo.beats_per_tile, geo.beat_bits, geo.lanes
        beat_no = Signal(range(max(2, bpt)))
        in_burst = Signal(8)
        last_beat = beat_no == bpt - 1
        beat = tiles.o.payload if bpt == 1 else tiles.o.payload.word_select(beat_no, bits)
        w_done = axi.wvalid & axi.wready
        m.d.comb += [
            axi.wvalid.eq(tiles.o.valid & winfo.o.valid),
            axi.wdata.eq(Cat(*([beat] * lanes))),  # a narrow beat on every lane; wstrb picks
            axi.wlast.eq(in_burst == winfo.o.payload.len),
            tiles.o.ready.eq(w_done & last_beat),
            winfo.o.ready.eq(w_done & axi.wlast),
        ]
        if lanes > 1:
            first = Signal(init=1)
            lane = Signal(lane_bits)
            lane_now = Mux(first, winfo.o.payload.lane, lane)
            strobe = Const((1 << geo.transfer_bytes) - 1, geo.bus_bytes)
            m.d.comb += axi.wstrb.eq((strobe << (lane_now * geo.transfer_bytes))[: geo.bus_bytes])
            with m.If(w_done):
                m.d.sync += [first.eq(axi.wlast), lane.eq(lane_now + 1)]
        else:
            m.d.comb += axi.wstrb.eq((1 << geo.bus_bytes) - 1)
        with m.If(w_done):
            m.d.sync += [
                beat_no.eq(Mux(last_beat, 0, beat_no + 1)),
                in_burst.eq(Mux(axi.wlast, 0, in_burst + 1)),
            ]

        # -- B: responses -> acknowledgements ---------------------------------------------------
        acks = Signal(range(order_depth + 2))  # completed tiles not yet acknowledged on `o`
        ack_taken = Signal()
        m.d.comb += [axi.bready.eq(binfo.o.valid), binfo.o.ready.eq(b_done)]
        completed = b_done & binfo.o.payload
        with m.If(completed & ~ack_taken):
            m.d.sync += acks.eq(acks + 1)
        with m.Elif(~completed & ack_taken):
            m.d.sync += acks.eq(acks - 1)
        with m.If(b_done & axi.bresp[1]):
            m.d.sync += error.eq(1)

        order_output(m, order, self.o, Const(1, 1), acks != 0, ack_taken,
                     has_data=(Cmd.TILE,), zero=Cmd.NAK)  # fmt: skip
        return m


class LinearStore(wiring.Component):
    """LinearOffChipStore: writes a stream's tiles to consecutive tile slots of a tensor, over AXI4.

    Parameters (keyword-only): ``config``, ``tensor_shape``, ``tile_format`` (the input's tiles,
    which set the tiling), ``addr`` (the tensor's byte address) and ``max_outstanding``, as
    :class:`~step_hw.memory.load.LinearLoad`.

    Ports
    -----
    i : In(tile_format stream)
        Tiles; stop tokens are consumed and ignored (the tile count is what matters).
    axi : Out(AXI4Signature(write only))
    done : Out(1)
        Sticky: the done token was consumed and every write has its B response (the tensor
        holds the stream). One stream per reset.
    error : Out(1)
        Sticky: the stream did not hold exactly ``n_tiles`` tiles (extra tiles are dropped, the
        interpreter raises), or an AXI error response.

    Latency and throughput
        A tile is accepted per ``beats_per_tile`` cycles when the subordinate takes a beat per
        cycle (stop tokens one cycle each); ``done`` rises about 3 cycles after the last B
        response.

    Outstanding bursts
        At most ``max_outstanding`` bursts are between their AW handshake and their B response.
        A burst's first W beat leaves 2 cycles after its AW (the W-information queue), so with
        a memory that answers 4 cycles after the last W beat a slot is reused 7 cycles after its
        AW: measured 7, 3.4, 1.7, 1 cycles per one-beat burst for 1, 2, 4, 8 bursts in flight
        (tests/test_hw_memory.py).
    """

    def __init__(
        self,
        *,
        config: HwConfig,
        tensor_shape: Sequence[int],
        tile_format: TokenFormat,
        addr: int = 0,
        max_outstanding: int | None = None,
        src_loc_at: int = 0,
    ):
        who = "LinearStore"
        self._config = config = check_config(who, config)
        self._fmt = fmt = memory_tile(who, "tile_format", tile_format)
        self._geo = TileGeometry.for_format(who, config, tensor_shape, fmt, addr)
        self._max_outstanding = outstanding(who, max_outstanding, config)
        super().__init__(
            {
                "i": In(fmt.signature()),
                "axi": Out(AXI4Signature.for_config(config, read=False)),
                "done": Out(1),
                "error": Out(1),
            }
        )

    @classmethod
    def from_node(
        cls, node: Any, config: HwConfig, *, addr: int = 0, max_outstanding: int | None = None
    ) -> LinearStore:
        """The controller of a ``LinearOffChipStore`` node, its tensor at byte ``addr``. ``max_outstanding``
        defaults to ``config.max_outstanding``."""

        def build() -> LinearStore:
            no_cost_width(node)
            return cls(
                src_loc_at=3,
                config=config,
                tensor_shape=node.tensor.shape,
                tile_format=TokenFormat.for_elem(node.inputs[0].elem, config, where=where(node, "in")),
                addr=addr,
                max_outstanding=max_outstanding,
            )  # fmt: skip

        return build_for_node(node, ops.LinearOffChipStore, build)

    @property
    def geometry(self) -> TileGeometry:
        return self._geo

    @property
    def in_ports(self) -> list:
        return [self.i]

    @property
    def out_ports(self) -> list:
        return []

    def elaborate(self, platform) -> Module:
        m = Module()
        geo = self._geo
        m.submodules.writer = writer = TileWriter(
            geometry=geo,
            tile_format=self._fmt,
            config=self._config,
            max_outstanding=self._max_outstanding,
        )
        p = self.i.payload
        count = Signal(range(geo.n_tiles + 1))
        is_data = p.kind == Kind.DATA
        full = count == geo.n_tiles
        done, error = Signal(), Signal()
        m.d.comb += [
            writer.cmd.valid.eq(self.i.valid & (p.kind != Kind.STOP)),
            writer.cmd.payload.kind.eq(Mux(is_data & full, Cmd.NAK, p.kind)),
            writer.cmd.payload.index.eq(count),
            writer.cmd.payload.data.eq(Value.cast(p.data)),
            self.i.ready.eq((p.kind == Kind.STOP) | writer.cmd.ready),
            writer.o.ready.eq(1),
            self.done.eq(done),
            self.error.eq(error | writer.error),
        ]
        with m.If(self.i.valid & self.i.ready):
            with m.If(is_data):
                with m.If(full):
                    m.d.sync += error.eq(1)
                with m.Else():
                    m.d.sync += count.eq(count + 1)
            with m.If((p.kind == Kind.DONE) & ~full):
                m.d.sync += error.eq(1)
        with m.If(writer.o.valid & (writer.o.payload.kind == Kind.DONE)):
            m.d.sync += done.eq(1)
        wiring.connect(m, writer.axi, wiring.flipped(self.axi))
        return m


class RandomStore(wiring.Component):
    """RandomOffChipStore: writes each ``wdata`` tile at the index from ``waddr``; acks each write.

    Parameters (keyword-only): ``config``, ``tensor_shape``, ``tile_format`` (``wdata``),
    ``addr_format`` (``waddr``, a 1x1 integer tile), ``addr``, ``max_outstanding``.

    Ports
    -----
    waddr : In(addr_format stream), wdata : In(tile_format stream)
        Taken together, token by token (same shape).
    ack : Out(``[1,1]`` bool tile stream)
        ``waddr``'s shape and stops. A true tile once the write is complete in memory (all its
        B responses are in, so a later read sees it); a false tile for an index outside
        ``[0, n_tiles)``, which is not written.
    axi : Out(AXI4Signature(write only))
    error : Out(1)
        Sticky: an out-of-range index, ``waddr`` and ``wdata`` not lining up (the interpreter
        raises in both cases), or an AXI error response.

    Latency and throughput as :class:`LinearStore`; an ack follows its last B response by about
    two cycles.
    """

    def __init__(
        self,
        *,
        config: HwConfig,
        tensor_shape: Sequence[int],
        tile_format: TokenFormat,
        addr_format: TokenFormat,
        addr: int = 0,
        max_outstanding: int | None = None,
        src_loc_at: int = 0,
    ):
        who = "RandomStore"
        self._config = config = check_config(who, config)
        self._fmt = fmt = memory_tile(who, "tile_format", tile_format)
        self._addr_fmt = address_format(who, addr_format, fmt)
        self._geo = TileGeometry.for_format(who, config, tensor_shape, fmt, addr)
        self._max_outstanding = outstanding(who, max_outstanding, config)
        self.ack_format = ack_format(fmt.level_bits)
        super().__init__(
            {
                "waddr": In(addr_format.signature()),
                "wdata": In(fmt.signature()),
                "ack": Out(self.ack_format.signature()),
                "axi": Out(AXI4Signature.for_config(config, read=False)),
                "error": Out(1),
            }
        )

    @classmethod
    def from_node(
        cls, node: Any, config: HwConfig, *, addr: int = 0, max_outstanding: int | None = None
    ) -> RandomStore:
        """The controller of a ``RandomOffChipStore`` node, its tensor at byte ``addr``. ``max_outstanding``
        defaults to ``config.max_outstanding``."""

        def build() -> RandomStore:
            no_cost_width(node)
            return cls(
                src_loc_at=3,
                config=config,
                tensor_shape=node.tensor.shape,
                tile_format=TokenFormat.for_elem(node.inputs[1].elem, config, where=where(node, "wdata")),
                addr_format=TokenFormat.for_elem(node.inputs[0].elem, config, where=where(node, "waddr")),
                addr=addr,
                max_outstanding=max_outstanding,
            )  # fmt: skip

        return build_for_node(node, ops.RandomOffChipStore, build)

    @property
    def geometry(self) -> TileGeometry:
        return self._geo

    @property
    def in_ports(self) -> list:
        return [self.waddr, self.wdata]

    @property
    def out_ports(self) -> list:
        return [self.ack]

    def elaborate(self, platform) -> Module:
        m = Module()
        geo = self._geo
        m.submodules.writer = writer = TileWriter(
            geometry=geo,
            tile_format=self._fmt,
            config=self._config,
            max_outstanding=self._max_outstanding,
        )
        a, d = self.waddr.payload, self.wdata.payload
        value = a.data[0][0]
        in_range = (value >= 0) & (value < geo.n_tiles)
        both = self.waddr.valid & self.wdata.valid
        aligned = (a.kind == d.kind) & ((a.kind != Kind.STOP) | (a.level == d.level))
        is_data = a.kind == Kind.DATA
        error = Signal()
        m.d.comb += [
            writer.cmd.valid.eq(both),
            writer.cmd.payload.kind.eq(
                Mux(is_data, Mux(in_range & aligned, Cmd.TILE, Cmd.NAK), a.kind)
            ),
            writer.cmd.payload.level.eq(a.level),
            writer.cmd.payload.index.eq(value.as_unsigned()),
            writer.cmd.payload.data.eq(Value.cast(d.data)),
            self.waddr.ready.eq(both & writer.cmd.ready),
            self.wdata.ready.eq(both & writer.cmd.ready),
            self.error.eq(error | writer.error),
        ]
        with m.If(both & writer.cmd.ready & (~aligned | (is_data & ~in_range))):
            m.d.sync += error.eq(1)
        wiring.connect(m, writer.o, wiring.flipped(self.ack))
        wiring.connect(m, writer.axi, wiring.flipped(self.axi))
        return m
