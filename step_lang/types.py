"""Element types and stream types.

An element of a stream is a *tile* (a 2-D matrix whose row and column counts may be symbolic), a
*selector* (a multi-hot vector over ``n`` targets, used by routing operators), a *buffer reference*
(a read-only handle to an on-chip buffer made by ``Bufferize``) or a *tuple* of these (made by
``Zip``). A :class:`StreamType` pairs an element type with a shape written outermost-first,
``[D_r, ..., D_0]``; its rank is ``len(shape) - 1``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .dims import Dim, as_dim, product, shape_str

__all__ = [
    "DTYPES",
    "BufferType",
    "DType",
    "ElemType",
    "Selector",
    "StreamType",
    "Tile",
    "TupleType",
    "bfloat16",
    "bool_",
    "dtype",
    "float16",
    "float32",
    "float64",
    "int8",
    "int16",
    "int32",
    "int64",
    "numpy_dtype",
    "uint8",
    "uint32",
    "uint64",
]


@dataclass(frozen=True)
class DType:
    """A scalar data type: its name, its size in bytes and its numpy counterpart."""

    name: str
    nbytes: int
    kind: str  # "int", "uint", "float" or "bool"

    @property
    def numpy(self) -> np.dtype:
        """The numpy dtype used to hold values of this type."""
        if self.name == "bfloat16":
            import ml_dtypes  # loaded when asked for: 0.6 s of every process that imports step_lang

            return np.dtype(ml_dtypes.bfloat16)
        return np.dtype(self.name if self.name != "bool" else np.bool_)

    @property
    def is_float(self) -> bool:
        return self.kind == "float"

    @property
    def is_integer(self) -> bool:
        return self.kind in ("int", "uint")

    def __str__(self) -> str:
        return self.name


int8 = DType("int8", 1, "int")
int16 = DType("int16", 2, "int")
int32 = DType("int32", 4, "int")
int64 = DType("int64", 8, "int")
uint8 = DType("uint8", 1, "uint")
uint32 = DType("uint32", 4, "uint")
uint64 = DType("uint64", 8, "uint")
float16 = DType("float16", 2, "float")
bfloat16 = DType("bfloat16", 2, "float")  # numpy: ml_dtypes.bfloat16
float32 = DType("float32", 4, "float")
float64 = DType("float64", 8, "float")
bool_ = DType("bool", 1, "bool")

_ALL = (int8, int16, int32, int64, uint8, uint32, uint64, float16, bfloat16, float32, float64)
DTYPES: dict[str, DType] = {t.name: t for t in (*_ALL, bool_)}


def numpy_dtype(value: DType | str | np.dtype) -> np.dtype:
    """The numpy dtype that holds values of a :class:`DType` given by itself or its name:
    ``numpy_dtype("bfloat16")`` is ``ml_dtypes.bfloat16``, which ``np.dtype("bfloat16")``
    knows only once ``ml_dtypes`` is imported."""
    return dtype(value).numpy


def dtype(value: DType | str | np.dtype) -> DType:
    """Look up a :class:`DType` by itself, its name or a numpy dtype."""
    if isinstance(value, DType):
        return value
    try:  # np.dtype(None) is float64: None names no dtype
        name = (
            value if isinstance(value, str) else np.dtype(value).name if value is not None else ""
        )
    except TypeError:
        name = ""
    if name not in DTYPES:
        raise ValueError(f"unknown dtype {value!r}; known: {', '.join(DTYPES)}")
    return DTYPES[name]


class ElemType:
    """Base class of stream element types."""

    @property
    def size_bytes(self) -> Dim:  # pragma: no cover - abstract
        raise NotImplementedError


@dataclass(frozen=True)
class Tile(ElemType):
    """A ``rows`` x ``cols`` matrix of ``dtype``; either count may be symbolic (a dynamic tile)."""

    dtype: DType
    rows: Dim
    cols: Dim

    def __post_init__(self):
        object.__setattr__(self, "dtype", dtype(self.dtype))
        object.__setattr__(self, "rows", as_dim(self.rows, what="tile rows"))
        object.__setattr__(self, "cols", as_dim(self.cols, what="tile cols"))

    @property
    def shape(self) -> tuple[Dim, Dim]:
        return (self.rows, self.cols)

    @property
    def elements(self) -> Dim:
        return product(self.shape)

    @property
    def size_bytes(self) -> Dim:
        return product(self.shape) * self.dtype.nbytes

    @property
    def is_static(self) -> bool:
        return isinstance(self.rows, int) and isinstance(self.cols, int)

    def __str__(self) -> str:
        return f"Tile<{self.dtype}, {self.rows}x{self.cols}>"


@dataclass(frozen=True)
class Selector(ElemType):
    """A multi-hot vector over ``n`` targets (one-hot is the special case of one bit set)."""

    n: int

    def __post_init__(self):
        if isinstance(self.n, bool) or not isinstance(self.n, int) or self.n < 1:
            raise ValueError(f"Selector width must be a positive integer, not {self.n!r}")

    @property
    def size_bytes(self) -> Dim:
        return self.n

    def __str__(self) -> str:
        return f"Sel<{self.n}>"


@dataclass(frozen=True)
class BufferType(ElemType):
    """A read-only reference to an on-chip buffer of ``tile`` elements with ``shape`` (outermost first)."""

    tile: ElemType
    shape: tuple[Dim, ...]

    def __post_init__(self):
        object.__setattr__(
            self, "shape", tuple(as_dim(d, what="buffer dimension") for d in self.shape)
        )
        if not self.shape:
            raise ValueError("a buffer has at least one dimension")

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def elements(self) -> Dim:
        return product(self.shape)

    @property
    def size_bytes(self) -> Dim:
        return product(self.shape) * self.tile.size_bytes

    def __str__(self) -> str:
        return f"Buffer<{self.tile}, {shape_str(self.shape)}>"


@dataclass(frozen=True)
class TupleType(ElemType):
    """A tuple of elements, as made by ``Zip``."""

    items: tuple[ElemType, ...]

    @property
    def size_bytes(self) -> Dim:
        total: Dim = 0
        for item in self.items:
            total = total + item.size_bytes
        return total

    def __str__(self) -> str:
        return "(" + ", ".join(str(i) for i in self.items) + ")"


@dataclass(frozen=True)
class StreamType:
    """A stream of ``elem`` with ``shape`` ``[D_r, ..., D_0]``; rank ``r = len(shape) - 1``."""

    elem: ElemType
    shape: tuple[Dim, ...]

    def __post_init__(self):
        if not isinstance(self.elem, ElemType):
            raise TypeError(
                f"StreamType elem must be an element type (Tile, Selector, Buffer, ...), not "
                f"{self.elem!r}"
            )
        if isinstance(self.shape, (str, bytes)) or not isinstance(
            self.shape, (Sequence, np.ndarray)
        ):
            raise TypeError(f"StreamType shape must be a sequence of dims, not {self.shape!r}")
        object.__setattr__(
            self, "shape", tuple(as_dim(d, what="stream dimension") for d in self.shape)
        )
        if not self.shape:
            raise ValueError("a stream shape has at least one entry (the outermost count)")

    @property
    def rank(self) -> int:
        return len(self.shape) - 1

    @property
    def cardinality(self) -> Dim:
        """``||S||``: the number of elements in the stream."""
        return product(self.shape)

    def dim(self, rank: int) -> Dim:
        """The dimension of the given rank, counted from the innermost (rank 0)."""
        return self.shape[len(self.shape) - 1 - rank]

    def __str__(self) -> str:
        return f"Strm<{self.elem}, {shape_str(self.shape)}>"
