"""`HwConfig`: the one description of the hardware that every block and the simulator's `rtl`
profile read."""

from __future__ import annotations

from dataclasses import dataclass

from step_lang.types import DTYPES, DType

__all__ = ["HwConfig"]

_HW_DTYPES = ("int8", "int16", "int32")
# Every dynamic tile carries dyn_tile_rows rows in its payload and in every register it passes;
# beyond a few hundred rows a tile is a buffer, not a register (use Bufferize).
_MAX_DYN_ROWS = 256


def _positive(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"HwConfig.{name} must be a positive integer, not {value!r}")


@dataclass(frozen=True)
class HwConfig:
    """Parameters of the generated hardware.

    Attributes:
        elem_dtype: element type of tiles on the datapath: ``int8``, ``int16`` or ``int32``
            (signed; fixed-point with ``frac_bits`` fractional bits).
        acc_dtype: accumulator type of MAC arrays and Accum units (``int32``).
        frac_bits: fractional bits of the fixed-point format (0: plain integers).
        tile_rows, tile_cols: the largest tile a stream may carry; every tile on a stream fits it.
        lanes: multiply-accumulate lanes per matmul unit (initiation interval
            ``ceil(M*K*N / lanes)``).
        queue_depth: default depth of edge queues (3 or more sustains one token per cycle).
        mem_port_elems: elements an on-chip memory port moves per cycle.
        axi_data_width, axi_addr_width, axi_id_width: AXI4 port parameters (bits).
        max_outstanding: AXI bursts a memory controller keeps in flight.
        level_bits: width of the stop-level field (levels up to ``2**level_bits - 1``).
        axi_ports: AXI4 ports of an elaborated graph. ``None`` (default): one port
            ``m_axi_<node>`` per memory operator. ``k``: loads share up to ``k`` read ports
            ``m_axi_rd<i>`` and stores up to ``k`` write ports ``m_axi_wr<i>``, each port behind
            an arbiter when it has several operators (``step_hw.memory.arbiter``).
        dyn_tile_rows: the most rows a dynamically sized tile (a ``Tile`` with symbolic rows,
            e.g. dynamic tiling's ``[n_e, D]``) may hold; its payload carries this many rows plus
            a row count (``docs/stop_tokens.md``), and elaboration checks every dynamic tile's
            bound against it. The default 8 holds every token of ``examples.moe.hardware()``
            (batch 8), at most 256.
    """

    elem_dtype: str = "int16"
    acc_dtype: str = "int32"
    frac_bits: int = 8
    tile_rows: int = 4
    tile_cols: int = 4
    lanes: int = 16
    queue_depth: int = 3
    mem_port_elems: int = 16
    axi_data_width: int = 64
    axi_addr_width: int = 32
    axi_id_width: int = 4
    max_outstanding: int = 2
    level_bits: int = 3
    axi_ports: int | None = None
    dyn_tile_rows: int = 8

    def __post_init__(self):
        for name in ("elem_dtype", "acc_dtype"):
            value = getattr(self, name)
            if value not in _HW_DTYPES:
                raise ValueError(
                    f"HwConfig.{name} must be one of {', '.join(_HW_DTYPES)}, not {value!r}"
                )
        if DTYPES[self.acc_dtype].nbytes < DTYPES[self.elem_dtype].nbytes:
            raise ValueError(
                f"HwConfig.acc_dtype {self.acc_dtype} is narrower than elem_dtype {self.elem_dtype}"
            )
        for name in ("tile_rows", "tile_cols", "lanes", "queue_depth", "mem_port_elems", "max_outstanding",
                     "level_bits", "axi_addr_width", "axi_id_width", "dyn_tile_rows"):  # fmt: skip
            _positive(name, getattr(self, name))
        if self.axi_ports is not None:
            _positive("axi_ports", self.axi_ports)
        if (
            isinstance(self.frac_bits, bool)
            or not isinstance(self.frac_bits, int)
            or not (0 <= self.frac_bits < self.elem.nbytes * 8)
        ):
            raise ValueError(
                f"HwConfig.frac_bits must be an integer in [0, {self.elem.nbytes * 8}), not {self.frac_bits!r}"
            )
        if self.dyn_tile_rows > _MAX_DYN_ROWS:
            raise ValueError(
                f"HwConfig.dyn_tile_rows must be at most {_MAX_DYN_ROWS}, not {self.dyn_tile_rows!r}"
            )
        if self.axi_data_width not in (32, 64, 128, 256, 512):
            raise ValueError(
                f"HwConfig.axi_data_width must be 32, 64, 128, 256 or 512, not {self.axi_data_width!r}"
            )

    @property
    def elem(self) -> DType:
        return DTYPES[self.elem_dtype]

    @property
    def acc(self) -> DType:
        return DTYPES[self.acc_dtype]

    @property
    def elem_bits(self) -> int:
        return self.elem.nbytes * 8

    @property
    def max_level(self) -> int:
        """The highest stop level a token carries (``step_hw.payload.max_level``)."""
        from .payload import max_level

        return max_level(self.level_bits)
