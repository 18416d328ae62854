"""`HwConfig`: the one description of the hardware that every block and the simulator's `rtl`
profile read."""

from __future__ import annotations

from dataclasses import dataclass

from step_lang.types import DTYPES, DType

__all__ = ["HwConfig"]

_HW_DTYPES = ("int8", "int16", "int32")


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
                     "level_bits", "axi_addr_width", "axi_id_width"):  # fmt: skip
            _positive(name, getattr(self, name))
        if (
            isinstance(self.frac_bits, bool)
            or not isinstance(self.frac_bits, int)
            or not (0 <= self.frac_bits < self.elem.nbytes * 8)
        ):
            raise ValueError(
                f"HwConfig.frac_bits must be an integer in [0, {self.elem.nbytes * 8}), not {self.frac_bits!r}"
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
        return 2**self.level_bits - 1
