"""The hardware's BF16 functions: what the generated floating-point units compute, bit for bit.

:func:`step_lang.numerics.functions` returns this set for a floating-point configuration
(``HwConfig(elem_dtype="bfloat16", acc_dtype="float32")``); a graph built with it runs in the
interpreter with exactly the hardware's results. Tiles hold ``ml_dtypes.bfloat16`` (elements) or
``float32`` (accumulators and matmul results) values; the arithmetic is that of
:mod:`step_lang.floats` (flush-to-zero, round to nearest even, canonical NaN) and, for exp, silu,
reciprocal and division, the approximations of :mod:`step_lang.float_approx`.

Operations (``docs/hardware.md``, "Floating point")
    * ``add``, ``sub``: both operands widened to FP32 (exactly), added in FP32 (RNE), the sum
      rounded to the tiles' dtype (RNE). On BF16 tiles this rounds twice; the result can differ
      from a single BF16 rounding of the exact sum by one ulp in rare ties, and the hardware
      does the same. Size-1 rows or columns broadcast. Tiles of equal dtype, BF16 or FP32.
    * ``mul``: the exact FP32 product of two BF16 tiles, rounded to BF16.
    * ``maximum``: the larger operand, with ``-0 < +0``; subnormal operands count as zeros of
      their sign; a NaN operand gives the canonical NaN. BF16 or FP32.
    * ``row_sum``: per row, ``s = +0; s = s + x[c]`` for ``c = 0, 1, ...`` in FP32, rounded to
      the tile's dtype; an ``[R, 1]`` tile.
    * ``matmul`` (``a @ b``), ``matmul_t`` (``a @ b.T``): BF16 operands; per output,
      ``s = +0; s = s + a[i, k] * b[k, j]`` for ``k = 0 .. K-1``, every product exact in FP32 and
      every sum rounded (RNE) in FP32. The result is FP32 unless ``matmul_out`` narrows it.
    * ``matmul_acc``: the same chain started from the accumulator instead of ``+0``, so a matmul
      whose reduction is split into tiles of ``K`` (Accum over K-tiles) gives exactly the
      unsplit matmul's result. The accumulator is FP32 (initially ``+0``); it is rounded to the
      output dtype when emitted (``matmul_acc_out("bfloat16")``).
    * ``accum_add``: an FP32 accumulator (initially ``+0``) plus each tile widened to FP32,
      rounded to the input's dtype when emitted. ``accum_max``: :func:`maximum` into an
      accumulator that starts at ``-inf``.
    * ``exp``, ``silu``, ``recip``, ``div``: BF16 in, BF16 out, the table-and-interpolation
      approximations of :mod:`step_lang.float_approx` (``docs/bf16_functions.md``: algorithms
      and measured worst-case errors in ulps).
    * ``to_bf16``: an FP32 tile rounded to BF16 (RNE); ``to_f32``: a BF16 tile widened (exact).

Floating-point units do not raise on overflow: a result beyond the largest finite value is an
infinity, as in IEEE 754, so ``overflow="raise"`` is refused for these numerics.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import ml_dtypes
import numpy as np

from . import floats
from .dims import Dim, dims_equal, product
from .errors import StepRuntimeError, StepTypeError
from .functions import ELEMENT_FLOPS, AccumFn, MapFn, broadcast_dim, matmul_flops, retile_row
from .numerics import FLOAT_DTYPES, FunctionSet
from .types import DType, ElemType, Tile, dtype

__all__ = [
    "FloatAccumFn",
    "FloatFunctions",
    "FloatMapFn",
    "fold_identity_bits",
    "functions",
    "max_bits",
    "row_sum_acc",
]

BF16 = np.dtype(ml_dtypes.bfloat16)
ErrorFn = Any
_FLOAT_TILES = FLOAT_DTYPES

#: The value a float Accum/Scan starts from: ``add`` sums from +0 (in FP32), ``max`` from -inf
#: (in the input's dtype).
FOLD_IDENTITY = {"add": 0.0, "max": -np.inf}


def fold_identity_bits(op: str, dtype_name: str) -> int:
    """The IEEE bit pattern of ``FOLD_IDENTITY[op]`` in ``dtype_name`` (a hardware register's
    initial value)."""
    value = np.asarray(FOLD_IDENTITY[op], dtype=dtype(dtype_name).numpy)
    return int(value.view(f"u{value.itemsize}"))


# ---------------------------------------------------------------------------------------------
# Bit patterns


def _f32_bits(x: Any) -> np.ndarray:
    """FP32 bit patterns of a BF16 or FP32 array (BF16 widened exactly)."""
    x = np.asarray(x)
    if x.dtype == BF16:
        return floats.bf16_to_f32(x.view(np.uint16))
    return np.asarray(x, dtype=np.float32).view(np.uint32)


def _from_f32_bits(bits: np.ndarray, dt: DType) -> np.ndarray:
    """An array of ``dt`` (BF16: rounded RNE; FP32: as is) from FP32 bit patterns."""
    bits = np.asarray(bits, dtype=np.uint32)
    if dt.name == "bfloat16":
        return floats.f32_to_bf16(bits).view(BF16)
    return bits.view(np.float32)


def _bf16_bits(x: Any) -> np.ndarray:
    return np.asarray(x, dtype=BF16).view(np.uint16)


def max_bits(a: np.ndarray, b: np.ndarray, width: int) -> np.ndarray:
    """``maximum`` on ``width``-bit (16 or 32) float bit patterns (module docstring)."""
    ut = np.uint16 if width == 16 else np.uint32
    sign = np.uint64(1) << np.uint64(width - 1)
    exp_mask = np.uint64(0x7F80 if width == 16 else 0x7F800000)
    frac_mask = np.uint64(0x007F if width == 16 else 0x007FFFFF)

    def prepare(x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        x = np.asarray(x).astype(np.uint64)
        sub = ((x & exp_mask) == 0) & ((x & frac_mask) != 0)
        x = np.where(sub, x & sign, x)
        nan = ((x & exp_mask) == exp_mask) & ((x & frac_mask) != 0)
        mag = (x & (sign - np.uint64(1))).astype(np.int64)
        key = np.where((x & sign) != 0, -mag - 1, mag)
        return x, nan, key

    xa, nan_a, ka = prepare(a)
    xb, nan_b, kb = prepare(b)
    nan = np.uint64(floats.BF16_NAN if width == 16 else floats.F32_NAN)
    out = np.where(nan_a | nan_b, nan, np.where(ka >= kb, xa, xb))
    return out.astype(ut)


# ---------------------------------------------------------------------------------------------
# Function objects


@dataclass(frozen=True)
class FloatMapFn(MapFn):
    """A :class:`MapFn` with the hardware's floating-point arithmetic (``op``: ``add``, ``sub``,
    ``mul``, ``div``, ``max``, ``exp``, ``silu``, ``recip``, ``row_sum``, ``matmul``,
    ``to_bf16``, ``to_f32``; ``numerics`` the configuration)."""

    op: str = ""
    numerics: Any = None
    transpose_b: bool = False


@dataclass(frozen=True)
class FloatAccumFn(AccumFn):
    """An :class:`AccumFn` with the hardware's floating-point arithmetic (``op``: ``add``,
    ``max``, ``matmul``); the accumulator of ``add`` and ``matmul`` is FP32."""

    op: str = ""
    numerics: Any = None
    transpose_b: bool = False


def _float_tile(t: ElemType, err: ErrorFn, port: str, fn: str, allowed: tuple[str, ...]) -> Tile:
    if not isinstance(t, Tile) or t.dtype.name not in allowed:
        want = " or ".join(allowed)
        raise err(
            port, f"function '{fn}' computes in floating point and needs a {want} tile, got {t}"
        )
    return t


def _binary(nm: Any, op: str, name: str, allowed: tuple[str, ...]) -> FloatMapFn:
    def type_rule(err: ErrorFn, a: ElemType, b: ElemType) -> ElemType:
        ta = _float_tile(a, err, "in0", name, allowed)
        tb = _float_tile(b, err, "in1", name, allowed)
        if ta.dtype != tb.dtype:
            raise err("in1", f"function '{name}' needs equal dtypes, got {ta.dtype} and {tb.dtype}")
        rows = broadcast_dim(ta.rows, tb.rows, err, name, "rows", ta, tb)
        cols = broadcast_dim(ta.cols, tb.cols, err, name, "columns", ta, tb)
        return Tile(ta.dtype, rows, cols)

    def apply(out: Tile, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        a, b = np.broadcast_arrays(np.asarray(a), np.asarray(b))
        if op in ("add", "sub"):
            fb = _f32_bits(b)
            if op == "sub":
                fb = fb ^ np.uint32(0x80000000)
            return _from_f32_bits(floats.add_f32(_f32_bits(a), fb), out.dtype)
        if op == "mul":
            return _from_f32_bits(floats.mul_bf16(_bf16_bits(a), _bf16_bits(b)), out.dtype)
        if op == "max":
            width = out.dtype.nbytes * 8
            ut = np.uint16 if width == 16 else np.uint32
            got = max_bits(np.asarray(a).view(ut), np.asarray(b).view(ut), width)
            return got.view(out.dtype.numpy)
        from . import float_approx

        return float_approx.div_bf16(_bf16_bits(a), _bf16_bits(b)).view(BF16)  # div

    def flops(a: Tile, b: Tile) -> Dim:
        return product((a.rows if a.rows != 1 else b.rows, a.cols if a.cols != 1 else b.cols))

    return FloatMapFn(name, 2, type_rule, flops, apply, nm.params, "broadcast", op, nm)


_UNARY_IN = {
    "exp": ("bfloat16",),
    "silu": ("bfloat16",),
    "recip": ("bfloat16",),
    "row_sum": _FLOAT_TILES,
    "to_bf16": ("float32",),
    "to_f32": ("bfloat16",),
}


def _unary(nm: Any, op: str) -> FloatMapFn:
    per_elem = ELEMENT_FLOPS[op]

    def type_rule(err: ErrorFn, a: ElemType) -> ElemType:
        t = _float_tile(a, err, "in0", op, _UNARY_IN[op])
        if op == "row_sum":
            return Tile(t.dtype, t.rows, 1)
        if op in ("to_bf16", "to_f32"):
            return Tile(dtype("bfloat16" if op == "to_bf16" else "float32"), t.rows, t.cols)
        return t

    def apply(out: Tile, a: np.ndarray) -> np.ndarray:
        a = np.asarray(a)
        if op == "row_sum":
            x = _f32_bits(a)
            s = np.zeros((x.shape[0], 1), dtype=np.uint32)
            for c in range(x.shape[1]):  # left to right, as the hardware's adder chain
                s = floats.add_f32(s, x[:, c : c + 1])
            return _from_f32_bits(s, out.dtype)
        if op in ("to_bf16", "to_f32"):
            return _from_f32_bits(_f32_bits(a), out.dtype)
        from . import float_approx

        approx = {
            "exp": float_approx.exp_bf16,
            "silu": float_approx.silu_bf16,
            "recip": float_approx.recip_bf16,
        }[op]
        return approx(_bf16_bits(a)).view(BF16)

    meta = "rowsum" if op == "row_sum" else "same"
    return FloatMapFn(
        op, 1, type_rule, lambda a: per_elem * a.elements, apply, nm.params, meta, op, nm
    )


def matmul_bits(a: np.ndarray, b: np.ndarray, acc: np.ndarray | None = None) -> np.ndarray:
    """FP32 bits of ``acc + a @ b`` for BF16 arrays ``a [M, K]``, ``b [K, N]``: per output the
    chain ``s = acc (or +0); s = s + a[i, k] * b[k, j]`` for ``k = 0 .. K-1``."""
    a16, b16 = _bf16_bits(a), _bf16_bits(b)
    m, n = a16.shape[0], b16.shape[1]
    s = np.zeros((m, n), dtype=np.uint32) if acc is None else np.asarray(acc, dtype=np.uint32)
    for k in range(a16.shape[1]):
        s = floats.add_f32(s, floats.mul_bf16(a16[:, k : k + 1], b16[k : k + 1, :]))
    return s


def _matmul(nm: Any, transpose_b: bool, out_dtype: DType | None = None) -> FloatMapFn:
    name = "matmul_t" if transpose_b else "matmul"
    out_dt = out_dtype or dtype("float32")

    def type_rule(err: ErrorFn, a: ElemType, b: ElemType) -> ElemType:
        ta = _float_tile(a, err, "in0", name, ("bfloat16",))
        tb = _float_tile(b, err, "in1", name, ("bfloat16",))
        k_b, n = (tb.cols, tb.rows) if transpose_b else (tb.rows, tb.cols)
        if dims_equal(ta.cols, k_b) is False:
            raise err("in1", f"function '{name}' needs matching inner dims, got {ta} and {tb}")
        return Tile(out_dt, ta.rows, n)

    def apply(out: Tile, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        b = np.asarray(b)
        b = b.T if transpose_b else b
        if np.shape(a)[1] != b.shape[0]:
            raise StepRuntimeError(
                f"function '{name}': inner dims differ, {np.shape(a)} @ {b.shape}"
            )
        return _from_f32_bits(matmul_bits(a, b), out.dtype)

    def flops(a: Tile, b: Tile) -> Dim:
        return matmul_flops(a.rows, a.cols, b.rows if transpose_b else b.cols)

    params = (("transpose_b", transpose_b), *nm.params)
    if out_dtype is not None:
        params = (*params, ("out_dtype", out_dtype.name))
    meta = "matmul_t" if transpose_b else "matmul"
    return FloatMapFn(name, 2, type_rule, flops, apply, params, meta, "matmul", nm, transpose_b)


def _emit_rounded(out: Tile, acc: np.ndarray) -> np.ndarray:
    return _from_f32_bits(np.asarray(acc, dtype=np.float32).view(np.uint32), out.dtype)


def _empty_group(name: str, t: ElemType) -> None:
    if not (isinstance(t, Tile) and t.is_static):
        raise StepRuntimeError(
            f"function '{name}': cannot build an initial value for an empty group of {t} (dynamic shape)"
        )


def _fold(nm: Any, op: str) -> FloatAccumFn:
    name = f"accum_{op}"

    def type_rule(err: ErrorFn, in_types: tuple, reduced: tuple) -> ElemType:
        return _float_tile(in_types[0], err, "in0", name, _FLOAT_TILES)

    def init(t: Tile, first: tuple | None) -> np.ndarray:
        if first is None:
            _empty_group(name, t)
        shape = np.shape(first[0]) if first is not None else (t.rows, t.cols)
        acc_dtype = np.float32 if op == "add" else t.dtype.numpy
        return np.full(shape, FOLD_IDENTITY[op], dtype=acc_dtype)

    def update(out: Tile, acc: np.ndarray, x: np.ndarray) -> np.ndarray:
        if acc.shape != np.shape(x):
            raise StepRuntimeError(
                f"function '{name}': accumulator {acc.shape} and element {np.shape(x)} differ"
            )
        if op == "add":
            return floats.add_f32(_f32_bits(acc), _f32_bits(x)).view(np.float32)
        width = out.dtype.nbytes * 8
        ut = np.uint16 if width == 16 else np.uint32
        return max_bits(acc.view(ut), np.asarray(x).view(ut), width).view(out.dtype.numpy)

    emit = _emit_rounded if op == "add" else None
    return FloatAccumFn(
        name, 1, type_rule, init, update, lambda a: a.elements, nm.params, "same", op, nm,
        _emit=emit,
    )  # fmt: skip


def _matmul_acc(nm: Any, transpose_b: bool, out_dtype: DType | None = None) -> FloatAccumFn:
    mm = _matmul(nm, transpose_b, out_dtype)
    name = mm.name + "_acc"

    def type_rule(err: ErrorFn, in_types: tuple, reduced: tuple) -> ElemType:
        return mm.out_type(err, *in_types)

    def init(t: Tile, first: tuple | None) -> np.ndarray:
        if first is None:
            _empty_group(name, t)
            return np.zeros((t.rows, t.cols), dtype=np.float32)
        a, b = first
        n = np.shape(b)[0] if transpose_b else np.shape(b)[1]
        return np.zeros((np.shape(a)[0], n), dtype=np.float32)

    def update(out: Tile, acc: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        b = np.asarray(b)
        b = b.T if transpose_b else b
        if np.shape(a)[1] != b.shape[0]:
            raise StepRuntimeError(
                f"function '{name}': inner dims differ, {np.shape(a)} @ {b.shape}"
            )
        bits = np.asarray(acc, dtype=np.float32).view(np.uint32)
        return matmul_bits(a, b, bits).view(np.float32)

    return FloatAccumFn(
        name, 2, type_rule, init, update, mm._flops, mm.params, mm.meta, "matmul", nm, transpose_b,
        _emit=_emit_rounded,
    )  # fmt: skip


@functools.cache
def row_sum_acc(nm: Any) -> FloatAccumFn:
    """``row_sum`` continued across tiles (hierarchical tiling splits a ``row_sum`` of a wide
    tile into an Accum of this over its column blocks): per row, the FP32 chain
    ``s = s + x[c]`` started from the accumulator (``+0`` at first), emitted rounded to the
    input's dtype. Over the column blocks of a tile in order it is that tile's ``row_sum``, bit
    for bit. ``op`` ``row_sum`` (the hardware's AccumUnit)."""
    name = "row_sum_acc"

    def type_rule(err: ErrorFn, in_types: tuple, reduced: tuple) -> ElemType:
        t = _float_tile(in_types[0], err, "in0", name, _FLOAT_TILES)
        return Tile(t.dtype, t.rows, 1)

    def init(t: Tile, first: tuple | None) -> np.ndarray:
        if first is None:
            _empty_group(name, t)
        rows = np.shape(first[0])[0] if first is not None else t.rows
        return np.zeros((rows, 1), dtype=np.float32)

    def update(out: Tile, acc: np.ndarray, x: np.ndarray) -> np.ndarray:
        bits = _f32_bits(x)
        s = np.asarray(acc, dtype=np.float32).view(np.uint32)
        if s.shape[0] != bits.shape[0]:
            raise StepRuntimeError(
                f"function '{name}': accumulator of {s.shape[0]} rows and tile {bits.shape} differ"
            )
        for c in range(bits.shape[1]):  # left to right, as row_sum's adder chain
            s = floats.add_f32(s, bits[:, c : c + 1])
        return s.view(np.float32)

    return FloatAccumFn(
        name, 1, type_rule, init, update, lambda a: a.elements, nm.params, "rowsum", "row_sum",
        nm, _emit=_emit_rounded,
    )  # fmt: skip


@dataclass(frozen=True)
class FloatFunctions(FunctionSet):
    """The hardware-exact BF16 function set of one configuration (see :func:`functions`).

    The same names as :class:`step_lang.numerics.FixedPointFunctions` (a graph written against
    one builds with the other), plus the conversions ``to_bf16`` and ``to_f32``.
    """

    numerics: Any
    add: FloatMapFn
    sub: FloatMapFn
    mul: FloatMapFn
    div: FloatMapFn
    maximum: FloatMapFn
    exp: FloatMapFn
    silu: FloatMapFn
    recip: FloatMapFn
    row_sum: FloatMapFn
    matmul: FloatMapFn
    matmul_t: FloatMapFn
    to_bf16: FloatMapFn
    to_f32: FloatMapFn
    accum_add: FloatAccumFn
    accum_max: FloatAccumFn
    matmul_acc: FloatAccumFn
    matmul_t_acc: FloatAccumFn
    retile_row: AccumFn

    def matmul_out(self, out_dtype: DType | str, *, transpose_b: bool = False) -> FloatMapFn:
        """``matmul`` (``matmul_t``) whose FP32 result is rounded to ``out_dtype``."""
        return _matmul(self.numerics, transpose_b, _out_dtype(out_dtype))

    def matmul_acc_out(self, out_dtype: DType | str, *, transpose_b: bool = False) -> FloatAccumFn:
        """``matmul_acc`` (``matmul_t_acc``) emitting its FP32 accumulator as ``out_dtype``."""
        return _matmul_acc(self.numerics, transpose_b, _out_dtype(out_dtype))


def _out_dtype(value: DType | str) -> DType:
    dt = dtype(value)
    if dt.name not in _FLOAT_TILES:
        raise ValueError(f"matmul out_dtype must be bfloat16 or float32, not {dt.name!r}")
    return dt


@functools.cache
def functions(nm: Any) -> FloatFunctions:
    """The BF16 function set of a floating-point :class:`step_lang.numerics.Numerics`."""
    if not nm.is_float:
        raise StepTypeError(f"float_numerics.functions needs floating-point numerics, not {nm}")
    return FloatFunctions(
        numerics=nm,
        add=_binary(nm, "add", "add", _FLOAT_TILES),
        sub=_binary(nm, "sub", "sub", _FLOAT_TILES),
        mul=_binary(nm, "mul", "mul", ("bfloat16",)),
        div=_binary(nm, "div", "div", ("bfloat16",)),
        maximum=_binary(nm, "max", "max", _FLOAT_TILES),
        exp=_unary(nm, "exp"),
        silu=_unary(nm, "silu"),
        recip=_unary(nm, "recip"),
        row_sum=_unary(nm, "row_sum"),
        matmul=_matmul(nm, False),
        matmul_t=_matmul(nm, True),
        to_bf16=_unary(nm, "to_bf16"),
        to_f32=_unary(nm, "to_f32"),
        accum_add=_fold(nm, "add"),
        accum_max=_fold(nm, "max"),
        matmul_acc=_matmul_acc(nm, False),
        matmul_t_acc=_matmul_acc(nm, True),
        retile_row=retile_row,
    )
