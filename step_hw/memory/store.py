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
from ..block_rules import fetch_tile
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
from .load import fetch_block, order_output

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

    Parameters: ``geometry``, ``tile_format``, ``config``, ``max_outstanding``; ``block_acks``
    (keyword, default False) adds the command field ``ack`` for :class:`RandomStore`'s fetch
    blocks: a ``TILE`` with ``ack = 0`` is written without an acknowledgement (it takes no order
    entry), so one ack can cover a block of tiles. Without it the block is as it always was.

    Ports
    -----
    cmd : In(stream of {kind (:class:`Cmd`), level, index, data[, ack]})
    o : Out(ack stream, ``[1,1]`` bool tiles)
        Per ``TILE`` (with ``ack`` set) a true tile once every burst of that tile has its B
        response, and so (AXI answers same-ID bursts in order) every earlier write; per ``NAK`` a
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
        block_acks: bool = False,
    ):
        self._geo = geometry
        self._fmt = tile_format
        self._max_outstanding = max_outstanding
        self._block_acks = block_acks
        self._ack = ack_format(tile_format.level_bits)
        extra = {"ack": unsigned(1)} if block_acks else {}
        self.cmd_layout = token_layout(
            tile_format.level_bits,
            index=unsigned(geometry.index_width),
            data=unsigned(tile_format.data_bits),
            **extra,
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
        # With block acks an address carries its tile's ack flag (the low bit).
        flag = 1 if self._block_acks else 0
        m.submodules.addrs = addrs = Queue(
            shape=unsigned(geo.index_width + flag), depth=contract.ADDR_QUEUE_DEPTH
        )
        m.submodules.tiles = tiles = Queue(
            shape=unsigned(fmt.data_bits), depth=contract.TILE_QUEUE_DEPTH
        )
        m.submodules.bursts = gen = BurstGenerator(geo)
        lane_bits = (geo.lanes - 1).bit_length()
        winfo_layout = data.StructLayout({"len": unsigned(8), "lane": unsigned(max(1, lane_bits))})
        info_depth = contract.store_info_depth(mo)
        m.submodules.winfo = winfo = Queue(shape=winfo_layout, depth=info_depth)
        m.submodules.binfo = binfo = Queue(shape=unsigned(1), depth=info_depth)
        tile_acked = None  # with block acks: the burst generator's tile is acknowledged
        if self._block_acks:
            tile_acked = Signal()
            m.d.comb += [
                gen.tiles.valid.eq(addrs.o.valid),
                gen.tiles.payload.eq(addrs.o.payload[1:]),
                addrs.o.ready.eq(gen.tiles.ready),
            ]
            with m.If(gen.tiles.valid & gen.tiles.ready):
                m.d.sync += tile_acked.eq(addrs.o.payload[0])
        else:
            wiring.connect(m, addrs.o, gen.tiles)
        error = Signal()
        m.d.comb += self.error.eq(error)

        # -- commands -> order, address and data queues --------------------------------------
        cmd = self.cmd
        is_tile = cmd.payload.kind == Cmd.TILE
        order_valid = cmd.valid & (~is_tile | (addrs.i.ready & tiles.i.ready))
        order_ok = order.i.ready
        if self._block_acks:  # a silent tile (``ack = 0``) takes no order entry
            silent = is_tile & ~cmd.payload.ack
            order_valid &= ~silent
            order_ok = order.i.ready | silent
        m.d.comb += [
            order.i.payload.kind.eq(cmd.payload.kind),
            order.i.payload.level.eq(cmd.payload.level),
            order.i.valid.eq(order_valid),
            addrs.i.payload.eq(
                Cat(cmd.payload.ack, cmd.payload.index) if self._block_acks else cmd.payload.index
            ),
            addrs.i.valid.eq(cmd.valid & is_tile & order_ok & tiles.i.ready),
            tiles.i.payload.eq(cmd.payload.data),
            tiles.i.valid.eq(cmd.valid & is_tile & order_ok & addrs.i.ready),
            cmd.ready.eq(order_ok & (~is_tile | (addrs.i.ready & tiles.i.ready))),
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
            binfo.i.payload.eq(burst.last if tile_acked is None else burst.last & tile_acked),
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
    """RandomOffChipStore: writes each ``wdata`` tile (or ``fetch`` block of tiles) at the index
    from ``waddr``; acks each write.

    Parameters (keyword-only): ``config``, ``tensor_shape``, ``tile_format`` (``wdata``),
    ``addr_format`` (``waddr``, a 1x1 integer tile), ``addr``, ``max_outstanding``; ``fetch``:
    ``(nr, nc)`` tiles per index (default: one tile), block ``a`` being tiles ``a*nr*nc + k``
    (one row of tiles, or the tensor's full width: ``ValueError`` otherwise, as
    :func:`~step_hw.memory.load.fetch_block`).

    Ports
    -----
    waddr : In(addr_format stream), wdata : In(tile_format stream)
        Without ``fetch`` taken together, token by token (same shape). With ``fetch`` a data
        token of ``waddr`` is taken alone, then its block from ``wdata`` one token per cycle:
        ``nr*nc`` tiles row-major with ``S1`` between rows, and a closing stop ``S_{2+s}``
        (``s > 0``: it stands for ``waddr``'s next token, ``S_s``, which then passes alone); a
        ``waddr`` stop ``S_s`` not so announced is taken with ``wdata``'s ``S_{s+2}``, done with
        done.
    ack : Out(``[1,1]`` bool tile stream)
        ``waddr``'s shape and stops. A true tile once the write (of the block's every tile) is
        complete in memory (all its B responses are in, so a later read sees it); a false tile
        for an index outside ``[0, n_tiles)`` (``[0, n_blocks)``), which is not written.
    axi : Out(AXI4Signature(write only))
    error : Out(1)
        Sticky: an out-of-range index, ``waddr`` and ``wdata`` not lining up (the interpreter
        raises in both cases), or an AXI error response. With ``fetch``, a block cut short by
        ``wdata``'s done is acknowledged false; other misplaced ``wdata`` tokens are dropped.

    Latency and throughput as :class:`LinearStore`; an ack follows its last B response by about
    two cycles. With ``fetch`` a block takes ``1 + nr*nc + nr`` cycles of input (its address,
    its tiles and stops) while the writer has room; its ack waits for the B response of its
    last tile's last burst (the writer's bursts, one ID, are answered in order).
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
        fetch: Sequence[int] | None = None,
        src_loc_at: int = 0,
    ):
        who = "RandomStore"
        self._config = config = check_config(who, config)
        self._fmt = fmt = memory_tile(who, "tile_format", tile_format)
        self._addr_fmt = address_format(who, addr_format, fmt)
        self._geo = TileGeometry.for_format(who, config, tensor_shape, fmt, addr)
        self._max_outstanding = outstanding(who, max_outstanding, config)
        self._fetch = fetch_block(who, self._geo, fetch)
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
                fetch=node.fetch,
            )  # fmt: skip

        return build_for_node(node, ops.RandomOffChipStore, build)

    @property
    def geometry(self) -> TileGeometry:
        return self._geo

    @property
    def fetch(self) -> tuple[int, int] | None:
        """Tiles per index ``(nr, nc)``, or None (one tile)."""
        return self._fetch[0] if self._fetch is not None else None

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
            block_acks=self._fetch is not None,
        )
        error = Signal()
        m.d.comb += self.error.eq(error | writer.error)
        wiring.connect(m, writer.o, wiring.flipped(self.ack))
        wiring.connect(m, writer.axi, wiring.flipped(self.axi))
        if self._fetch is not None:
            self._blocks(m, writer, error)
            return m
        a, d = self.waddr.payload, self.wdata.payload
        value = a.data[0][0]
        in_range = (value >= 0) & (value < geo.n_tiles)
        both = self.waddr.valid & self.wdata.valid
        aligned = (a.kind == d.kind) & ((a.kind != Kind.STOP) | (a.level == d.level))
        is_data = a.kind == Kind.DATA
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
        ]
        with m.If(both & writer.cmd.ready & (~aligned | (is_data & ~in_range))):
            m.d.sync += error.eq(1)
        return m

    def _blocks(self, m: Module, writer: TileWriter, error: Signal) -> None:
        """``fetch``: an address, then its block's tokens from ``wdata`` (class docstring)."""
        (nr, nc), n_blocks = self._fetch
        n = nr * nc
        a, d = self.waddr.payload, self.wdata.payload
        wa, wd, cmd = self.waddr, self.wdata, writer.cmd
        value = a.data[0][0].as_unsigned()  # a negative index is a large one: out of range
        first = Signal(self._geo.index_width)  # the block's first tile
        in_range = Signal()
        k = Signal(range(max(2, n)))  # the block's next tile
        col = Signal(range(max(2, nc)))
        merged = Signal.like(a.level)  # wdata's closing stop stood for waddr's S_merged (0: none)
        last = k == n - 1
        m.d.comb += [
            cmd.payload.index.eq(first + k),
            cmd.payload.data.eq(Value.cast(d.data)),
            cmd.payload.ack.eq(last),
        ]

        def command(kind: Cmd, level=0) -> Any:
            """Offer a writer command; true in the cycle it is taken."""
            m.d.comb += [cmd.valid.eq(1), cmd.payload.kind.eq(kind), cmd.payload.level.eq(level)]
            return cmd.ready

        def fail() -> None:
            m.d.sync += error.eq(1)

        with m.FSM():
            with m.State("IDLE"), m.If(wa.valid), m.Switch(a.kind):
                with m.Case(Kind.DATA):
                    m.d.comb += wa.ready.eq(1)
                    m.d.sync += [
                        first.eq(fetch_tile(value, 0, n)[: len(first)]),
                        in_range.eq(value < n_blocks),
                        k.eq(0),
                        col.eq(0),
                        merged.eq(0),
                    ]
                    with m.If((merged != 0) | (value >= n_blocks)):
                        fail()
                    m.next = "TILE"
                with m.Case(Kind.STOP):
                    with m.If(merged != 0), m.If(command(Cmd.STOP, a.level)):
                        m.d.comb += wa.ready.eq(1)
                        m.d.sync += merged.eq(0)
                        with m.If(a.level != merged):
                            fail()
                    with m.Elif(wd.valid), m.If(command(Cmd.STOP, a.level)):
                        # wdata's done waits for waddr's.
                        m.d.comb += [wa.ready.eq(1), wd.ready.eq(d.kind != Kind.DONE)]
                        with m.If((d.kind != Kind.STOP) | (d.level != a.level + 2)):
                            fail()
                with m.Default():  # DONE
                    with m.If(merged != 0):
                        m.d.sync += merged.eq(0)
                        fail()
                    with m.Elif(wd.valid & (d.kind == Kind.DONE)), m.If(command(Cmd.DONE)):
                        m.d.comb += [wa.ready.eq(1), wd.ready.eq(1)]
                    with m.Elif(wd.valid):  # wdata has more: drop it up to its done
                        m.d.comb += wd.ready.eq(1)
                        fail()

            with m.State("TILE"), m.If(wd.valid), m.Switch(d.kind):
                with m.Case(Kind.DATA):
                    take = Signal()
                    with m.If(in_range):
                        m.d.comb += take.eq(command(Cmd.TILE))
                    with m.Elif(last):
                        m.d.comb += take.eq(command(Cmd.NAK))
                    with m.Else():
                        m.d.comb += take.eq(1)
                    with m.If(take):
                        m.d.comb += wd.ready.eq(1)
                        m.d.sync += k.eq(k + 1)
                        with m.If(last):
                            m.next = "CLOSE"
                        with m.Elif(col == nc - 1):
                            m.d.sync += col.eq(0)
                            m.next = "ROW"
                        with m.Else():
                            m.d.sync += col.eq(col + 1)
                with m.Case(Kind.STOP):  # a stop where a tile belongs: dropped
                    m.d.comb += wd.ready.eq(1)
                    fail()
                with m.Default():  # done inside the block: a false ack for it
                    fail()
                    with m.If(command(Cmd.NAK)):
                        m.next = "IDLE"

            with m.State("ROW"), m.If(wd.valid):
                with m.If((d.kind == Kind.STOP) & (d.level == 1)):
                    m.d.comb += wd.ready.eq(1)
                    m.next = "TILE"
                with m.Elif(d.kind == Kind.DONE):
                    fail()
                    with m.If(command(Cmd.NAK)):
                        m.next = "IDLE"
                with m.Else():  # a tile (kept) or another stop (dropped) where S1 belongs
                    m.d.comb += wd.ready.eq(d.kind == Kind.STOP)
                    fail()
                    m.next = "TILE"

            with m.State("CLOSE"), m.If(wd.valid):
                with m.If((d.kind == Kind.STOP) & (d.level >= 2)):
                    m.d.comb += wd.ready.eq(1)
                    m.d.sync += merged.eq(d.level - 2)
                with m.Else():  # a stop is dropped; a tile or done is kept for what follows
                    m.d.comb += wd.ready.eq(d.kind == Kind.STOP)
                    fail()
                m.next = "IDLE"
