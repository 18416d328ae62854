"""AXI4 load controllers: LinearLoad (affine tile walks) and RandomLoad (tile indices from a stream)."""

from __future__ import annotations

import enum
import math
from collections.abc import Sequence
from typing import Any

from amaranth.hdl import Cat, Module, Mux, Signal, unsigned
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from step_lang import ops

from .. import contract
from ..block_rules import check_fetch, fetch_tile
from ..checks import (
    address_format,
    build_for_node,
    check_config,
    check_format,
    check_int,
    int_tuple,
    levels_fit,
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
from .sequence import Entry, Sequencer, checked_walk_bound, walk_layout

__all__ = ["LinearLoad", "RandomLoad", "TileReader", "fetch_block"]


class Cmd(enum.IntEnum):
    """Commands of :class:`TileReader` (the values of ``Kind`` where they overlap)."""

    TILE = 0
    STOP = 1
    DONE = 2
    #: A zero tile without a memory read (an out-of-range index).
    ZERO = 3


class TileReader(wiring.Component):
    """Reads tiles over AXI4 in command order; emits tiles and stop tokens in that same order.

    The shared back end of :class:`LinearLoad` and :class:`RandomLoad`.

    Ports
    -----
    cmd : In(stream of {kind (:class:`Cmd`), level, index})
        ``TILE`` with ``level > 0`` emits the tile then ``S_level``; ``STOP``/``DONE`` emit a
        stop/done token; ``ZERO`` emits a zero tile.
    o : Out(tile token stream)
    axi : Out(AXI4Signature(read only))
    error : Out(1)
        Sticky: a read returned ``SLVERR``/``DECERR``.

    Structure: each command enters an *order* queue; a ``TILE`` also enters an address queue, the
    :class:`~step_hw.memory.axi.BurstGenerator` and the AR channel, with at most
    ``max_outstanding`` bursts between an AR handshake and the last R beat of the burst. R beats
    are assembled into tiles (a shift register) and queued; the output takes the head of the
    order queue and, for a tile, the next assembled tile. A tile's last burst is requested only
    while fewer than ``TILE_QUEUE_DEPTH`` tiles have had their last burst requested and not yet
    left the tile queue, so the queue has room for every tile's last beat and ``rready`` stays
    high: a stalled output holds back this load's requests, never the R channel, and so never
    the other loads of a shared port (``HwConfig.axi_ports``; the memory answers in AR order).
    ``arvalid`` and the output ``valid`` never depend on their own ``ready``.
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
        self.cmd_layout = token_layout(tile_format.level_bits, index=unsigned(geometry.index_width))
        super().__init__(
            {
                "cmd": In(stream.Signature(self.cmd_layout)),
                "o": Out(tile_format.signature()),
                "axi": Out(AXI4Signature.for_config(config, write=False)),
                "error": Out(1),
            }
        )

    def elaborate(self, platform) -> Module:
        m = Module()
        geo, fmt = self._geo, self._fmt
        axi = self.axi
        order_layout = token_layout(fmt.level_bits)
        # Enough order entries to keep every tile in flight (bursts, queues) behind the head.
        m.submodules.order = order = Queue(
            shape=order_layout, depth=contract.order_queue_depth(self._max_outstanding)
        )
        m.submodules.addrs = addrs = Queue(
            shape=unsigned(geo.index_width), depth=contract.ADDR_QUEUE_DEPTH
        )
        m.submodules.tiles = tiles = Queue(
            shape=unsigned(fmt.data_bits), depth=contract.TILE_QUEUE_DEPTH
        )
        m.submodules.bursts = gen = BurstGenerator(geo)
        wiring.connect(m, addrs.o, gen.tiles)
        error = Signal()
        m.d.comb += self.error.eq(error)

        # -- commands -> order and address queues -------------------------------------------
        cmd = self.cmd
        is_tile = cmd.payload.kind == Cmd.TILE
        m.d.comb += [
            order.i.payload.kind.eq(cmd.payload.kind),
            order.i.payload.level.eq(cmd.payload.level),
            order.i.valid.eq(cmd.valid & (~is_tile | addrs.i.ready)),
            addrs.i.payload.eq(cmd.payload.index),
            addrs.i.valid.eq(cmd.valid & is_tile & order.i.ready),
            cmd.ready.eq(order.i.ready & (~is_tile | addrs.i.ready)),
        ]

        # -- AR: bursts, at most max_outstanding in flight ------------------------------------
        inflight = Signal(range(self._max_outstanding + 1))
        lanes = geo.lanes
        can_issue = inflight < self._max_outstanding
        if lanes > 1:
            # The R side needs each burst's first lane; a queue as deep as the bursts in flight.
            m.submodules.info = info = Queue(
                shape=unsigned((lanes - 1).bit_length()), depth=max(3, self._max_outstanding)
            )
            can_issue &= info.i.ready
            m.d.comb += [
                info.i.payload.eq(gen.bursts.payload.lane),
                info.i.valid.eq(axi.arvalid & axi.arready),
            ]
        # A tile's last burst is requested only while fewer than TILE_QUEUE_DEPTH tiles have
        # had theirs requested and not yet left the tile queue, so the tile queue always has
        # room for a tile's last beat: R never stalls, and a load whose consumer stalls cannot
        # block the loads behind it on a shared port (the memory answers in AR order).
        reserved = Signal(range(contract.TILE_QUEUE_DEPTH + 1))
        can_issue &= ~gen.bursts.payload.last | (reserved < contract.TILE_QUEUE_DEPTH)
        reserve = axi.arvalid & axi.arready & gen.bursts.payload.last
        release = tiles.o.valid & tiles.o.ready
        with m.If(reserve & ~release):
            m.d.sync += reserved.eq(reserved + 1)
        with m.Elif(~reserve & release):
            m.d.sync += reserved.eq(reserved - 1)
        m.d.comb += [
            axi.arid.eq(0),
            axi.araddr.eq(gen.bursts.payload.addr),
            axi.arlen.eq(gen.bursts.payload.len),
            axi.arsize.eq(geo.size_code),
            axi.arburst.eq(BURST_INCR),
            axi.arvalid.eq(gen.bursts.valid & can_issue),
            gen.bursts.ready.eq(axi.arready & can_issue),
        ]
        ar_done = axi.arvalid & axi.arready
        r_done = axi.rvalid & axi.rready
        r_last = r_done & axi.rlast
        with m.If(ar_done & ~r_last):
            m.d.sync += inflight.eq(inflight + 1)
        with m.Elif(~ar_done & r_last):
            m.d.sync += inflight.eq(inflight - 1)

        # -- R: beats -> tiles --------------------------------------------------------------
        bpt, bits = geo.beats_per_tile, geo.beat_bits
        beat_no = Signal(range(max(2, bpt)))
        last_beat = beat_no == bpt - 1
        assembly = Signal(fmt.data_bits)
        info_ok = 1
        if lanes > 1:
            first = Signal(init=1)  # the next beat starts a burst
            lane = Signal.like(info.o.payload)
            lane_now = Mux(first, info.o.payload, lane)
            beat = axi.rdata.word_select(lane_now, bits)
            info_ok = info.o.valid
            with m.If(r_done):
                m.d.sync += [first.eq(axi.rlast), lane.eq(lane_now + 1)]
            m.d.comb += info.o.ready.eq(r_last)
        else:
            beat = axi.rdata[:bits]
        whole = Cat(assembly[bits:], beat)
        m.d.comb += [
            axi.rready.eq(info_ok & (~last_beat | tiles.i.ready)),
            tiles.i.valid.eq(axi.rvalid & info_ok & last_beat),
            tiles.i.payload.eq(whole),
        ]
        with m.If(r_done):
            m.d.sync += [assembly.eq(whole), beat_no.eq(Mux(last_beat, 0, beat_no + 1))]
            with m.If(axi.rresp[1]):
                m.d.sync += error.eq(1)

        # -- output: order head, with the next tile for TILE ---------------------------------
        order_output(m, order, self.o, tiles.o.payload, tiles.o.valid, tiles.o.ready,
                     has_data=(Cmd.TILE,), zero=Cmd.ZERO)  # fmt: skip
        return m


def order_output(m, order, out, tile, tile_valid, tile_ready, *, has_data, zero) -> None:
    """The output stage of :class:`TileReader` and of ``store.TileWriter``: the order queue's
    head becomes one or two tokens.

    A data entry with ``level > 0`` is two beats (the element, then ``S_level``); ``phase``
    remembers that the element was taken. Everything is combinational from queue outputs, which
    hold still until popped, so the output payload is stable while it waits.
    """
    head = order.o.payload
    phase = Signal()  # the element of a two-beat entry was taken
    wants_tile = (head.kind == has_data[0]) & ~phase
    is_elem = ((head.kind == has_data[0]) | (head.kind == zero)) & ~phase
    m.d.comb += out.valid.eq(order.o.valid & (~wants_tile | tile_valid))
    with m.If(is_elem):
        m.d.comb += out.payload.kind.eq(Kind.DATA)
        with m.If(head.kind == has_data[0]):
            m.d.comb += out.payload.data.eq(tile)
    with m.Elif(head.kind == Cmd.DONE):
        m.d.comb += out.payload.kind.eq(Kind.DONE)
    with m.Else():
        m.d.comb += [out.payload.kind.eq(Kind.STOP), out.payload.level.eq(head.level)]
    taken = out.valid & out.ready
    m.d.comb += tile_ready.eq(taken & wants_tile)
    two_beats = is_elem & (head.level != 0)
    with m.If(taken):
        with m.If(two_beats):
            m.d.sync += phase.eq(1)
        with m.Else():
            m.d.comb += order.o.ready.eq(1)
            m.d.sync += phase.eq(0)


class LinearLoad(wiring.Component):
    """LinearOffChipLoad: reads tiles of a tensor along an affine pattern over AXI4.

    Tile number ``base + sum(m[d] * stride[d])`` for ``m`` row-major over ``out_shape`` (strides
    in tiles; 0 re-reads), from the tensor at byte address ``addr`` laid out as in
    ``step_lang.ops.offchip.tile_index`` (see :mod:`step_hw.memory.axi`). Without a reference the
    walk runs once; with one, once per reference element.

    Parameters (keyword-only)
    -------------------------
    config : HwConfig
        AXI widths and the default ``max_outstanding``.
    tensor_shape : sequence of int
        The tensor in elements, at least 2-D.
    tile_format : TokenFormat
        The output tile format (its rows and columns are the tiling; 8/16/32-bit elements).
    out_shape, stride, base
        The walk in tiles, as ``LinearOffChipLoad`` (defaults: the whole tensor, row-major).
    addr : int
        Byte address of the tensor.
    ref_format : TokenFormat or None, ref_rank : int
        The reference stream (contents ignored), if any, and its rank.
    max_outstanding : int
        AXI bursts in flight (default ``config.max_outstanding``).
    walk_bound : sequence of int or None
        The walk is a run-time setting (``HwConfig.geometry_bounds``), built for these extents
        (``out_shape`` at most): the input ``params`` gives it.

    Ports
    -----
    ref : In(stream), only with a reference
    o : Out(tile_format stream)
        ``[1, *out_shape]`` or ``[*ref.shape, *out_shape]`` tiles.
    axi : Out(AXI4Signature(read only)), error : Out(1) (sticky AXI error response)
    params : In(:func:`~.sequence.walk_layout`), only with ``walk_bound``
        The walk (:func:`step_hw.run_time_geometry.walk_fields`), held while the block runs.

    Stop tokens
        Within a walk, the stop after the tile at ``m`` is ``grid_stop(m)``. With a reference,
        each walk's closing ``S_k`` (``k = len(out_shape)``) is held until the next reference
        token: a reference ``S_s`` becomes ``S_{s+k}``, a data token or done releases ``S_k``
        (``BlockWriter``); a rank-0 reference releases it at once. Done follows the reference's.

    Latency and throughput
        The first AR leaves 4 cycles after the start (reset, or the first reference token:
        sequencer, command queue, burst generator); a tile leaves 2 cycles after its last R beat
        (tile queue and output stage).
        Measured with a memory answering 4 cycles after AR (tests/test_hw_memory.py): the
        first 4-beat tile at cycle 13. Steady state: one tile per ``beats_per_tile`` cycles when
        the memory delivers a beat per cycle, plus one cycle per stop token; a reference token
        that starts a walk costs one cycle, hidden when stop tokens are being written.

    Outstanding bursts
        At most ``max_outstanding`` bursts are between their AR handshake and their last R beat;
        a slot is reused the cycle after that beat. A memory with a round trip of ``T`` cycles
        (AR to the next possible AR on the same slot) therefore moves
        ``min(1, max_outstanding / T)`` bursts per cycle: measured ``T = 5`` for 1-beat bursts
        and a 4-cycle memory, so 1, 2, 4, 8 bursts in flight give 20, 10, 5, 4 cycles per 4x4
        int16 tile (4 one-beat bursts). Against cocotbext-axi's ``AxiRam`` (which holds at most
        3 bursts) the controller streams one beat per cycle (rtl_tests/test_axi_verilator.py).
        Tiles of a tensor wider than the tile are ``tile_rows`` bursts, one per tile row; tiles
        spanning the full width are one burst. Narrow tiles use narrow (``AxSIZE`` < bus)
        beats on the right byte lanes.

    Parameters not listed above: ``src_loc_at`` as in Amaranth (``from_node`` passes its
    caller's location, for the unused-elaboratable warning).
    """

    def __init__(
        self,
        *,
        config: HwConfig,
        tensor_shape: Sequence[int],
        tile_format: TokenFormat,
        out_shape: Sequence[int] | None = None,
        stride: Sequence[int] | None = None,
        base: int = 0,
        addr: int = 0,
        ref_format: TokenFormat | None = None,
        ref_rank: int | None = None,
        max_outstanding: int | None = None,
        walk_bound: Sequence[int] | None = None,
        src_loc_at: int = 0,
    ):
        who = "LinearLoad"
        self._config = config = check_config(who, config)
        self._fmt = fmt = memory_tile(who, "tile_format", tile_format)
        self._geo = geo = TileGeometry.for_format(who, config, tensor_shape, fmt, addr)
        tiled = (*geo.tensor_shape[:-2], geo.tensor_shape[-2] // fmt.rows, geo.cols // fmt.cols)
        out_shape = (
            tiled if out_shape is None else int_tuple(who, "out_shape", out_shape, minimum=1)
        )
        if stride is None:
            stride = tuple(math.prod(out_shape[d + 1 :]) for d in range(len(out_shape)))
        stride = int_tuple(who, "stride", stride, minimum=0)
        if len(stride) != len(out_shape):
            raise ValueError(
                f"{who} stride {list(stride)} must have as many entries as out_shape {list(out_shape)}"
            )
        base = check_int(who, "base", base, 0)
        last = base + sum((n - 1) * s for n, s in zip(out_shape, stride, strict=True))
        if last >= geo.n_tiles:
            raise ValueError(
                f"{who} read reaches tile #{last} but the tensor has {geo.n_tiles} tiles"
            )
        if ref_format is not None:
            check_format(who, "ref_format", ref_format, kinds=("tile", "selector"))
            ref_rank = check_int(who, "ref_rank", ref_rank, 0)
            levels_fit(who, "reference", ref_rank, ref_format.level_bits)
        elif ref_rank is not None:
            raise ValueError(f"{who} ref_rank needs a ref_format")
        out_rank = (ref_rank if ref_format is not None else 0) + len(out_shape)
        levels_fit(who, "output", out_rank, fmt.level_bits)
        self._out_shape, self._stride, self._base = tuple(out_shape), stride, base
        self._ref_format, self._ref_rank = ref_format, ref_rank
        self._max_outstanding = outstanding(who, max_outstanding, config)
        self._walk_bound = (
            None if walk_bound is None else checked_walk_bound(who, out_shape, walk_bound)
        )
        members: dict[str, Any] = {
            "o": Out(fmt.signature()),
            "axi": Out(AXI4Signature.for_config(config, write=False)),
            "error": Out(1),
        }
        if ref_format is not None:
            members["ref"] = In(ref_format.signature())
        if self._walk_bound is not None:
            members["params"] = In(walk_layout(self._walk_bound, geo.index_width))
        super().__init__(members)

    @classmethod
    def from_node(
        cls, node: Any, config: HwConfig, *, addr: int = 0, max_outstanding: int | None = None
    ) -> LinearLoad:
        """The controller of a ``LinearOffChipLoad`` node, its tensor at byte ``addr``. ``max_outstanding``
        defaults to ``config.max_outstanding``."""

        def build() -> LinearLoad:
            fmt = TokenFormat.for_elem(node.tile_type, config, where=where(node, "out"))
            no_cost_width(node)
            ref = node.inputs[0] if node.inputs else None
            ref_format = (
                TokenFormat.for_elem(ref.elem, config, where=where(node, "ref"))
                if ref is not None
                else None
            )
            return cls(
                src_loc_at=3,
                config=config,
                tensor_shape=node.tensor.shape,
                tile_format=fmt,
                out_shape=node.out_shape,
                stride=node.stride,
                base=node.base,
                addr=addr,
                ref_format=ref_format,
                ref_rank=ref.rank if ref is not None else None,
                max_outstanding=max_outstanding,
                walk_bound=dict(config.geometry_bounds).get(node.name),
            )

        return build_for_node(node, ops.LinearOffChipLoad, build)

    @property
    def geometry(self) -> TileGeometry:
        return self._geo

    @property
    def max_outstanding(self) -> int:
        return self._max_outstanding

    @property
    def in_ports(self) -> list:
        """Stream inputs in the node's order: ``[ref]`` or ``[]``."""
        return [self.ref] if self._ref_format is not None else []

    @property
    def out_ports(self) -> list:
        return [self.o]

    def elaborate(self, platform) -> Module:
        m = Module()
        geo, fmt = self._geo, self._fmt
        level_bits = fmt.level_bits
        run_time = self._walk_bound is not None
        m.submodules.seq = seq = Sequencer(
            shape=self._walk_bound if run_time else self._out_shape,
            stride=self._stride,
            base=self._base,
            index_width=geo.index_width,
            level_bits=level_bits,
            eager=self._ref_format is None or self._ref_rank == 0,
            run_time=run_time,
        )
        if run_time:
            m.d.comb += seq.walk_params.eq(self.params)
        m.submodules.reader = reader = TileReader(
            geometry=geo,
            tile_format=fmt,
            config=self._config,
            max_outstanding=self._max_outstanding,
        )
        outer = seq.outer
        if self._ref_format is not None:
            m.d.comb += [
                outer.valid.eq(self.ref.valid),
                outer.payload.kind.eq(self.ref.payload.kind),
                outer.payload.level.eq(self.ref.payload.level),
                self.ref.ready.eq(outer.ready),
            ]
        else:
            # One walk: the sequencer is driven by the rank-0 stream "x D".
            sent = Signal(range(3))
            m.d.comb += [
                outer.valid.eq(sent < 2),
                outer.payload.kind.eq(Mux(sent == 0, Kind.DATA, Kind.DONE)),
            ]
            with m.If(outer.valid & outer.ready):
                m.d.sync += sent.eq(sent + 1)
        ent = seq.entries
        m.d.comb += [
            reader.cmd.valid.eq(ent.valid),
            reader.cmd.payload.kind.eq(ent.payload.kind),  # Entry.ELEM == Cmd.TILE
            reader.cmd.payload.level.eq(ent.payload.level),
            reader.cmd.payload.index.eq(ent.payload.index),
            ent.ready.eq(reader.cmd.ready),
            self.error.eq(reader.error),
        ]
        wiring.connect(m, reader.o, wiring.flipped(self.o))
        wiring.connect(m, reader.axi, wiring.flipped(self.axi))
        return m


def fetch_block(who: str, geo: TileGeometry, fetch: Any) -> tuple[tuple[int, int], int] | None:
    """``fetch=(nr, nc)`` checked against the tensor (:func:`step_hw.block_rules.check_fetch`):
    the block and the number of blocks, or None."""
    block = check_fetch(who, geo.tensor_shape, geo.tile, fetch)
    return None if block is None else (block, geo.n_tiles // (block[0] * block[1]))


class RandomLoad(wiring.Component):
    """RandomOffChipLoad: reads the tile (or ``fetch`` block of tiles) whose index arrives on
    ``raddr``, over AXI4.

    Parameters (keyword-only): ``config``, ``tensor_shape``, ``tile_format``, ``addr`` and
    ``max_outstanding`` as :class:`LinearLoad`; ``addr_format``: the ``raddr`` format, a 1x1
    integer tile; ``fetch``: ``(nr, nc)`` tiles per index (default: one tile), with
    ``addr_rank``, the rank of the ``raddr`` stream. Block ``a`` is tiles ``a*nr*nc + k``
    (``k`` row-major in the block), so a block must be one row of tiles (``nr == 1``) or span
    the tensor's full width (``ValueError`` otherwise).

    Ports
    -----
    raddr : In(addr_format stream)
        Tile (block) indices (``[1,1]`` tiles), with stops and done.
    o : Out(tile_format stream)
        One tile per index; ``raddr``'s stops and done pass through in place. With ``fetch``,
        ``[*raddr.shape, nr, nc]`` tiles: each block's tiles row-major.
    axi : Out(AXI4Signature(read only))
    error : Out(1)
        Sticky: an index outside ``[0, n_tiles)`` (``[0, n_blocks)`` with ``fetch``; answered
        with zero tiles, nothing is read; the interpreter raises), or an AXI error response.

    Stop tokens
        Without ``fetch`` they pass through. With ``fetch`` as :class:`LinearLoad` with a
        reference (the block is the walk ``(nr, nc)``): ``S1`` after each row of the block but
        the last; the block's closing ``S2`` is held and merges with a following ``raddr``
        stop ``S_s`` into ``S_{s+2}``, a data token or done releases it; a rank-0 ``raddr``
        writes it at once.

    Latency, throughput and outstanding bursts as :class:`LinearLoad`: without ``fetch`` one
    index per cycle is accepted while the command queue has room, and an index becomes an AR 3
    cycles later. With ``fetch`` an index goes through the :class:`~.sequence.Sequencer` as a
    reference token of :class:`LinearLoad` does: its take costs a cycle, then one tile per cycle
    (the tile's AR 3 cycles after its entry), a held ``S2`` released by a data token one cycle
    more.
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
        addr_rank: int | None = None,
        src_loc_at: int = 0,
    ):
        who = "RandomLoad"
        self._config = config = check_config(who, config)
        self._fmt = fmt = memory_tile(who, "tile_format", tile_format)
        self._addr_fmt = address_format(who, addr_format, fmt)
        self._geo = TileGeometry.for_format(who, config, tensor_shape, fmt, addr)
        self._max_outstanding = outstanding(who, max_outstanding, config)
        self._fetch = fetch_block(who, self._geo, fetch)
        if self._fetch is not None:
            self._addr_rank = check_int(who, "addr_rank", addr_rank, 0)
            levels_fit(who, "output", self._addr_rank + 2, fmt.level_bits)
        elif addr_rank is not None:
            raise ValueError(f"{who} addr_rank needs a fetch block")
        super().__init__(
            {
                "raddr": In(addr_format.signature()),
                "o": Out(fmt.signature()),
                "axi": Out(AXI4Signature.for_config(config, write=False)),
                "error": Out(1),
            }
        )

    @classmethod
    def from_node(
        cls, node: Any, config: HwConfig, *, addr: int = 0, max_outstanding: int | None = None
    ) -> RandomLoad:
        """The controller of a ``RandomOffChipLoad`` node, its tensor at byte ``addr``. ``max_outstanding``
        defaults to ``config.max_outstanding``."""

        def build() -> RandomLoad:
            no_cost_width(node)
            raddr = node.inputs[0]
            return cls(
                src_loc_at=3,
                config=config,
                tensor_shape=node.tensor.shape,
                tile_format=TokenFormat.for_elem(node.tile_type, config, where=where(node, "out")),
                addr_format=TokenFormat.for_elem(raddr.elem, config, where=where(node, "raddr")),
                addr=addr,
                max_outstanding=max_outstanding,
                fetch=node.fetch,
                addr_rank=raddr.rank if node.fetch is not None else None,
            )  # fmt: skip

        return build_for_node(node, ops.RandomOffChipLoad, build)

    @property
    def geometry(self) -> TileGeometry:
        return self._geo

    @property
    def fetch(self) -> tuple[int, int] | None:
        """Tiles per index ``(nr, nc)``, or None (one tile)."""
        return self._fetch[0] if self._fetch is not None else None

    @property
    def in_ports(self) -> list:
        return [self.raddr]

    @property
    def out_ports(self) -> list:
        return [self.o]

    def elaborate(self, platform) -> Module:
        m = Module()
        geo = self._geo
        m.submodules.reader = reader = TileReader(
            geometry=geo,
            tile_format=self._fmt,
            config=self._config,
            max_outstanding=self._max_outstanding,
        )
        error = Signal()
        m.d.comb += self.error.eq(error | reader.error)
        wiring.connect(m, reader.o, wiring.flipped(self.o))
        wiring.connect(m, reader.axi, wiring.flipped(self.axi))
        if self._fetch is not None:
            self._blocks(m, reader, error)
            return m
        p = self.raddr.payload
        value = p.data[0][0]
        in_range = (value >= 0) & (value < geo.n_tiles)
        is_data = p.kind == Kind.DATA
        m.d.comb += [
            reader.cmd.valid.eq(self.raddr.valid),
            reader.cmd.payload.kind.eq(Mux(is_data, Mux(in_range, Cmd.TILE, Cmd.ZERO), p.kind)),
            reader.cmd.payload.level.eq(p.level),
            reader.cmd.payload.index.eq(value.as_unsigned()),
            self.raddr.ready.eq(reader.cmd.ready),
        ]
        with m.If(self.raddr.valid & self.raddr.ready & is_data & ~in_range):
            m.d.sync += error.eq(1)
        return m

    def _blocks(self, m: Module, reader: TileReader, error: Signal) -> None:
        """``fetch``: each index drives a walk over its block's ``(nr, nc)`` tiles."""
        (nr, nc), n_blocks = self._fetch
        p = self.raddr.payload
        value = p.data[0][0].as_unsigned()  # a negative index is a large one: out of range
        m.submodules.seq = seq = Sequencer(
            shape=(nr, nc),
            stride=(nc, 1),
            base=0,
            index_width=max(1, (nr * nc - 1).bit_length()),
            level_bits=self._fmt.level_bits,
            slot_width=len(value),
            eager=self._addr_rank == 0,
        )
        m.d.comb += [
            seq.outer.valid.eq(self.raddr.valid),
            seq.outer.payload.kind.eq(p.kind),
            seq.outer.payload.level.eq(p.level),
            seq.outer.payload.slot.eq(value),
            self.raddr.ready.eq(seq.outer.ready),
        ]
        ent = seq.entries
        block = ent.payload.slot
        in_range = block < n_blocks
        is_elem = ent.payload.kind == Entry.ELEM
        m.d.comb += [
            reader.cmd.valid.eq(ent.valid),
            # Entry.ELEM/STOP/DONE are Cmd.TILE/STOP/DONE.
            reader.cmd.payload.kind.eq(Mux(is_elem & ~in_range, Cmd.ZERO, ent.payload.kind)),
            reader.cmd.payload.level.eq(ent.payload.level),
            reader.cmd.payload.index.eq(fetch_tile(block, ent.payload.index, nr * nc)),
            ent.ready.eq(reader.cmd.ready),
        ]
        with m.If(ent.valid & ent.ready & is_elem & ~in_range):
            m.d.sync += error.eq(1)
