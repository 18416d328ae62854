"""`HwConfig`: the one description of the hardware that every block and the simulator's `rtl`
profile read."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from step_lang.numerics import FLOAT_DTYPES, HW_DTYPES
from step_lang.types import DTYPES, DType

__all__ = ["AXI_DATA_WIDTHS", "BF16_CONFIG", "MAX_OUTSTANDING_BURSTS", "HwConfig", "config_for"]

# The number formats are the language's (step_lang.numerics): fixed point, and BF16 elements
# with FP32 accumulators.
_FIXED_DTYPES = HW_DTYPES
_FLOAT_DTYPES = FLOAT_DTYPES  # elements, accumulators
_HW_DTYPES = _FIXED_DTYPES + _FLOAT_DTYPES
_DEFAULT_FRAC_BITS = 8
# Every dynamic tile carries dyn_tile_rows rows in its payload and in every register it passes;
# beyond a few hundred rows a tile is a buffer, not a register (use Bufferize).
_MAX_DYN_ROWS = 256
#: The most AXI bursts a memory controller keeps in flight (``max_outstanding``).
MAX_OUTSTANDING_BURSTS = 256
#: The AXI4 data widths (bits) the controllers build.
AXI_DATA_WIDTHS = (32, 64, 128, 256, 512)


def _positive(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"HwConfig.{name} must be a positive integer, not {value!r}")


def _named_pairs(field: str, names: str, values: str, value: Any) -> list[tuple[Any, Any]]:
    """``HwConfig.<field>``, a mapping (or pairs) of ``names`` to ``values``, as sorted pairs
    whose names are strings."""
    try:
        items = list(value.items()) if isinstance(value, Mapping) else [tuple(p) for p in value]
        table = dict(items)
    except (TypeError, ValueError):
        raise ValueError(
            f"HwConfig.{field} must map {names} names to {values}, not {value!r}"
        ) from None
    for name, _ in items:
        if not isinstance(name, str):
            raise ValueError(f"HwConfig.{field}: {names} names are strings, not {name!r}")
    if len(table) != len(items):
        name = next(n for n in table if [m for m, _ in items].count(n) > 1)
        given = ", ".join(repr(v) for m, v in items if m == name)
        raise ValueError(f"HwConfig.{field} names {names} {name!r} twice ({given})")
    return sorted(table.items())


def _capacities(value: Any) -> tuple[tuple[str, int], ...]:
    """``HwConfig.queue_capacity`` as sorted ``(stream, capacity)`` pairs."""
    pairs = _named_pairs("queue_capacity", "stream", "capacities", value)
    for stream, capacity in pairs:
        _positive(f"queue_capacity[{stream!r}]", capacity)
    return tuple(pairs)


def _bounds(value: Any) -> tuple[tuple[str, tuple[int, ...]], ...]:
    """``HwConfig.geometry_bounds`` as sorted ``(node, extents)`` pairs."""
    out = []
    for node, extents in _named_pairs("geometry_bounds", "node", "extents", value):
        if not isinstance(extents, (tuple, list)) or not extents:
            raise ValueError(
                f"HwConfig.geometry_bounds[{node!r}] must be a non-empty sequence of extents, "
                f"not {extents!r}"
            )
        for e in extents:
            _positive(f"geometry_bounds[{node!r}] extent", e)
        out.append((node, tuple(extents)))
    return tuple(out)


@dataclass(frozen=True)
class HwConfig:
    """Parameters of the generated hardware.

    Attributes:
        elem_dtype: element type of tiles on the datapath: ``int8``, ``int16`` or ``int32``
            (signed; fixed-point with ``frac_bits`` fractional bits), or ``bfloat16``
            (floating point, :mod:`step_lang.float_numerics`).
        acc_dtype: accumulator type of MAC arrays and Accum units: ``int32`` for fixed point,
            ``float32`` for ``bfloat16`` elements.
        frac_bits: fractional bits of the fixed-point format (0: plain integers; default 8).
            Floating point has none (``None`` or 0).
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
        queue_capacity: queues whose depth is a run-time setting, so that one build serves a
            graph at several depth settings (e.g. the defaults and the queue-sizing pass's):
            ``(stream, capacity)`` pairs (a mapping is accepted; stored sorted). Each named
            stream's queue is built to hold up to ``capacity`` payloads and takes its depth,
            ``1..capacity``, from the elaborated graph's ``queue_limits`` input, cycle for cycle
            the queue of that depth (:class:`step_hw.queue.LimitedFIFO`); a run rejects a depth
            above the capacity. Every other queue's depth is built in. Default: none.
        geometry_bounds: nodes whose geometry (a load's or a buffer read's walk, a buffer's
            size, an Accum's held accumulators) is a run-time setting, so that one build serves
            a graph at several tilings: ``(node, extents)`` pairs (a mapping is accepted; stored
            sorted), each node built for the largest extents given and set by the elaborated
            graph's ``geometry`` input, cycle for cycle the block built for its own geometry
            (:mod:`step_hw.run_time_geometry`). Default: none.
    """

    elem_dtype: str = "int16"
    acc_dtype: str = "int32"
    frac_bits: int | None = None
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
    queue_capacity: tuple[tuple[str, int], ...] = ()
    geometry_bounds: tuple[tuple[str, tuple[int, ...]], ...] = ()

    def __post_init__(self):
        object.__setattr__(self, "queue_capacity", _capacities(self.queue_capacity))
        object.__setattr__(self, "geometry_bounds", _bounds(self.geometry_bounds))
        for name in ("elem_dtype", "acc_dtype"):
            value = getattr(self, name)
            if value not in _HW_DTYPES:
                raise ValueError(
                    f"HwConfig.{name} must be one of {', '.join(_HW_DTYPES)}, not {value!r}"
                )
        floating = (self.elem_dtype in _FLOAT_DTYPES, self.acc_dtype in _FLOAT_DTYPES)
        if any(floating) and (self.elem_dtype, self.acc_dtype) != ("bfloat16", "float32"):
            raise ValueError(
                f"HwConfig: floating point is elem_dtype 'bfloat16' with acc_dtype 'float32', "
                f"not {self.elem_dtype!r} with {self.acc_dtype!r}"
            )
        if any(floating):
            if self.frac_bits not in (None, 0) or isinstance(self.frac_bits, bool):
                raise ValueError(
                    f"HwConfig.frac_bits applies to fixed point; bfloat16 has none, "
                    f"not {self.frac_bits!r}"
                )
            object.__setattr__(self, "frac_bits", 0)
        elif self.frac_bits is None:
            object.__setattr__(self, "frac_bits", _DEFAULT_FRAC_BITS)
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
        if self.max_outstanding > MAX_OUTSTANDING_BURSTS:
            raise ValueError(
                f"HwConfig.max_outstanding must be at most {MAX_OUTSTANDING_BURSTS}, "
                f"not {self.max_outstanding!r}"
            )
        if self.dyn_tile_rows > _MAX_DYN_ROWS:
            raise ValueError(
                f"HwConfig.dyn_tile_rows must be at most {_MAX_DYN_ROWS}, not {self.dyn_tile_rows!r}"
            )
        width = self.axi_data_width
        if isinstance(width, bool) or not isinstance(width, int) or width not in AXI_DATA_WIDTHS:
            raise ValueError(
                f"HwConfig.axi_data_width must be 32, 64, 128, 256 or 512, not {self.axi_data_width!r}"
            )

    @property
    def is_float(self) -> bool:
        """Whether the datapath computes in BF16/FP32 floating point."""
        return self.elem_dtype in _FLOAT_DTYPES

    @property
    def float_dtypes(self) -> tuple[str, ...]:
        """The floating-point dtypes the hardware encodes: BF16 and FP32 on a floating-point
        datapath, none on a fixed-point one."""
        return _FLOAT_DTYPES if self.is_float else ()

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


#: The BF16 hardware: BF16 tiles, FP32 accumulators, otherwise the defaults.
BF16_CONFIG = HwConfig(elem_dtype="bfloat16", acc_dtype="float32")


def config_for(graph: Any, base: HwConfig | None = None) -> HwConfig:
    """``base`` (default ``HwConfig()``) with the number format of ``graph``'s hardware
    functions (``step_lang.numerics.functions(...)``): their element and accumulator dtypes
    and fraction bits. A graph without such functions gets ``base``; functions of two
    different formats raise ``ValueError`` naming a node of each."""
    base = base or HwConfig()
    seen: dict[tuple, str] = {}
    for name, node in graph.nodes.items():
        nm = getattr(getattr(node, "fn", None), "numerics", None)
        if nm is not None:
            seen.setdefault((nm.elem_dtype, nm.acc_dtype, nm.frac_bits), name)
    if len(seen) > 1:
        (a, na), (b, nb) = list(seen.items())[:2]
        raise ValueError(
            f"graph '{graph.name}' mixes number formats: node '{na}' computes in {a[0]} "
            f"(acc {a[1]}, {a[2]} fraction bits), node '{nb}' in {b[0]} (acc {b[1]}, "
            f"{b[2]} fraction bits); build every function from one numerics.functions(config)"
        )
    if not seen:
        return base
    ((elem, acc, frac),) = seen
    if (elem, acc) == (base.elem_dtype, base.acc_dtype) and frac == base.frac_bits:
        return base
    floating = elem in _FLOAT_DTYPES
    return replace(base, elem_dtype=elem, acc_dtype=acc, frac_bits=None if floating else frac)
