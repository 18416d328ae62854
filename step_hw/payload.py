"""The token payload of every hardware stream, and packing shared by all test tiers.

One beat of a stream carries one token, with the separate-token encoding of
``docs/semantics.md``::

    bit 0..1            kind    DATA = 0, STOP = 1, DONE = 2
    bit 2..2+L-1        level   the stop level (STOP beats; 0 otherwise)
    bit 2+L..           data    the element (DATA beats; 0 otherwise)

A tile element is ``rows x cols`` two's-complement values of the element width, row-major from
the least significant bits; a selector is ``n`` bits (bit ``i`` set: target ``i`` selected).

A *dynamic* tile (a step_lang ``Tile`` whose row count is a symbol, such as dynamic tiling's
``[n_e, D]``) has a data field of two parts::

    bit 0..                      elems   HwConfig.dyn_tile_rows x cols elements, as a static tile
    bit R*C*W..R*C*W+B-1         rows    the actual row count n, 0 <= n <= dyn_tile_rows

Rows ``n`` and beyond hold zeros. That keeps the encoding canonical (one payload per token, so
whole payloads compare bit for bit, in queues, checkers and co-simulation) and costs every
producer one multiplexer per row; consumers must still use ``rows``, never the zeros, because an
operation need not map zero to zero (``exp``). :meth:`TokenFormat.unpack` rejects a payload whose
padding rows are not zero. ``n = 0`` is legal: the interpreter's Accum(``retile_row``) of an
empty group is a ``[0, C]`` tile.

Lone STOP beats write empty inner dimensions and the DONE beat ends the stream, so every stream
the language can express has a hardware encoding (STEP_REFERENCE §11, point 1).

:class:`TokenFormat` builds the Amaranth layout (``lib.data.StructLayout``) and the stream
signature, and packs / unpacks tokens to integers, the form the Amaranth simulator and cocotb both
use. It is part of the hardware contract (:mod:`step_hw.contract`): this module imports Amaranth
only when a layout is asked for, so the simulator reads token widths without loading it.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

import numpy as np

from step_lang.errors import StepTypeError
from step_lang.tokens import DONE, Stop, Token
from step_lang.types import ElemType, Selector, Tile, TupleType

from .config import HwConfig

__all__ = [
    "UNSIGNED_HINT",
    "Kind",
    "TileSizeError",
    "TokenFormat",
    "max_level",
    "pack_fields",
    "unpack_fields",
]

#: Why an unsigned dtype is refused: the hardware's integer elements are two's complement, so a
#: ``uint8`` of 200 would travel and come back as -56.
UNSIGNED_HINT = " (the hardware's integers are signed: int8, int16 or int32)"

#: Width of the ``kind`` field.
KIND_BITS = 2


def max_level(level_bits: int) -> int:
    """The highest stop level a ``level_bits``-wide level field holds."""
    return 2**level_bits - 1


# The payload's fields by name, as integers (the form the Amaranth simulator and cocotb use);
# ``step_hw.payload_fields`` builds the same fields as Amaranth values.


def pack_fields(level_bits: int, *, kind: int, level: int = 0, data: int = 0) -> int:
    """The payload bits of the fields ``kind``, ``level`` and ``data`` (already in range)."""
    return int(kind) | level << KIND_BITS | data << (KIND_BITS + level_bits)


def unpack_fields(level_bits: int, bits: int) -> tuple[int, int, int]:
    """The ``(kind, level, data)`` fields of some payload bits."""
    return (
        bits & max_level(KIND_BITS),
        (bits >> KIND_BITS) & max_level(level_bits),
        bits >> (KIND_BITS + level_bits),
    )


def _float_numpy(name: str) -> np.dtype:
    from step_lang.types import dtype

    return dtype(name).numpy


class TileSizeError(StepTypeError):
    """A stream's tile is larger than the configured hardware tile (``HwConfig.tile_rows`` x
    ``tile_cols``); ``step_lang.hier_tiling.hier_tile`` rewrites a graph onto smaller ones."""


class Kind(enum.IntEnum):
    """What a beat carries."""

    DATA = 0
    STOP = 1
    DONE = 2


@dataclass(frozen=True)
class TokenFormat:
    """Payload format of one stream: its element and the stop-level width.

    Use :meth:`for_elem` to derive it from a step_lang element type and a :class:`HwConfig`.
    """

    kind: str  # "tile" or "selector"
    rows: int = 1  # a dynamic tile: the most rows it holds (HwConfig.dyn_tile_rows)
    cols: int = 1
    elem_bits: int = 16
    n: int = 0
    level_bits: int = 3
    dynamic: bool = False  # a tile with a row count field (module docstring)
    #: ``"bfloat16"`` or ``"float32"``: the elements are IEEE bit patterns of that type (packed
    #: and unpacked as such); ``None``: signed integers.
    float_dtype: str | None = None

    @classmethod
    def for_elem(cls, elem: ElemType, config: HwConfig, *, where: str = "stream") -> TokenFormat:
        """The format of a stream of ``elem`` under ``config``; rejects what the hardware lacks."""
        if isinstance(elem, Selector):
            return cls("selector", n=elem.n, level_bits=config.level_bits)
        if isinstance(elem, Tile):
            if not isinstance(elem.cols, int):
                raise StepTypeError(
                    f"{where}: tile {elem} has dynamic columns; hardware tiles have static "
                    "columns (only the row count may be dynamic)"
                )
            dynamic = not isinstance(elem.rows, int)
            if dynamic and elem.cols > config.tile_cols:
                raise TileSizeError(
                    f"{where}: tile {elem} has more than the configured {config.tile_cols} columns"
                )
            if not dynamic and (elem.rows > config.tile_rows or elem.cols > config.tile_cols):
                raise TileSizeError(
                    f"{where}: tile {elem} does not fit the configured {config.tile_rows}x{config.tile_cols} tile"
                )
            floating = elem.dtype.name in config.float_dtypes
            if not floating and (
                elem.dtype.kind not in ("int", "bool")
                or elem.dtype.nbytes * 8 > config.acc.nbytes * 8
            ):
                hint = UNSIGNED_HINT if elem.dtype.kind == "uint" else ""
                raise StepTypeError(
                    f"{where}: dtype {elem.dtype} is not supported by the hardware ({config.elem_dtype}/{config.acc_dtype}){hint}"
                )
            return cls("tile", rows=config.dyn_tile_rows if dynamic else elem.rows, cols=elem.cols,
                       elem_bits=elem.dtype.nbytes * 8 if elem.dtype.kind != "bool" else 1,
                       level_bits=config.level_bits, dynamic=dynamic,
                       float_dtype=elem.dtype.name if floating else None)  # fmt: skip
        hint = (
            " (only shape blocks, a Broadcast, the routers and a Sink move a Zip's tuples, and "
            "only a function of their items, e.g. Map(Zip(a, b), fn=add), reads them)"
            if isinstance(elem, TupleType)
            else ""
        )
        raise StepTypeError(f"{where}: element {elem} has no hardware encoding{hint}")

    # -- Amaranth ---------------------------------------------------------------------------------

    @property
    def data_shape(self):
        from amaranth.hdl import signed, unsigned
        from amaranth.lib import data

        if self.kind == "selector":
            return unsigned(self.n)
        shape = signed(self.elem_bits) if self.elem_bits > 1 else unsigned(1)
        elems = data.ArrayLayout(data.ArrayLayout(shape, self.cols), self.rows)
        if self.dynamic:
            return data.StructLayout({"elems": elems, "rows": unsigned(self.count_bits)})
        return elems

    @property
    def max_level(self) -> int:
        """The highest stop level the format's level field holds."""
        return max_level(self.level_bits)

    @property
    def count_bits(self) -> int:
        """Width of a dynamic tile's ``rows`` field (0 for other formats)."""
        return self.rows.bit_length() if self.dynamic else 0

    def layout(self) -> Any:
        """The payload layout (``amaranth.lib.data.StructLayout``): ``kind``, ``level``, ``data``
        from the least significant bit."""
        from .payload_fields import token_layout

        return token_layout(self.level_bits, data=self.data_shape)

    def signature(self) -> Any:
        """The stream signature (``amaranth.lib.stream.Signature``) of this format."""
        from amaranth.lib import stream

        return stream.Signature(self.layout())

    @property
    def data_bits(self) -> int:
        if self.kind == "selector":
            return self.n
        return self.rows * self.cols * self.elem_bits + self.count_bits

    @property
    def width(self) -> int:
        return KIND_BITS + self.level_bits + self.data_bits

    # -- packing ----------------------------------------------------------------------------------

    def pack(self, token: Token) -> int:
        """The payload bits of one token."""
        if token is DONE:
            return pack_fields(self.level_bits, kind=Kind.DONE)
        if isinstance(token, Stop):
            if token.level > self.max_level:
                raise ValueError(
                    f"stop level {token.level} does not fit {self.level_bits} level bits"
                )
            return pack_fields(self.level_bits, kind=Kind.STOP, level=token.level)
        return pack_fields(self.level_bits, kind=Kind.DATA, data=self._pack_data(token))

    def unpack(self, bits: int) -> Token:
        """The token of some payload bits (data as numpy arrays: int64 tiles, bool selectors)."""
        kind, level, data = unpack_fields(self.level_bits, bits)
        if kind == Kind.DONE:
            return DONE
        if kind == Kind.STOP:
            return Stop(level)
        if kind != Kind.DATA:
            raise ValueError(
                f"payload {bits:#x} has kind {kind}, which is none of DATA, STOP, DONE"
            )
        return self._unpack_data(data)

    def _pack_data(self, value: Any) -> int:
        arr = np.asarray(value)
        if self.kind == "selector":
            if arr.shape != (self.n,):
                raise ValueError(f"selector of shape {arr.shape}, format has {self.n} bits")
            return sum(1 << i for i, b in enumerate(arr) if b)
        n = arr.shape[0] if arr.ndim == 2 else -1
        if self.dynamic:
            if arr.ndim != 2 or arr.shape[1] != self.cols or not 0 <= n <= self.rows:
                raise ValueError(
                    f"tile of shape {arr.shape}, format is a dynamic tile of 0..{self.rows} rows "
                    f"x {self.cols}"
                )
        elif arr.shape != (self.rows, self.cols):
            raise ValueError(f"tile of shape {arr.shape}, format is {self.rows}x{self.cols}")
        w = self.elem_bits
        if self.float_dtype is not None:  # IEEE bit patterns of the declared type
            arr = np.asarray(arr, dtype=_float_numpy(self.float_dtype)).view(f"uint{w}")
        lo, hi = (0, 1) if w == 1 else (-(2 ** (w - 1)), 2 ** (w - 1) - 1)
        if self.float_dtype is not None:
            lo, hi = 0, 2**w - 1
        out = 0
        for i, v in enumerate(arr.reshape(-1).tolist()):
            v = int(v)
            if not lo <= v <= hi:
                raise ValueError(f"value {v} does not fit a {w}-bit element")
            out |= (v & (2**w - 1)) << (i * w)
        if self.dynamic:  # rows n.. stay zero; the count above the elements
            out |= n << (self.rows * self.cols * w)
        return out

    def _unpack_data(self, bits: int) -> np.ndarray:
        if self.kind == "selector":
            return np.array([(bits >> i) & 1 == 1 for i in range(self.n)], dtype=bool)
        w = self.elem_bits
        vals = []
        for i in range(self.rows * self.cols):
            v = (bits >> (i * w)) & (2**w - 1)
            if w > 1 and v >= 2 ** (w - 1) and self.float_dtype is None:
                v -= 2**w
            vals.append(v)
        if self.float_dtype is not None:
            tile = np.array(vals, dtype=f"uint{w}").view(_float_numpy(self.float_dtype))
            tile = tile.reshape(self.rows, self.cols)
        else:
            tile = np.array(vals, dtype=np.int64).reshape(self.rows, self.cols)
        if not self.dynamic:
            return tile
        n = bits >> (self.rows * self.cols * w)
        if n > self.rows:
            raise ValueError(f"dynamic tile with {n} rows, format holds at most {self.rows}")
        if np.any(tile[n:]):
            raise ValueError(f"dynamic tile of {n} rows has non-zero rows beyond its count")
        return tile[:n]
