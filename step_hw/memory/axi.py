"""AXI4 manager ports, tile geometry in memory, and the burst generator the memory controllers share.

Memory layout (the contract with ``step_lang.ops.offchip.tile_index``): a tensor ``[..., R, C]``
of ``elem_bytes``-byte elements at byte address ``addr`` is row-major, element ``(r, c)`` of its
``[R, C]`` matrix (outer dims flattened into rows) at ``addr + (r*C + c) * elem_bytes``. Tile
number ``k`` of ``tr x tc`` tiles is row-major over the tiled shape, so it sits at tile row
``q, t = divmod(k, C // tc)`` and each of its ``tr`` rows is one contiguous *segment* of
``tc * elem_bytes`` bytes, ``C * elem_bytes`` bytes apart (one segment for the whole tile when
``tc == C`` or ``tr == 1``).

Bursts: every segment is read or written with INCR bursts of ``transfer_bytes`` per beat (the
largest power of two, at most the bus width, that divides the segment size and the tensor's byte
address, so every beat is aligned); a segment is split where it would cross a 4 KiB boundary
(AXI4 forbids that) or exceed 256 beats. All bursts use ID 0, so responses return in order.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from amaranth.hdl import Const, Module, Mux, Signal, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from .. import contract
from ..config import HwConfig

__all__ = ["AXI4Signature", "BurstGenerator", "TileGeometry", "axi_ports"]

#: AXI4 burst type INCR.
BURST_INCR = 1
#: AXI4 INCR bursts hold at most 256 beats and never cross a 4 KiB boundary.
MAX_BURST_BEATS = contract.AXI_MAX_BURST_BEATS
BOUNDARY = contract.AXI_BOUNDARY


class AXI4Signature(wiring.Signature):
    """An AXI4 manager port: read (AR, R) and/or write (AW, W, B) channels, seen from the manager.

    Member names are AXI's own (``arvalid``, ``araddr``, ``rdata``, ...). Converted with
    :func:`axi_ports`, the Verilog ports are ``m_axi_arvalid`` etc., the names that cocotbext-axi's
    ``AxiBus.from_prefix(dut, "m_axi")`` (or ``AxiReadBus`` / ``AxiWriteBus``) looks for. Optional
    AXI signals (``*lock``, ``*cache``, ``*prot``, ``*qos``, ``*region``, ``*user``) are omitted:
    subordinates take their defaults.

    Parameters
    ----------
    addr_width, data_width, id_width : int
        Address bits, data bits (a power of two from 8 to 1024), ID bits.
    read, write : bool
        Which halves to include (a load needs only ``read``, a store only ``write``).
    """

    def __init__(
        self,
        *,
        addr_width: int,
        data_width: int,
        id_width: int,
        read: bool = True,
        write: bool = True,
    ):
        for name, value in (("address", addr_width), ("ID", id_width)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise TypeError(f"AXI4 {name} width must be a positive integer, not {value!r}")
        if (
            isinstance(data_width, bool)
            or not isinstance(data_width, int)
            or data_width < 8
            or data_width > 1024
            or data_width & (data_width - 1)
        ):
            raise ValueError(
                f"AXI4 data width must be a power of two from 8 to 1024, not {data_width!r}"
            )
        if not (read or write):
            raise ValueError("AXI4 signature needs a read or a write half, or both")
        self._addr_width, self._data_width, self._id_width = addr_width, data_width, id_width
        self._read, self._write = bool(read), bool(write)
        members: dict[str, Any] = {}
        if write:
            members.update(
                awid=Out(id_width), awaddr=Out(addr_width), awlen=Out(8), awsize=Out(3),
                awburst=Out(2), awvalid=Out(1), awready=In(1),
                wdata=Out(data_width), wstrb=Out(data_width // 8), wlast=Out(1), wvalid=Out(1),
                wready=In(1),
                bid=In(id_width), bresp=In(2), bvalid=In(1), bready=Out(1),
            )  # fmt: skip
        if read:
            members.update(
                arid=Out(id_width), araddr=Out(addr_width), arlen=Out(8), arsize=Out(3),
                arburst=Out(2), arvalid=Out(1), arready=In(1),
                rid=In(id_width), rdata=In(data_width), rresp=In(2), rlast=In(1), rvalid=In(1),
                rready=Out(1),
            )  # fmt: skip
        super().__init__(members)

    @classmethod
    def for_config(
        cls, config: HwConfig, *, read: bool = True, write: bool = True
    ) -> AXI4Signature:
        """The AXI4 port of ``config`` (``axi_addr_width``, ``axi_data_width``, ``axi_id_width``)."""
        return cls(
            addr_width=config.axi_addr_width,
            data_width=config.axi_data_width,
            id_width=config.axi_id_width,
            read=read,
            write=write,
        )

    @property
    def addr_width(self) -> int:
        return self._addr_width

    @property
    def data_width(self) -> int:
        return self._data_width

    @property
    def id_width(self) -> int:
        return self._id_width

    @property
    def read(self) -> bool:
        return self._read

    @property
    def write(self) -> bool:
        return self._write

    def __eq__(self, other: object) -> bool:
        return isinstance(other, AXI4Signature) and (
            self.addr_width,
            self.data_width,
            self.id_width,
            self.read,
            self.write,
        ) == (other.addr_width, other.data_width, other.id_width, other.read, other.write)

    def __hash__(self) -> int:
        return hash((self.addr_width, self.data_width, self.id_width, self.read, self.write))

    def __repr__(self) -> str:
        halves = "+".join(h for h, on in (("read", self.read), ("write", self.write)) if on)
        return (
            f"AXI4Signature({halves}, addr_width={self.addr_width}, "
            f"data_width={self.data_width}, id_width={self.id_width})"
        )


def axi_ports(component: wiring.Component, *, member: str = "axi", prefix: str = "m_axi") -> dict:
    """``ports=`` for ``amaranth.back.verilog.convert``: the component's ports, with the AXI4
    member ``member`` named ``<prefix>_<signal>`` (cocotbext-axi's convention) and every other
    port named as Amaranth would (path joined by ``__``, e.g. ``out__valid``)."""
    from amaranth.hdl import ValueCastable
    from amaranth.hdl._ir import PortDirection

    if member not in component.signature.members:
        raise ValueError(f"Component has no member {member!r} to name with prefix {prefix!r}")
    ports = {}
    for path, flow_member, value in component.signature.flatten(component):
        if isinstance(value, ValueCastable):
            value = value.as_value()
        direction = PortDirection.Input if flow_member.flow == In else PortDirection.Output
        if path[0] == member:
            name = f"{prefix}_{'_'.join(map(str, path[1:]))}"
        else:
            name = "__".join(map(str, path))
        ports[name] = (value, direction)
    return ports


# -- tile geometry --------------------------------------------------------------------------------


@dataclass(frozen=True)
class TileGeometry:
    """Where the tiles of a tensor lie in memory, and how they are moved over an AXI4 bus.

    Also the Python reference of the burst generator (:meth:`bursts`), which the tests compare
    with the hardware.
    """

    tensor_shape: tuple[int, ...]
    tile: tuple[int, int]
    elem_bytes: int
    addr: int
    data_width: int
    addr_width: int

    @classmethod
    def for_format(
        cls, who: str, config: HwConfig, tensor_shape: Any, fmt: Any, addr: int
    ) -> TileGeometry:
        """The geometry of a controller's tensor in tiles of token format ``fmt``."""
        return cls.build(
            tensor_shape=tensor_shape,
            tile=(fmt.rows, fmt.cols),
            elem_bytes=fmt.elem_bits // 8,
            addr=addr,
            config=config,
            who=who,
        )

    @classmethod
    def build(
        cls,
        *,
        tensor_shape: Any,
        tile: tuple[int, int],
        elem_bytes: int,
        addr: int,
        config: HwConfig,
        who: str,
    ) -> TileGeometry:
        """Validated geometry; ``who`` starts every error message (e.g. ``"LinearLoad"``)."""
        if (
            not isinstance(tensor_shape, (tuple, list))
            or len(tensor_shape) < 2
            or not all(
                isinstance(n, int) and not isinstance(n, bool) and n > 0 for n in tensor_shape
            )
        ):
            raise ValueError(
                f"{who} tensor shape must be at least two positive integers, not {tensor_shape!r}"
            )
        tensor_shape = tuple(tensor_shape)
        r, c = tensor_shape[-2:]
        if r % tile[0] or c % tile[1]:
            raise ValueError(
                f"{who} tile {tile[0]}x{tile[1]} must divide the last two dims {r}x{c} of the tensor"
            )
        if isinstance(addr, bool) or not isinstance(addr, int) or addr < 0 or addr % elem_bytes:
            raise ValueError(
                f"{who} tensor address must be a non-negative multiple of the element size "
                f"({elem_bytes} bytes), not {addr!r}"
            )
        geo = cls(
            tensor_shape, tile, elem_bytes, addr, config.axi_data_width, config.axi_addr_width
        )
        if addr + geo.tensor_bytes > 2**config.axi_addr_width:
            raise ValueError(
                f"{who} tensor of {geo.tensor_bytes} bytes at address {addr:#x} does not fit the "
                f"{config.axi_addr_width}-bit AXI address space"
            )
        return geo

    # sizes ----------------------------------------------------------------------------------

    @property
    def rows(self) -> int:
        """Rows of the tensor as a matrix (outer dims flattened)."""
        return math.prod(self.tensor_shape[:-1])

    @property
    def cols(self) -> int:
        return self.tensor_shape[-1]

    @property
    def tensor_bytes(self) -> int:
        return math.prod(self.tensor_shape) * self.elem_bytes

    @property
    def tiles_per_row(self) -> int:
        return self.cols // self.tile[1]

    @property
    def n_tiles(self) -> int:
        return (self.rows // self.tile[0]) * self.tiles_per_row

    @property
    def tile_bytes(self) -> int:
        return self.tile[0] * self.tile[1] * self.elem_bytes

    @property
    def segments(self) -> int:
        """Contiguous pieces of one tile (its rows, or 1 when the rows are adjacent)."""
        return contract.tile_segments(self.tile, self.cols)

    @property
    def segment_bytes(self) -> int:
        return self.tile_bytes // self.segments

    @property
    def row_bytes(self) -> int:
        """Bytes from one segment of a tile to the next."""
        return self.cols * self.elem_bytes

    @property
    def bus_bytes(self) -> int:
        return self.data_width // 8

    @property
    def transfer_bytes(self) -> int:
        """Bytes per beat: the widest aligned power of two that fits the bus."""
        return contract.transfer_bytes(self.bus_bytes, self.tile[1] * self.elem_bytes, self.addr)

    @property
    def size_code(self) -> int:
        """``AxSIZE``: log2 of :attr:`transfer_bytes`."""
        return self.transfer_bytes.bit_length() - 1

    @property
    def lanes(self) -> int:
        """Beat positions on the bus (1 when every beat fills the bus)."""
        return self.bus_bytes // self.transfer_bytes

    @property
    def beat_bits(self) -> int:
        return self.transfer_bytes * 8

    @property
    def beats_per_segment(self) -> int:
        return self.segment_bytes // self.transfer_bytes

    @property
    def beats_per_tile(self) -> int:
        return self.tile_bytes // self.transfer_bytes

    @property
    def index_width(self) -> int:
        """Bits of a tile index."""
        return max(1, (self.n_tiles - 1).bit_length())

    # the reference model ----------------------------------------------------------------------

    def tile_addr(self, k: int) -> int:
        """Byte address of the first element of tile ``k``."""
        q, t = divmod(k, self.tiles_per_row)
        return self.addr + (q * self.tile[0] * self.cols + t * self.tile[1]) * self.elem_bytes

    def bursts(self, k: int) -> list[tuple[int, int]]:
        """The ``(address, beats)`` bursts that move tile ``k``, in order
        (:func:`step_hw.contract.segment_bursts`)."""
        return contract.segment_bursts(
            self.tile_addr(k), self.segments, self.segment_bytes, self.row_bytes,
            self.transfer_bytes,
        )  # fmt: skip

    def beat_layout(self) -> list[tuple[int, int]]:
        """For each beat of a tile, in order: its byte address and its lane on the bus."""
        out = []
        for a, n in self.bursts(0):
            for i in range(n):
                byte = a + i * self.transfer_bytes
                out.append((byte, (byte % self.bus_bytes) // self.transfer_bytes))
        return out

    # hardware ----------------------------------------------------------------------------------

    def divmod_const(self, k) -> tuple[Any, Any]:
        """``divmod(k, tiles_per_row)`` in hardware for ``0 <= k < n_tiles``.

        A constant division is a multiplication by a rounded-up reciprocal: with
        ``s = w + ceil(log2 d)`` and ``M = ceil(2**s / d)``, ``(k * M) >> s == k // d`` for every
        ``w``-bit ``k`` (Granlund and Montgomery, PLDI 1994, theorem 4.2). Powers of two are wires.
        """
        d = self.tiles_per_row
        if d == 1:
            return k, Const(0, 1)
        if d & (d - 1) == 0:
            shift = d.bit_length() - 1
            return k >> shift, k[:shift]
        w = len(k)
        s = w + (d - 1).bit_length()
        mult = -(-(1 << s) // d)
        q = ((k * mult) >> s)[:w]
        r = (k - q * d)[: (d - 1).bit_length()]
        return q, r


class BurstGenerator(wiring.Component):
    """Turns tile indices into AXI4 bursts (address and length), one burst per cycle.

    Ports
    -----
    tiles : In(stream.Signature(unsigned(index_width)))
        Tile numbers to move.
    bursts : Out(stream.Signature(burst layout))
        ``addr`` (bytes), ``len`` (beats - 1, AXI's ``AxLEN``), ``lane`` (bus position of the first
        beat) and ``last`` (the tile's final burst), in the order of :meth:`TileGeometry.bursts`.

    Latency one cycle from a tile index to its first burst; initiation interval one burst per
    cycle (a new tile is accepted in the cycle the previous tile's last burst leaves). The
    address of tile ``k`` needs ``divmod(k, C // tc)``: a constant multiplication
    (:meth:`TileGeometry.divmod_const`) on the path from ``tiles`` to a register.
    """

    def __init__(self, geometry: TileGeometry):
        self._geo = geometry
        lane_bits = max(1, (geometry.lanes - 1).bit_length())
        self.burst_layout = data.StructLayout(
            {
                "addr": unsigned(geometry.addr_width),
                "len": unsigned(8),
                "lane": unsigned(lane_bits),
                "last": unsigned(1),
            }
        )
        super().__init__(
            {
                "tiles": In(stream.Signature(unsigned(geometry.index_width))),
                "bursts": Out(stream.Signature(self.burst_layout)),
            }
        )

    def elaborate(self, platform) -> Module:
        geo = self._geo
        m = Module()
        aw = geo.addr_width
        size = geo.size_code
        busy = Signal()
        addr = Signal(aw)  # next beat's address
        seg_start = Signal(aw)  # first byte of the current segment
        left = Signal(range(geo.beats_per_segment + 1))  # beats of the segment still to issue
        seg = Signal(range(max(2, geo.segments)))

        low = min(12, aw)
        to_boundary = Signal(range(BOUNDARY // geo.transfer_bytes + 1))
        m.d.comb += to_boundary.eq((Const(BOUNDARY, 14) - addr[:low]) >> size)
        beats = Signal(range(MAX_BURST_BEATS + 1))
        limit = Mux(to_boundary < MAX_BURST_BEATS, to_boundary, MAX_BURST_BEATS)
        m.d.comb += beats.eq(Mux(left < limit, left, limit))
        seg_done = beats == left
        tile_done = seg_done & (seg == geo.segments - 1)

        p = self.bursts.payload
        m.d.comb += [
            self.bursts.valid.eq(busy),
            p.addr.eq(addr),
            p.len.eq(beats - 1),
            p.last.eq(tile_done),
        ]
        if geo.lanes > 1:
            m.d.comb += p.lane.eq(addr[size : size + (geo.lanes - 1).bit_length()])

        taken = self.bursts.valid & self.bursts.ready
        with m.If(taken):
            with m.If(seg_done):
                m.d.sync += [
                    seg.eq(seg + 1),
                    seg_start.eq(seg_start + geo.row_bytes),
                    addr.eq(seg_start + geo.row_bytes),
                    left.eq(geo.beats_per_segment),
                ]
            with m.Else():
                m.d.sync += [addr.eq(addr + (beats << size)), left.eq(left - beats)]
            with m.If(tile_done):
                m.d.sync += busy.eq(0)

        m.d.comb += self.tiles.ready.eq(~busy | (taken & tile_done))
        with m.If(self.tiles.valid & self.tiles.ready):
            q, r = geo.divmod_const(self.tiles.payload)
            start = Signal(aw)
            m.d.comb += start.eq(
                geo.addr + q * (geo.tile[0] * geo.row_bytes) + r * (geo.tile[1] * geo.elem_bytes)
            )
            m.d.sync += [
                busy.eq(1),
                addr.eq(start),
                seg_start.eq(start),
                left.eq(geo.beats_per_segment),
                seg.eq(0),
            ]
        return m
