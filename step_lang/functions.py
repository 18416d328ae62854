"""The function library of Map, Accum, Scan and FlatMap.

Each function is defined once, with three faces that every reader shares:

* ``out_type`` — the output element type rule, raising ``StepTypeError`` through the node's
  ``error`` callback when its inputs do not fit;
* ``flops`` — arithmetic operations per application (the simulator's conventions: matmul ``2MKN``,
  element-wise ops one per output element, ``exp`` 4 and ``silu`` 8 per element, row-wise sum one
  per input element, data movement and address generation 0);
* ``apply`` — the numpy implementation used by the interpreter.

Integer results are range-checked: a value that does not fit the output dtype raises
``StepRuntimeError`` instead of wrapping.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .dims import Dim, dims_equal, product
from .errors import StepRuntimeError, StepTypeError
from .integers import is_integer
from .meta import MetaTile, is_meta, meta_apply
from .types import DType, ElemType, Selector, Tile, bfloat16, dtype, int64

__all__ = [
    "ELEMENT_FLOPS",
    "ROLES",
    "AccumFn",
    "FlatMapFn",
    "MapFn",
    "accum_add",
    "accum_count",
    "accum_max",
    "accum_mul",
    "add",
    "block_row_offsets",
    "cache_read_addr",
    "cache_write_addr",
    "div",
    "exp",
    "expert_addr",
    "last_tile_flags",
    "matmul",
    "matmul_acc",
    "matmul_flops",
    "maximum",
    "mul",
    "retile_cols",
    "retile_row",
    "retile_rows",
    "row_append",
    "row_append_part",
    "row_sum",
    "scalar_op",
    "silu",
    "sub",
    "to_selector",
]

ErrorFn = Callable[[str, str], StepTypeError]

#: What a FlatMap function does, for the timing models (STEP_REFERENCE §5.3): ``"address"``
#: (address and metadata generation: the paper's fixed cycle per output) or ``"movement"``
#: (retiling: free).
ROLES = ("address", "movement")


def checked_cast(value: Any, dt: DType, fn: str) -> np.ndarray:
    """Cast a numpy result to ``dt``, refusing integer overflow (no silent wrap).

    Into an integer dtype, a floating-point result must be finite and integral: NaN, infinities
    and fractions raise ``StepRuntimeError`` instead of being truncated or turned into garbage.
    Into bool, every value must be 0 or 1 (``2`` would become ``True``).
    """
    arr = np.asarray(value)
    if dt.is_integer:
        if arr.size and arr.dtype.kind in "fc":
            finite = np.isfinite(arr)
            if not finite.all():
                bad = arr[~finite].flat[0]
                raise StepRuntimeError(
                    f"function '{fn}': result {bad} is not a finite number; it cannot be cast to {dt}"
                )
            fraction = arr != np.trunc(arr)
            if fraction.any():
                bad = arr[fraction].flat[0]
                raise StepRuntimeError(
                    f"function '{fn}': result {bad} is not an integer; casting it to {dt} would round"
                )
        info = np.iinfo(dt.numpy)
        if arr.size and (arr.min() < info.min or arr.max() > info.max):
            bad = arr.max() if arr.max() > info.max else arr.min()
            raise StepRuntimeError(
                f"function '{fn}': result {bad} does not fit {dt} [{info.min}, {info.max}]"
            )
        return arr.astype(dt.numpy)
    if dt.kind == "bool" and arr.size and arr.dtype.kind != "b":
        flags = (arr == 0) | (arr == 1)
        if not flags.all():
            bad = arr[~flags].flat[0]
            raise StepRuntimeError(
                f"function '{fn}': result {bad} is not 0 or 1; it cannot be cast to bool"
            )
    return arr.astype(dt.numpy)


def _tile(t: ElemType, err: ErrorFn, port: str, fn: str) -> Tile:
    if not isinstance(t, Tile):
        raise err(port, f"function '{fn}' needs a Tile, got {t}")
    return t


def _same_dtype(a: Tile, b: Tile, err: ErrorFn, fn: str) -> DType:
    if a.dtype != b.dtype:
        raise err("in1", f"function '{fn}' needs equal dtypes, got {a.dtype} and {b.dtype}")
    return a.dtype


def broadcast_dim(a: Dim, b: Dim, err: ErrorFn, fn: str, what: str, ta: Tile, tb: Tile) -> Dim:
    """The result extent of a binary function over extents ``a`` and ``b`` (1 broadcasts)."""
    if a == 1:
        return b
    if b == 1:
        return a
    if dims_equal(a, b) is False:
        raise err("in1", f"function '{fn}' cannot broadcast {what} of {ta} and {tb}")
    return a


def _magnitude(a: np.ndarray) -> int:
    """The largest absolute value of an integer array, as a Python int (0 when empty)."""
    return max(int(a.max()), -int(a.min())) if a.size else 0


def _exact(bound: Callable[..., int], *arrays: np.ndarray) -> tuple[np.ndarray, ...]:
    """``arrays`` ready for integer arithmetic that cannot wrap: in int64 when ``bound`` (of the
    operands' magnitudes) shows every intermediate fits it, else as Python ints (object arrays),
    so that ``checked_cast`` sees the true result and range-checks it. Floating-point arrays
    are returned as they are."""
    if not all(a.dtype.kind in "iub" for a in arrays):
        return arrays
    fits = bound(*(_magnitude(a) for a in arrays)) < 2**63
    return tuple(a.astype(np.int64 if fits else object) for a in arrays)


def _pair_bound(x: int, y: int) -> int:
    """Bounds ``x + y``, ``x - y``, ``x * y`` and ``max`` of operands of magnitudes ``x``, ``y``."""
    return (x + 1) * (y + 1)


def _meta(name: str, kind: str | None, out_type: ElemType, *values: Any) -> Any:
    if kind is None:
        raise StepRuntimeError(f"function '{name}' needs real values; it has no shape-only model")
    return meta_apply(kind, out_type.dtype.numpy if isinstance(out_type, Tile) else None, *values)


def _dot(a: np.ndarray, b: np.ndarray, acc: np.ndarray | None = None) -> np.ndarray:
    """Matrix product (plus ``acc``) whose every output element sums over K in order, whatever
    the row count.

    BLAS picks kernels by matrix shape, so the same row could round differently inside a 16-row
    and a 5-row tile; einsum's plain loops make tiling choices invisible in the results. Integers
    are summed exactly (:func:`_exact`); bfloat16, which einsum does not take, is multiplied and
    summed in float32 (the hardware's rounding is ``step_lang.numerics``).
    """
    if a.dtype.kind in "iub" and b.dtype.kind in "iub":
        k = a.shape[1]
        a, b = _exact(lambda x, y: k * x * y, a, b)
        product = a @ b
    else:
        if bfloat16.name in (a.dtype.name, b.dtype.name):  # by name: ml_dtypes loads only for it
            a, b = a.astype(np.float32), b.astype(np.float32)
        product = np.einsum("ik,kj->ij", a, b)
    if acc is None:
        return product
    acc, product = _exact(_pair_bound, acc, product)
    return acc + product


# ---------------------------------------------------------------------------------------------
# Map functions


@dataclass(frozen=True)
class MapFn:
    """A function applied to each element (or each tuple of zipped elements) by Map and Scan."""

    name: str
    arity: int
    _type: Callable[..., ElemType] = field(repr=False)
    _flops: Callable[..., Dim] = field(repr=False)
    _apply: Callable[..., Any] = field(repr=False)
    params: tuple = ()
    meta: str | None = None  # shape rule for MetaTile inputs (step_lang.meta.meta_apply)

    def out_type(self, err: ErrorFn, *in_types: ElemType) -> ElemType:
        if len(in_types) != self.arity:
            raise err(
                None, f"function '{self.name}' takes {self.arity} input(s), got {len(in_types)}"
            )
        return self._type(err, *in_types)

    def flops(self, *in_types: ElemType) -> Dim:
        return self._flops(*in_types)

    def apply(self, out_type: ElemType, *values: Any) -> Any:
        if is_meta(*values):
            return _meta(self.name, self.meta, out_type, *values)
        return self._apply(out_type, *values)

    def __str__(self) -> str:
        return self.name + (f"{self.params}" if self.params else "")


def _broadcastable(name: str, a: np.ndarray, b: np.ndarray) -> None:
    """Tiles of dynamic extents meet at run time: each extent equal, or one of them 1."""
    if any(x != y and 1 not in (x, y) for x, y in zip(a.shape, b.shape, strict=True)):
        raise StepRuntimeError(
            f"function '{name}': tiles of {a.shape[0]}x{a.shape[1]} and {b.shape[0]}x{b.shape[1]} "
            "do not broadcast (each extent equal, or one of them 1)"
        )


def _elementwise(name: str, op: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> MapFn:
    def type_rule(err: ErrorFn, a: ElemType, b: ElemType) -> ElemType:
        ta, tb = _tile(a, err, "in0", name), _tile(b, err, "in1", name)
        dt = _same_dtype(ta, tb, err, name)
        rows = broadcast_dim(ta.rows, tb.rows, err, name, "rows", ta, tb)
        cols = broadcast_dim(ta.cols, tb.cols, err, name, "columns", ta, tb)
        return Tile(dt, rows, cols)

    def apply(out: Tile, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        _broadcastable(name, a, b)
        a, b = _exact(_pair_bound, a, b)
        if out.dtype.is_integer and name == "div":
            if np.any(b == 0):
                raise StepRuntimeError("function 'div': integer division by zero")
            quotient = abs(a) // abs(b)  # exact, rounded toward zero as C's
            return checked_cast(np.where((a < 0) != (b < 0), -quotient, quotient), out.dtype, name)
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            return checked_cast(op(a, b), out.dtype, name)

    def flops(a: Tile, b: Tile) -> Dim:
        return product((a.rows if a.rows != 1 else b.rows, a.cols if a.cols != 1 else b.cols))

    return MapFn(name, 2, type_rule, flops, apply, meta="broadcast")


add = _elementwise("add", np.add)
sub = _elementwise("sub", np.subtract)
mul = _elementwise("mul", np.multiply)
div = _elementwise("div", np.divide)
maximum = _elementwise("max", np.maximum)


#: FLOPs per element of the element-wise functions that are not one operation (reference §5.3;
#: every function set's ``exp``, ``silu``, ``recip``, ``row_sum`` and conversions reads these).
ELEMENT_FLOPS = {"exp": 4, "silu": 8, "recip": 1, "row_sum": 1, "to_bf16": 0, "to_f32": 0}


def matmul_flops(m: Dim, k: Dim, n: Dim) -> Dim:
    """FLOPs of an ``m x k`` by ``k x n`` matmul: ``2MKN`` (the accumulate's adds not counted)."""
    return 2 * product((m, k, n))


def _float_unary(name: str, per_elem: int, op: Callable[[np.ndarray], np.ndarray]) -> MapFn:
    def type_rule(err: ErrorFn, a: ElemType) -> ElemType:
        t = _tile(a, err, "in0", name)
        if not t.dtype.is_float:
            raise err("in0", f"function '{name}' needs a float tile, got {t}")
        return t

    def apply(out: Tile, a: np.ndarray) -> np.ndarray:
        with np.errstate(over="ignore"):
            return checked_cast(op(a), out.dtype, name)

    return MapFn(name, 1, type_rule, lambda a: per_elem * a.elements, apply, meta="same")


exp = _float_unary("exp", ELEMENT_FLOPS["exp"], np.exp)
silu = _float_unary("silu", ELEMENT_FLOPS["silu"], lambda x: x / (1.0 + np.exp(-x)))


def _row_sum_type(err: ErrorFn, a: ElemType) -> ElemType:
    t = _tile(a, err, "in0", "row_sum")
    return Tile(t.dtype, t.rows, 1)


row_sum = MapFn(
    "row_sum",
    1,
    _row_sum_type,
    lambda a: a.elements,
    lambda out, a: checked_cast(
        _exact(lambda x: a.shape[1] * x, a)[0].sum(axis=1, keepdims=True), out.dtype, "row_sum"
    ),
    meta="rowsum",
)


def matmul(transpose_b: bool = False, out_dtype: DType | str | None = None) -> MapFn:
    """``a @ b`` (or ``a @ b.T``) of an ``[M,K]`` tile and a ``[K,N]`` (``[N,K]``) tile.

    ``out_dtype`` defaults to the inputs' dtype; integer products are summed in int64 and
    range-checked against it.
    """
    if not isinstance(transpose_b, (bool, np.bool_)):  # read for truth, "no" would transpose
        raise TypeError(f"function 'matmul': transpose_b must be a bool, not {transpose_b!r}")
    transpose_b = bool(transpose_b)
    odt = dtype(out_dtype) if out_dtype is not None else None
    name = "matmul_t" if transpose_b else "matmul"

    def type_rule(err: ErrorFn, a: ElemType, b: ElemType) -> ElemType:
        ta, tb = _tile(a, err, "in0", name), _tile(b, err, "in1", name)
        dt = _same_dtype(ta, tb, err, name)
        k_b, n = (tb.cols, tb.rows) if transpose_b else (tb.rows, tb.cols)
        if dims_equal(ta.cols, k_b) is False:
            raise err("in1", f"function '{name}' needs matching inner dims, got {ta} and {tb}")
        return Tile(odt or dt, ta.rows, n)

    def apply(out: Tile, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        bb = b.T if transpose_b else b
        if a.shape[1] != bb.shape[0]:
            raise StepRuntimeError(f"function '{name}': inner dims differ, {a.shape} @ {bb.shape}")
        return checked_cast(_dot(a, bb), out.dtype, name)

    def flops(a: Tile, b: Tile) -> Dim:
        return matmul_flops(a.rows, a.cols, b.rows if transpose_b else b.cols)

    return MapFn(
        name,
        2,
        type_rule,
        flops,
        apply,
        (("transpose_b", transpose_b),),
        meta="matmul_t" if transpose_b else "matmul",
    )


def _check_int(fn: str, what: str, value: Any, low: int) -> int:
    """A parameter of a function: an integer (not a bool, not a float) of at least ``low``,
    returned as a Python ``int`` (a numpy integer's arithmetic would wrap at its width)."""
    if not is_integer(value):
        raise TypeError(f"function '{fn}': {what} must be an integer, not {value!r}")
    if value < low:
        raise ValueError(f"function '{fn}': {what} must be at least {low}, not {value!r}")
    return int(value)


def to_selector(n: int) -> MapFn:
    """A ``[1, n]`` tile to an ``n``-way multi-hot selector (non-zero entries are set)."""
    n = _check_int("to_selector", "n", n, 1)

    def type_rule(err: ErrorFn, a: ElemType) -> ElemType:
        t = _tile(a, err, "in0", "to_selector")
        if t.rows != 1 or dims_equal(t.cols, n) is False:
            raise err("in0", f"function 'to_selector' needs a [1, {n}] tile, got {t}")
        return Selector(n)

    return MapFn(
        "to_selector",
        1,
        type_rule,
        lambda a: 0,
        lambda out, a: np.asarray(a).reshape(-1) != 0,
        (("n", n),),
    )


def _scalar_tile(err: ErrorFn, t: ElemType, port: str, fn: str) -> Tile:
    t = _tile(t, err, port, fn)
    if t.rows != 1 or t.cols != 1 or not t.dtype.is_integer:
        raise err(port, f"function '{fn}' needs a [1,1] integer tile, got {t}")
    return t


_SCALAR_OPS: dict[str, Callable[[int, int], int]] = {
    "add": lambda x, c: x + c,
    "sub": lambda x, c: x - c,
    "mul": lambda x, c: x * c,
    "ceil_div": lambda x, c: -(-x // c),
    "mod": lambda x, c: x % c,
}


def scalar_op(op: str, const: int) -> MapFn:
    """Integer arithmetic on ``[1,1]`` metadata tiles: ``add``, ``sub``, ``mul``, ``ceil_div``, ``mod``."""
    if op not in _SCALAR_OPS:
        raise ValueError(f"scalar_op must be one of {sorted(_SCALAR_OPS)}, not {op!r}")
    f = _SCALAR_OPS[op]
    name = f"scalar_{op}"
    # An integer constant: a float would be truncated (``mul`` by 2.5 multiplying by 2).
    if not is_integer(const):
        raise TypeError(f"function '{name}': constant must be an integer, not {const!r}")
    const = int(const)  # a numpy integer's arithmetic would wrap at its width
    if op in ("mod", "ceil_div") and const == 0:
        raise ValueError(f"function '{name}': constant must be non-zero (it divides), not 0")

    def type_rule(err: ErrorFn, a: ElemType) -> ElemType:
        return _scalar_tile(err, a, "in0", name)

    def apply(out: Tile, a: np.ndarray) -> np.ndarray:
        return checked_cast(np.array([[f(int(a[0, 0]), const)]]), out.dtype, name)

    return MapFn(name, 1, type_rule, lambda a: 0, apply, ((op, const),))


def cache_write_addr(row_offset: int) -> MapFn:
    """KV-cache write address: ``idx * row_offset + tiles - 1`` from ``[1,1]`` idx and tile count."""
    row_offset = _check_int("cache_write_addr", "row_offset", row_offset, 1)

    def type_rule(err: ErrorFn, idx: ElemType, tiles: ElemType) -> ElemType:
        _scalar_tile(err, tiles, "in1", "cache_write_addr")
        return _scalar_tile(err, idx, "in0", "cache_write_addr")

    def apply(out: Tile, idx: np.ndarray, tiles: np.ndarray) -> np.ndarray:
        return checked_cast(
            np.array([[int(idx[0, 0]) * row_offset + int(tiles[0, 0]) - 1]]),
            out.dtype,
            "cache_write_addr",
        )

    return MapFn(
        "cache_write_addr", 2, type_rule, lambda a, b: 0, apply, (("row_offset", row_offset),)
    )


def _row_append_type(err: ErrorFn, tile: ElemType, row: ElemType, offset: ElemType) -> ElemType:
    t = _tile(tile, err, "in0", "row_append")
    r = _tile(row, err, "in1", "row_append")
    _scalar_tile(err, offset, "in2", "row_append")
    if r.rows != 1 or dims_equal(r.cols, t.cols) is False or r.dtype != t.dtype:
        raise err("in1", f"function 'row_append' needs a [1, {t.cols}] {t.dtype} row, got {r}")
    return t


def _row_append(out: Tile, tile: np.ndarray, row: np.ndarray, offset: np.ndarray) -> np.ndarray:
    k = int(offset[0, 0])
    if not 0 <= k < tile.shape[0]:
        raise StepRuntimeError(
            f"function 'row_append': row offset {k} outside a tile of {tile.shape[0]} rows"
        )
    if row.shape[1] != tile.shape[1]:
        raise StepRuntimeError(
            f"function 'row_append': row of {row.shape[1]} columns into a tile of "
            f"{tile.shape[1]} columns"
        )
    res = np.array(tile, copy=True)
    res[k] = row[0]
    return res


row_append = MapFn("row_append", 3, _row_append_type, lambda *a: 0, _row_append, meta="same")


def _row_append_part(
    out: Tile, tile: np.ndarray, row: np.ndarray, offset: np.ndarray
) -> np.ndarray:
    k = int(offset[0, 0])
    if not 0 <= k < tile.shape[0]:
        return np.array(tile, copy=True)
    return _row_append(out, tile, row, offset)


row_append_part = MapFn(
    "row_append_part", 3, _row_append_type, lambda *a: 0, _row_append_part, meta="same"
)
"""``row_append`` on one hardware tile of a big tile (:mod:`step_lang.hier_tiling`): the row
is written at ``offset`` when ``0 <= offset < rows``; any other offset names a row of another
hardware tile, and the tile passes unchanged."""


def block_row_offsets(rows: int, n_rows: int, n_cols: int) -> FlatMapFn:
    """A row offset ``k`` in a big tile of ``n_rows x n_cols`` hardware tiles of ``rows`` rows
    as ``n_rows * n_cols`` offsets, one per hardware tile in row-major order: ``k - i * rows``
    for the tiles of row block ``i`` (a ``[1,1]`` integer tile in, the same type out)."""
    rows, n_rows, n_cols = (
        _check_int("block_row_offsets", what, v, 1)
        for what, v in (("rows", rows), ("n_rows", n_rows), ("n_cols", n_cols))
    )

    def type_rule(err: ErrorFn, k: ElemType) -> tuple[ElemType, tuple[Dim, ...], Dim]:
        t = _scalar_tile(err, k, "in0", "block_row_offsets")
        return t, (), n_rows * n_cols

    def apply(out: Tile, k: np.ndarray) -> list[Any]:
        v = int(k[0, 0])
        return [
            checked_cast(np.array([[v - i * rows]]), out.dtype, "block_row_offsets")
            for i in range(n_rows)
            for _ in range(n_cols)
        ]

    params = (("rows", rows), ("n_rows", n_rows), ("n_cols", n_cols))
    return FlatMapFn("block_row_offsets", 1, 0, type_rule, apply, params)


# ---------------------------------------------------------------------------------------------
# Accum functions


@dataclass(frozen=True)
class AccumFn:
    """An update ``(acc, *inputs) -> acc`` with an initial value, used by Accum and Scan.

    ``out_type(err, in_types, reduced)`` receives the dims folded into one accumulator (innermost
    last), which sizes higher-order accumulators such as :data:`retile_row`.

    The accumulator may be held in a wider type than the output (the BF16 functions of
    :mod:`step_lang.float_numerics` accumulate in FP32): then ``_emit`` makes the emitted value
    of an accumulator (``emit(out_type, acc)``; Accum calls it once per group, Scan once per
    element). Without it the accumulator is emitted as it is.
    """

    name: str
    arity: int
    _type: Callable[..., ElemType] = field(repr=False)
    _init: Callable[[ElemType, tuple | None], Any] = field(repr=False)
    _update: Callable[..., Any] = field(repr=False)
    _flops: Callable[..., Dim] = field(repr=False)
    params: tuple = ()
    meta: str | None = None  # shape rule of an update with MetaTile inputs
    _emit: Callable[[ElemType, Any], Any] | None = field(default=None, repr=False, kw_only=True)

    def out_type(
        self, err: ErrorFn, in_types: tuple[ElemType, ...], reduced: tuple[Dim, ...]
    ) -> ElemType:
        if len(in_types) != self.arity:
            raise err(
                None, f"function '{self.name}' takes {self.arity} input(s), got {len(in_types)}"
            )
        return self._type(err, in_types, reduced)

    def init(self, out_type: ElemType, first: tuple | None = None) -> Any:
        """The initial accumulator; ``first`` (the group's first inputs, if any) sizes dynamic tiles."""
        if first is not None and is_meta(*first) and self.meta != "ignores_values":
            if self.meta is None:
                raise StepRuntimeError(
                    f"function '{self.name}' needs real values; it has no shape-only model"
                )
            if self.meta == "concat_rows":
                return MetaTile((0, first[0].shape[1]), out_type.dtype.numpy)
            return meta_apply(self.meta, out_type.dtype.numpy, *first)
        return self._init(out_type, first)

    def update(self, out_type: ElemType, acc: Any, *values: Any) -> Any:
        if is_meta(acc, *values) and self.meta != "ignores_values":
            if self.meta == "concat_rows":
                return meta_apply("concat_rows", out_type.dtype.numpy, acc, *values)
            return _meta(self.name, self.meta, out_type, *values)
        return self._update(out_type, acc, *values)

    def emit(self, out_type: ElemType, acc: Any) -> Any:
        """The value Accum and Scan emit for the accumulator ``acc``."""
        if self._emit is None:
            return acc
        if is_meta(acc):
            return MetaTile(acc.shape, out_type.dtype.numpy)
        return self._emit(out_type, acc)

    def flops(self, *in_types: ElemType) -> Dim:
        return self._flops(*in_types)

    def __str__(self) -> str:
        return self.name + (f"{self.params}" if self.params else "")


def _zeros(t: ElemType, fn: str, fill: float = 0, like: np.ndarray | None = None) -> np.ndarray:
    if like is not None:
        return np.full(np.shape(like), fill, dtype=t.dtype.numpy)
    if not isinstance(t, Tile) or not t.is_static:
        raise StepRuntimeError(
            f"function '{fn}': cannot build an initial value for an empty group of {t} (dynamic shape)"
        )
    return np.full((t.rows, t.cols), fill, dtype=t.dtype.numpy)


def _fold(
    name: str,
    op: Callable[[np.ndarray, np.ndarray], np.ndarray],
    init: Callable[[Tile], np.ndarray],
) -> AccumFn:
    def type_rule(
        err: ErrorFn, in_types: tuple[ElemType, ...], reduced: tuple[Dim, ...]
    ) -> ElemType:
        return _tile(in_types[0], err, "in0", name)

    def update(out: Tile, acc: np.ndarray, x: np.ndarray) -> np.ndarray:
        if acc.shape != x.shape:
            raise StepRuntimeError(
                f"function '{name}': accumulator {acc.shape} and element {x.shape} differ"
            )
        return checked_cast(op(*_exact(_pair_bound, acc, x)), out.dtype, name)

    return AccumFn(name, 1, type_rule, init, update, lambda a: a.elements, meta="same")


def _first(first: tuple | None) -> np.ndarray | None:
    return None if first is None else first[0]


def _min_value(t: Tile, first: tuple | None) -> np.ndarray:
    low = np.iinfo(t.dtype.numpy).min if t.dtype.is_integer else -np.inf
    return _zeros(t, "accum_max", low, _first(first))


accum_add = _fold("accum_add", np.add, lambda t, f: _zeros(t, "accum_add", 0, _first(f)))
accum_mul = _fold("accum_mul", np.multiply, lambda t, f: _zeros(t, "accum_mul", 1, _first(f)))
accum_max = _fold("accum_max", np.maximum, _min_value)


def matmul_acc(transpose_b: bool = False, out_dtype: DType | str | None = None) -> AccumFn:
    """``acc += a @ b`` (or ``a @ b.T``): the fused Map+Accum of a K-tiled matmul."""
    mm = matmul(transpose_b, out_dtype)

    def type_rule(
        err: ErrorFn, in_types: tuple[ElemType, ...], reduced: tuple[Dim, ...]
    ) -> ElemType:
        return mm.out_type(err, *in_types)

    def update(out: Tile, acc: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        bb = b.T if transpose_b else b
        if a.shape[1] != bb.shape[0]:
            raise StepRuntimeError(
                f"function '{mm.name}_acc': inner dims differ, {a.shape} @ {bb.shape}"
            )
        return checked_cast(_dot(a, bb, acc), out.dtype, mm.name + "_acc")

    def init(t: Tile, first: tuple | None) -> np.ndarray:
        if first is None:
            return _zeros(t, mm.name + "_acc")
        a, b = first
        n = b.shape[0] if transpose_b else b.shape[1]
        return np.zeros((a.shape[0], n), dtype=t.dtype.numpy)

    return AccumFn(mm.name + "_acc", 2, type_rule, init, update, mm.flops, mm.params, meta=mm.meta)


def _retile_type(
    err: ErrorFn, in_types: tuple[ElemType, ...], reduced: tuple[Dim, ...]
) -> ElemType:
    t = _tile(in_types[0], err, "in0", "retile_row")
    return Tile(t.dtype, product((t.rows, *reduced)), t.cols)


def _retile_init(t: ElemType, first: tuple | None) -> Any:
    if first is not None:
        return np.zeros((0, np.shape(first[0])[1]), dtype=t.dtype.numpy)
    if not isinstance(t, Tile) or not isinstance(t.cols, int):
        raise StepRuntimeError(
            f"function 'retile_row': cannot start an empty {t} (dynamic columns)"
        )
    return np.zeros((0, t.cols), dtype=t.dtype.numpy)  # an empty group yields a 0-row tile


def _retile_update(out: Tile, acc: np.ndarray, x: np.ndarray) -> np.ndarray:
    if x.shape[1] != acc.shape[1]:
        raise StepRuntimeError(
            f"function 'retile_row': row of {x.shape[1]} columns into a {acc.shape[1]}-column tile"
        )
    return np.concatenate([acc, x.astype(acc.dtype)], axis=0)


retile_row = AccumFn(
    "retile_row", 1, _retile_type, _retile_init, _retile_update, lambda a: 0, meta="concat_rows"
)
"""Concatenate tiles vertically into one tile whose rows are the sum of the inputs' rows."""


def _count_type(err: ErrorFn, in_types: tuple[ElemType, ...], reduced: tuple[Dim, ...]) -> ElemType:
    return Tile(int64, 1, 1)


accum_count = AccumFn(
    "count",
    1,
    _count_type,
    lambda t, first: np.zeros((1, 1), dtype=np.int64),
    lambda out, acc, x: acc + 1,
    lambda a: 0,
    meta="ignores_values",
)
"""Count the elements of each group: one ``[1,1]`` int64 token per group (a completion signal)."""


# ---------------------------------------------------------------------------------------------
# FlatMap functions


@dataclass(frozen=True)
class FlatMapFn:
    """A function from one element (or zipped tuple) to a rank-``rank`` sub-stream.

    ``out_type(err, *in_types)`` returns ``(elem_type, inner_shape, count)``: the sub-stream's
    element type, its ``rank`` inner dims, and how many rank-``rank`` sub-tensors one element
    produces. ``apply`` returns those sub-tensors as nested lists.
    """

    name: str
    arity: int
    rank: int
    _type: Callable[..., tuple[ElemType, tuple[Dim, ...], Dim]] = field(repr=False)
    _apply: Callable[..., list[Any]] = field(repr=False)
    params: tuple = ()
    meta: str | None = None
    #: ``pieces(p)``: the same function emitting each ``[R, C]`` tile as ``p`` tiles of
    #: ``[R, C / p]``, left to right (hierarchical tiling splits a FlatMap with it); ``None``:
    #: the function has no such form.
    pieces: Callable[[int], FlatMapFn] | None = field(default=None, repr=False, compare=False)
    role: str = field(default="address", kw_only=True)  # one of ROLES

    def __post_init__(self):
        if self.role not in ROLES:
            raise ValueError(
                f"function '{self.name}': role must be one of {', '.join(ROLES)}, not {self.role!r}"
            )

    def out_type(self, err: ErrorFn, *in_types: ElemType) -> tuple[ElemType, tuple[Dim, ...], Dim]:
        if len(in_types) != self.arity:
            raise err(
                None, f"function '{self.name}' takes {self.arity} input(s), got {len(in_types)}"
            )
        return self._type(err, *in_types)

    def apply(self, out_type: ElemType, *values: Any) -> list[Any]:
        if is_meta(*values):
            return _meta(self.name, self.meta, out_type, *values)
        return self._apply(out_type, *values)

    def __str__(self) -> str:
        return self.name + (f"{self.params}" if self.params else "")


def _retile_rows_type(err: ErrorFn, a: ElemType) -> tuple[ElemType, tuple[Dim, ...], Dim]:
    t = _tile(a, err, "in0", "retile_rows")
    return Tile(t.dtype, 1, t.cols), (), t.rows


def _retile_cols_type(err: ErrorFn, a: ElemType) -> tuple[ElemType, tuple[Dim, ...], Dim]:
    t = _tile(a, err, "in0", "retile_cols")
    return Tile(t.dtype, t.rows, 1), (), t.cols


retile_rows = FlatMapFn(
    "retile_rows",
    1,
    0,
    _retile_rows_type,
    lambda out, a: [a[i : i + 1] for i in range(a.shape[0])],
    meta="split_rows",
    role="movement",
)
retile_cols = FlatMapFn(
    "retile_cols",
    1,
    0,
    _retile_cols_type,
    lambda out, a: [a[:, j : j + 1] for j in range(a.shape[1])],
    meta="split_cols",
    role="movement",
)


def _retile_rows_masked_type(
    err: ErrorFn, a: ElemType, mask: ElemType
) -> tuple[ElemType, tuple[Dim, ...], Dim]:
    t = _tile(a, err, "in0", "retile_rows_masked")
    m = _tile(mask, err, "in1", "retile_rows_masked")
    if m.cols != 1 or dims_equal(m.rows, t.rows) is False:
        raise err(
            "in1", f"function 'retile_rows_masked' needs a [{t.rows}, 1] padding mask, got {m}"
        )
    return Tile(t.dtype, 1, t.cols), (), None  # count is data-dependent


def _retile_rows_masked(out: Tile, a: np.ndarray, mask: np.ndarray) -> list[Any]:
    if mask.shape[0] != a.shape[0]:
        raise StepRuntimeError(
            f"function 'retile_rows_masked': mask has {mask.shape[0]} rows, tile {a.shape[0]}"
        )
    return [a[i : i + 1] for i in range(a.shape[0]) if not mask[i, 0]]


retile_rows_masked = FlatMapFn(
    "retile_rows_masked",
    2,
    0,
    _retile_rows_masked_type,
    _retile_rows_masked,
    meta="split_rows_masked",
    role="movement",
)
"""Split a tile into rows, dropping the rows whose padding flag is set."""


def expert_addr(
    tiles_per_expert: int, base: int = 0, *, out_dtype: DType | str = int64
) -> FlatMapFn:
    """Tile addresses of the selected expert's weights: ``base + e * tiles_per_expert + j``.

    The input is a one-hot selector; each element yields ``tiles_per_expert`` ``[1,1]``
    ``out_dtype`` tiles (int64; ``step_lang.numerics.expert_addr`` gives the hardware's int32). An
    address that does not fit ``out_dtype`` is an error.
    """
    tiles_per_expert = _check_int("expert_addr", "tiles_per_expert", tiles_per_expert, 1)
    base = _check_int("expert_addr", "base", base, 0)
    dt = dtype(out_dtype)
    lo, hi = (int(v) for v in (np.iinfo(dt.numpy).min, np.iinfo(dt.numpy).max))

    def type_rule(err: ErrorFn, s: ElemType) -> tuple[ElemType, tuple[Dim, ...], Dim]:
        if not isinstance(s, Selector):
            raise err("in0", f"function 'expert_addr' needs a selector, got {s}")
        return Tile(dt, 1, 1), (), tiles_per_expert

    def apply(out: Tile, sel: np.ndarray) -> list[Any]:
        hot = np.flatnonzero(sel)
        if hot.size != 1:
            raise StepRuntimeError(
                f"function 'expert_addr': selector must be one-hot, has {hot.size} bits set"
            )
        first = base + int(hot[0]) * tiles_per_expert
        if not (lo <= first and first + tiles_per_expert - 1 <= hi):
            raise StepRuntimeError(
                f"function 'expert_addr': addresses {first}..{first + tiles_per_expert - 1} "
                f"do not fit {dt} [{lo}, {hi}]"
            )
        return [np.array([[first + j]], dtype=dt.numpy) for j in range(tiles_per_expert)]

    params = (("tiles", tiles_per_expert), ("base", base))
    if dt != int64:
        params += (("out_dtype", dt.name),)
    return FlatMapFn("expert_addr", 1, 0, type_rule, apply, params)


def tile_count(fn: str, port: str, tiles: np.ndarray) -> int:
    """The tile count a ``[1,1]`` tile holds; a negative count is an error, not an empty run."""
    n = int(tiles[0, 0])
    if n < 0:
        raise StepRuntimeError(
            f"function '{fn}': tile count ({port}) must be non-negative, not {n}"
        )
    return n


def cache_read_addr(row_offset: int) -> FlatMapFn:
    """KV-cache tile addresses ``idx * row_offset + j`` for ``j < tiles`` (``[1,1]`` idx and tile
    count; a count above ``row_offset`` or below 0 raises StepRuntimeError)."""
    row_offset = _check_int("cache_read_addr", "row_offset", row_offset, 1)

    def type_rule(
        err: ErrorFn, idx: ElemType, tiles: ElemType
    ) -> tuple[ElemType, tuple[Dim, ...], Dim]:
        _scalar_tile(err, idx, "in0", "cache_read_addr")
        _scalar_tile(err, tiles, "in1", "cache_read_addr")
        return Tile(int64, 1, 1), (), None

    def apply(out: Tile, idx: np.ndarray, tiles: np.ndarray) -> list[Any]:
        i, n = int(idx[0, 0]), tile_count("cache_read_addr", "in1", tiles)
        if n > row_offset:
            raise StepRuntimeError(
                f"function 'cache_read_addr': {n} tiles exceed the row of {row_offset}"
            )
        return [np.array([[i * row_offset + j]], dtype=np.int64) for j in range(n)]

    return FlatMapFn("cache_read_addr", 2, 0, type_rule, apply, (("row_offset", row_offset),))


def _last_tile_type(err: ErrorFn, tiles: ElemType) -> tuple[ElemType, tuple[Dim, ...], Dim]:
    _scalar_tile(err, tiles, "in0", "last_tile_flags")
    return Selector(2), (), None


def _last_tile(out: ElemType, tiles: np.ndarray) -> list[Any]:
    n = tile_count("last_tile_flags", "in0", tiles)
    return [np.array([j != n - 1, j == n - 1]) for j in range(n)]


last_tile_flags = FlatMapFn("last_tile_flags", 1, 0, _last_tile_type, _last_tile)
"""For a tile count ``n``, ``n`` two-way selectors: bit 1 on the last tile, bit 0 on the others
(a negative count raises StepRuntimeError)."""
