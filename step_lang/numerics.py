"""Fixed-point functions that compute exactly what the generated hardware computes.

The functions of :mod:`step_lang.functions` compute in int64 or floating point and refuse integer
overflow. The hardware (``step_hw.compute``) computes in two's-complement fixed point; this module
defines that arithmetic once, bit for bit, as :class:`~step_lang.functions.MapFn` and
:class:`~step_lang.functions.AccumFn` objects. A graph built with them runs in the interpreter
with exactly the hardware's results, and the hardware generator builds its datapaths from the
same constants and tables (:data:`EXP2_TABLE`, :func:`recip_table`, :data:`SIGMOID_TABLE`).

Use :func:`functions` to get the set for a configuration::

    nm = numerics.functions(HwConfig(elem_dtype="int16", frac_bits=8))
    y = Map(x, w, fn=nm.matmul)             # int16 x int16 -> int32, Q8
    z = Map(y, fn=nm.silu)

Number format
    A tile element is a signed ``w``-bit integer ``v`` (``w`` = 8, 16 or 32, the tile's dtype)
    that stands for ``v / 2**f`` (``f`` = ``frac_bits``, the same for every dtype; ``f = 0``:
    plain integers). ``MIN = -2**(w-1)``, ``MAX = 2**(w-1) - 1``.

Rounding
    Every right shift that drops fraction bits rounds to nearest, ties towards +infinity:
    ``round_shift(v, s) = (v + 2**(s-1)) >> s`` with ``>>`` the arithmetic (flooring) shift.
    (The hardware computes the same value as ``((v >> (s-1)) + 1) >> 1``.) Division rounds the
    magnitude, so its ties go away from zero.

Overflow policy (``overflow=``)
    ``"wrap"`` (default) models the hardware: the linear operations (``add``, ``sub``, ``mul``,
    ``row_sum``, ``matmul`` and the accumulators) wrap modulo ``2**w``; the approximation units
    (``exp``, ``silu``, ``div``, ``recip``) saturate to ``[MIN, MAX]`` (a wrapped exponential is
    never useful, and a clamp is one comparator). ``"raise"`` computes the same values but raises
    :class:`~step_lang.errors.StepRuntimeError` wherever the hardware would wrap or saturate (and
    on division by zero), to check that a graph never leaves the representable range.

Matmul
    Products of ``w``-bit elements are summed in the ``acc_dtype`` accumulator (int32) modulo
    ``2**32`` (in order-independent modular arithmetic, so the MAC array's schedule does not
    matter), then rescaled from ``2f`` to ``f`` fraction bits with ``round_shift(s, f)``. The result
    has the accumulator dtype unless ``out_dtype`` narrows it (wrapping). Under ``"raise"`` the
    exact sum must fit the accumulator. ``matmul_acc`` adds each rescaled tile product to the
    running accumulator (so K-tiling rounds once per tile, as the hardware does).

Approximations (constants below; ``P = TABLE_BITS``, ``K = SEGMENT_BITS``, ``F = INTERP_BITS``)
    Each uses a table of ``2**K + 1`` integer knots and linear interpolation between neighbours
    on a ``F``-bit position: ``pwl(T, i, u) = T[i] + (((T[i+1] - T[i]) * u) >> F)``.

    * ``exp(x) = 2**n * 2**r``: ``t = x * LOG2E`` (``LOG2E = round(log2(e) * 2**16)``),
      ``n = t >> (f+16)``, ``r`` the ``f+16`` low bits of ``t``, whose top ``K + F`` bits index
      :data:`EXP2_TABLE` (``2**(i/2**K)`` in Q``P``); the mantissa is shifted by ``n + f - P``
      (left exactly, right with ``round_shift``), saturating at ``MAX``. Error bound: below
      ``MAX``, ``|y - exp(x)| <= 1.2e-4 * exp(x) + 0.5 LSB`` (an LSB is ``2**-f``).
    * ``silu(x) = x * sigmoid(x)``: sigmoid of ``|x|`` from :data:`SIGMOID_TABLE` (knots every
      ``8 / 2**K`` on ``[0, 8)``), ``1`` for ``|x| >= 8``, ``1 - s`` for ``x < 0``; then
      ``round_shift(x * s, P)``. Never overflows (``|silu(x)| <= |x|``). Error bound:
      ``|y - silu(x)| <= 3e-3 + 0.5 LSB`` (the largest error, 2.7e-3, sits at the cut-off
      ``x = -8``; elsewhere it is below 1.1e-3).
    * ``div(a, b)``: ``|b|`` is normalised to ``m * 2**e`` with ``m`` in ``[1, 2)`` (leading-one
      detection), ``1/m`` comes from :func:`recip_table` (Q``P'``, ``P' = max(P, f)``), and
      ``|a| * R`` is shifted right by ``P' + e - f`` with ``round_shift``; the sign is applied
      after, then the result saturates. ``b = 0`` gives ``MAX`` (``a >= 0``) or ``MIN``.
      ``recip(x)`` is ``div(1.0, x)`` with an exact ``1.0`` (also when ``1.0`` itself is not
      representable). Error bound: where the quotient is in range,
      ``|y - a/b| <= 3e-4 * |a/b| + 0.5 LSB``.

    The bounds are asserted by ``tests/test_numerics.py`` (exhaustively for int8 and int16).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from .dims import Dim, dims_equal, product
from .errors import StepRuntimeError, StepTypeError
from .functions import (
    ELEMENT_FLOPS,
    AccumFn,
    FlatMapFn,
    MapFn,
    broadcast_dim,
    matmul_flops,
    retile_row,
    tile_count,
)
from .functions import expert_addr as _expert_addr
from .types import DType, ElemType, Tile, dtype

__all__ = [
    "EXP2_TABLE",
    "FLOAT_DTYPES",
    "HW_DTYPES",
    "INTERP_BITS",
    "LOG2E",
    "LOG2E_BITS",
    "OVERFLOW_POLICIES",
    "SEGMENT_BITS",
    "SIGMOID_RANGE_BITS",
    "SIGMOID_TABLE",
    "TABLE_BITS",
    "FixedAccumFn",
    "FixedMapFn",
    "FixedPointFunctions",
    "Numerics",
    "accum_count",
    "cache_read_addr",
    "div_table_bits",
    "expert_addr",
    "functions",
    "is_fixed_point",
    "is_hardware_function",
    "recip_table",
    "round_shift",
]

ErrorFn = Callable[[str, str], StepTypeError]

#: The fixed-point tile dtypes the hardware computes with.
HW_DTYPES = ("int8", "int16", "int32")
#: The floating-point element dtype and its accumulator (``step_lang.float_numerics``).
FLOAT_DTYPES = ("bfloat16", "float32")
#: The values of ``overflow=``.
OVERFLOW_POLICIES = ("wrap", "raise")

TABLE_BITS = 16  # P: fraction bits of table knots
SEGMENT_BITS = 5  # K: 2**K segments per table
INTERP_BITS = 10  # F: bits of the position inside a segment
LOG2E_BITS = 16
LOG2E = math.floor(math.log2(math.e) * 2**LOG2E_BITS + 0.5)
SIGMOID_RANGE_BITS = 3  # sigmoid is tabulated on [0, 2**3)


def _round(v: float) -> int:
    """Round half up (a deterministic rule for building tables)."""
    return math.floor(v + 0.5)


#: ``2**(i / 2**K)`` in Q``P``, ``i = 0 .. 2**K`` (from ``2**P`` to ``2**(P+1)``).
EXP2_TABLE: tuple[int, ...] = tuple(
    _round(2**TABLE_BITS * 2 ** (i / 2**SEGMENT_BITS)) for i in range(2**SEGMENT_BITS + 1)
)
#: ``sigmoid(i * 8 / 2**K)`` in Q``P``, ``i = 0 .. 2**K``.
SIGMOID_TABLE: tuple[int, ...] = tuple(
    _round(2**TABLE_BITS / (1 + math.exp(-i * 2**SIGMOID_RANGE_BITS / 2**SEGMENT_BITS)))
    for i in range(2**SEGMENT_BITS + 1)
)


def div_table_bits(frac_bits: int) -> int:
    """Fraction bits ``P'`` of the reciprocal table for ``frac_bits`` (at least ``TABLE_BITS``)."""
    return max(TABLE_BITS, frac_bits)


@functools.cache
def recip_table(bits: int) -> tuple[int, ...]:
    """``1 / (1 + i / 2**K)`` in Q``bits``, ``i = 0 .. 2**K`` (from ``2**bits`` to ``2**(bits-1)``)."""
    return tuple(_round(2**bits / (1 + i / 2**SEGMENT_BITS)) for i in range(2**SEGMENT_BITS + 1))


# ---------------------------------------------------------------------------------------------
# Integer helpers (numpy int64 or object arrays of Python ints; the same formulas as the RTL)


def round_shift(v: Any, s: int) -> Any:
    """``v / 2**s`` rounded to nearest, ties towards +infinity (``s >= 0``, a constant)."""
    if s == 0:
        return v
    return (v + (1 << (s - 1))) >> s


def _round_shift_var(v: np.ndarray, s: np.ndarray) -> np.ndarray:
    """:func:`round_shift` by a per-element shift ``s >= 0``."""
    s = np.asarray(s, dtype=np.int64)
    half = np.where(s > 0, np.left_shift(np.int64(1), np.maximum(s - 1, 0)), 0)
    return (v + half) >> s


def _top_bits(v: np.ndarray, width: int, bits: int) -> np.ndarray:
    """A ``width``-bit unsigned ``v`` rescaled to ``bits`` bits (dropping or appending low bits)."""
    return v >> (width - bits) if width >= bits else v << (bits - width)


def _pwl(table: tuple[int, ...], pos: np.ndarray) -> np.ndarray:
    """Piecewise-linear table lookup at a ``K + F``-bit position."""
    t = np.asarray(table, dtype=np.int64)
    i = pos >> INTERP_BITS
    u = pos & (2**INTERP_BITS - 1)
    return t[i] + (((t[i + 1] - t[i]) * u) >> INTERP_BITS)


def _bounds(bits: int) -> tuple[int, int]:
    return -(2 ** (bits - 1)), 2 ** (bits - 1) - 1


def _exact(a: np.ndarray) -> np.ndarray:
    """int64 for arithmetic on up-to-32-bit values (products fit); bools and uints widen too."""
    return np.asarray(a).astype(np.int64)


# ---------------------------------------------------------------------------------------------
# The configuration


@dataclass(frozen=True)
class Numerics:
    """The fixed-point arithmetic of one hardware configuration.

    Attributes:
        frac_bits: fraction bits ``f`` of every tile element (``0 <= f < 32``; a tile of ``w``
            bits needs ``f < w``).
        elem_dtype: the datapath's element dtype (``int8``, ``int16``, ``int32``); informative,
            the functions take their widths from the tiles.
        acc_dtype: the MAC arrays' accumulator dtype and the default matmul output (``int32``).
        overflow: ``"wrap"`` (the hardware) or ``"raise"`` (see the module docstring).
    """

    frac_bits: int = 0
    elem_dtype: str = "int16"
    acc_dtype: str = "int32"
    overflow: str = "wrap"

    def __post_init__(self):
        for name in ("elem_dtype", "acc_dtype"):
            value = getattr(self, name)
            value = value.name if isinstance(value, DType) else value
            if value not in HW_DTYPES + FLOAT_DTYPES:
                raise ValueError(
                    f"Numerics.{name} must be one of {', '.join(HW_DTYPES + FLOAT_DTYPES)}, "
                    f"not {value!r}"
                )
            object.__setattr__(self, name, value)
        if self.elem_dtype in FLOAT_DTYPES or self.acc_dtype in FLOAT_DTYPES:
            self._check_float()
            return
        if dtype(self.acc_dtype).nbytes < dtype(self.elem_dtype).nbytes:
            raise ValueError(
                f"Numerics.acc_dtype {self.acc_dtype} is narrower than elem_dtype {self.elem_dtype}"
            )
        f = self.frac_bits
        bits = dtype(self.elem_dtype).nbytes * 8
        if isinstance(f, bool) or not isinstance(f, int) or not 0 <= f < bits:
            raise ValueError(
                f"Numerics.frac_bits must be an integer in [0, {bits}) for {self.elem_dtype}, not {f!r}"
            )
        if self.overflow not in OVERFLOW_POLICIES:
            raise ValueError(
                f"Numerics.overflow must be one of {', '.join(OVERFLOW_POLICIES)}, not {self.overflow!r}"
            )

    def _check_float(self) -> None:
        if (self.elem_dtype, self.acc_dtype) != FLOAT_DTYPES:
            raise ValueError(
                f"Numerics: floating point is elem_dtype bfloat16 with acc_dtype float32, "
                f"not {self.elem_dtype} with {self.acc_dtype}"
            )
        if self.frac_bits != 0:
            raise ValueError(
                f"Numerics.frac_bits applies to fixed point; {self.elem_dtype} has none "
                f"(0, not {self.frac_bits!r})"
            )
        if self.overflow != "wrap":
            raise ValueError(
                "Numerics.overflow='raise' applies to fixed point; the floating-point units "
                "round an overflow to infinity (IEEE 754)"
            )

    @property
    def is_float(self) -> bool:
        """Whether these are the BF16/FP32 numerics (:mod:`step_lang.float_numerics`)."""
        return self.elem_dtype in FLOAT_DTYPES

    @classmethod
    def of(cls, config: Any, *, overflow: str | None = None) -> Numerics:
        """The numerics of ``config``: a :class:`Numerics`, or any object with ``elem_dtype``,
        ``acc_dtype`` and ``frac_bits`` attributes (``step_hw.config.HwConfig``)."""
        if isinstance(config, Numerics):
            return (
                config
                if overflow is None
                else Numerics(config.frac_bits, config.elem_dtype, config.acc_dtype, overflow)
            )
        missing = [a for a in ("elem_dtype", "acc_dtype", "frac_bits") if not hasattr(config, a)]
        if missing:
            raise TypeError(
                f"Numerics need a Numerics or a config with elem_dtype, acc_dtype and frac_bits, "
                f"not {config!r}"
            )
        return cls(config.frac_bits, config.elem_dtype, config.acc_dtype, overflow or "wrap")

    @property
    def params(self) -> tuple:
        return (("frac_bits", self.frac_bits), ("overflow", self.overflow))

    # -- results that leave the range ------------------------------------------------------------

    def wrap(self, fn: str, v: np.ndarray, dt: DType) -> np.ndarray:
        """A linear result in ``dt``: wrapped modulo ``2**w``, or refused under ``"raise"``."""
        lo, hi = _bounds(dt.nbytes * 8)
        v = np.asarray(v)
        if self.overflow == "raise":
            self._check(fn, v, dt, lo, hi, "wraps")
            return v.astype(dt.numpy)
        return (((v - lo) & (2 ** (dt.nbytes * 8) - 1)) + lo).astype(dt.numpy)

    def saturate(self, fn: str, v: np.ndarray, dt: DType) -> np.ndarray:
        """An approximation unit's result in ``dt``: clamped, or refused under ``"raise"``."""
        lo, hi = _bounds(dt.nbytes * 8)
        v = np.asarray(v)
        if self.overflow == "raise":
            self._check(fn, v, dt, lo, hi, "saturates")
        return np.clip(v, lo, hi).astype(dt.numpy)

    @staticmethod
    def _check(fn: str, v: np.ndarray, dt: DType, lo: int, hi: int, what: str) -> None:
        if v.size and (v.min() < lo or v.max() > hi):
            bad = v.max() if v.max() > hi else v.min()
            raise StepRuntimeError(
                f"function '{fn}': result {bad} does not fit {dt} [{lo}, {hi}] "
                f"(overflow='raise'; the hardware {what})"
            )


# ---------------------------------------------------------------------------------------------
# The bit-exact models (also used by the hardware tests as a second reference)


def exp_q(x: np.ndarray, bits: int, f: int, nm: Numerics | None = None) -> np.ndarray:
    """Fixed-point ``exp`` of ``bits``-bit Q``f`` values (see the module docstring)."""
    nm = nm or Numerics(0, "int32")
    x = _exact(x)
    q = f + LOG2E_BITS
    t = x * LOG2E
    n = t >> q
    r = t & (2**q - 1)
    mant = _pwl(EXP2_TABLE, _top_bits(r, q, SEGMENT_BITS + INTERP_BITS))
    hi = _bounds(bits)[1]
    big = n + f >= bits - 1  # mant >= 2**P, so the result is >= 2**(bits-1) > MAX
    e = np.where(big, 0, n + f - TABLE_BITS)
    left = mant << np.clip(e, 0, None)
    right = _round_shift_var(mant, np.minimum(np.clip(-e, 0, None), TABLE_BITS + 2))
    y = np.where(e >= 0, left, right)
    over = big | (y > hi)
    if nm.overflow == "raise" and np.any(over):
        raise StepRuntimeError(
            f"function 'exp': the result of {x[over].flat[0]} (Q{f}) does not fit int{bits} "
            f"[{-hi - 1}, {hi}] (overflow='raise'; the hardware saturates)"
        )
    return np.where(over, hi, y).astype(dtype(f"int{bits}").numpy)


def silu_q(x: np.ndarray, bits: int, f: int) -> np.ndarray:
    """Fixed-point ``silu`` of ``bits``-bit Q``f`` values (never overflows)."""
    x = _exact(x)
    a = np.abs(x)
    q = f + SIGMOID_RANGE_BITS
    big = a >= 2**q
    s = _pwl(SIGMOID_TABLE, _top_bits(np.where(big, 0, a), q, SEGMENT_BITS + INTERP_BITS))
    s = np.where(big, 2**TABLE_BITS, s)
    sig = np.where(x < 0, 2**TABLE_BITS - s, s)
    return round_shift(x * sig, TABLE_BITS).astype(dtype(f"int{bits}").numpy)


def div_q(
    a: np.ndarray | int,
    b: np.ndarray,
    bits: int,
    f: int,
    nm: Numerics | None = None,
    name: str = "div",
) -> np.ndarray:
    """Fixed-point ``a / b`` of ``bits``-bit Q``f`` values (``a`` may be the constant ``2**f``)."""
    nm = nm or Numerics(0, "int32")
    a, b = np.broadcast_arrays(_exact(a), _exact(b))
    lo, hi = _bounds(bits)
    zero = b == 0
    if nm.overflow == "raise" and np.any(zero):
        raise StepRuntimeError(f"function '{name}': division by zero (the hardware saturates)")
    p = div_table_bits(f)
    mag_a, mag_b = np.abs(a), np.where(zero, 1, np.abs(b))
    msb = np.zeros_like(mag_b)
    for j in range(1, bits + 1):
        msb += (mag_b >> j) > 0
    norm = (mag_b << (bits - 1 - msb)) - 2 ** (bits - 1)  # the bits below the leading one
    r = _pwl(recip_table(p), _top_bits(norm, bits - 1, SEGMENT_BITS + INTERP_BITS))
    mag = _round_shift_var(mag_a * r, p + msb - f)
    y = np.where((a < 0) != (b < 0), -mag, mag)
    y = np.where(zero, np.where(a >= 0, hi, lo), y)
    return nm.saturate(name, y, dtype(f"int{bits}"))


def mul_q(a: np.ndarray, b: np.ndarray, f: int) -> np.ndarray:
    """Fixed-point product before the result's overflow policy: ``round_shift(a * b, f)``."""
    return round_shift(_exact(a) * _exact(b), f)


def matmul_q(
    a: np.ndarray, b: np.ndarray, f: int, acc: DType, nm: Numerics, name: str
) -> np.ndarray:
    """``a @ b`` summed in the accumulator ``acc`` (wrapping), rescaled by ``round_shift(., f)``."""
    s = nm.wrap(name, exact_dot(a, b, name), acc).astype(np.int64)
    return round_shift(s, f)


def exact_dot(a: np.ndarray, b: np.ndarray, name: str) -> np.ndarray:
    """The exact integer ``a @ b`` (int64, or Python ints for 32-bit elements)."""
    a, b = np.asarray(a), np.asarray(b)
    if a.shape[1] != b.shape[0]:
        raise StepRuntimeError(f"function '{name}': inner dims differ, {a.shape} @ {b.shape}")
    # Exact sums: int64 holds K products of 16-bit values easily; 32-bit ones use Python ints.
    wide = max(np.dtype(a.dtype).itemsize, np.dtype(b.dtype).itemsize) > 2
    aa = a.astype(object) if wide else _exact(a)
    bb = b.astype(object) if wide else _exact(b)
    s = np.zeros((a.shape[0], b.shape[1]), dtype=aa.dtype)
    for k in range(a.shape[1]):  # plain loops, as `functions._dot`: no BLAS, one order
        s = s + np.multiply.outer(aa[:, k], bb[k, :])
    return s


# ---------------------------------------------------------------------------------------------
# Function objects


@dataclass(frozen=True)
class FixedMapFn(MapFn):
    """A :class:`MapFn` with hardware-exact fixed-point arithmetic.

    ``op`` names the hardware operation (``add``, ``sub``, ``mul``, ``div``, ``max``, ``exp``,
    ``silu``, ``recip``, ``row_sum``, ``matmul``) and ``numerics`` its arithmetic; the hardware
    generator reads both.
    """

    op: str = ""
    numerics: Numerics | None = None
    transpose_b: bool = False


@dataclass(frozen=True)
class FixedAccumFn(AccumFn):
    """An :class:`AccumFn` with hardware-exact fixed-point arithmetic (``op``: ``add``, ``max``,
    ``matmul``)."""

    op: str = ""
    numerics: Numerics | None = None
    transpose_b: bool = False
    #: ``matmul`` only: the accumulator is the exact sum of the products, rescaled when
    #: emitted (``matmul_sum_out``), not a sum of rescaled products (``matmul_acc``).
    exact: bool = False


def _hw_tile(t: ElemType, err: ErrorFn, port: str, fn: str, f: int) -> Tile:
    if not isinstance(t, Tile):
        raise err(port, f"function '{fn}' needs a Tile, got {t}")
    if t.dtype.name not in HW_DTYPES:
        raise err(
            port,
            f"function '{fn}' computes in fixed point and needs an int8, int16 or int32 tile, got {t}",
        )
    if f >= t.dtype.nbytes * 8:
        raise err(port, f"function '{fn}' has {f} fraction bits, more than a {t} element holds")
    return t


def _bits(t: Tile) -> int:
    return t.dtype.nbytes * 8


class FunctionSet:
    """Iteration over a dataclass of function objects (Map first, then Accum), skipping its
    ``numerics``: shared by the fixed- and floating-point sets."""

    def __iter__(self):
        for name in self.__dataclass_fields__:
            if name != "numerics":
                yield getattr(self, name)


@dataclass(frozen=True)
class FixedPointFunctions(FunctionSet):
    """The hardware-exact function set of one :class:`Numerics` (see :func:`functions`).

    Map: ``add``, ``sub``, ``mul``, ``div``, ``maximum``, ``exp``, ``silu``, ``recip``,
    ``row_sum``, ``matmul``, ``matmul_t`` (``a @ b.T``). Accum and Scan: ``accum_add``,
    ``accum_max``, ``matmul_acc``, ``matmul_t_acc``, ``retile_row`` (data movement only, the
    function of :mod:`step_lang.functions`). :meth:`matmul_out` and :meth:`matmul_acc_out` narrow
    the matmul result to another dtype (wrapping).
    """

    numerics: Numerics
    add: FixedMapFn
    sub: FixedMapFn
    mul: FixedMapFn
    div: FixedMapFn
    maximum: FixedMapFn
    exp: FixedMapFn
    silu: FixedMapFn
    recip: FixedMapFn
    row_sum: FixedMapFn
    matmul: FixedMapFn
    matmul_t: FixedMapFn
    accum_add: FixedAccumFn
    accum_max: FixedAccumFn
    matmul_acc: FixedAccumFn
    matmul_t_acc: FixedAccumFn
    retile_row: AccumFn

    def matmul_out(self, out_dtype: DType | str, *, transpose_b: bool = False) -> FixedMapFn:
        """``matmul`` (``matmul_t``) whose result is narrowed to ``out_dtype``."""
        return _matmul(self.numerics, transpose_b, dtype(out_dtype))

    def matmul_acc_out(self, out_dtype: DType | str, *, transpose_b: bool = False) -> FixedAccumFn:
        """``matmul_acc`` (``matmul_t_acc``) accumulating in ``out_dtype``."""
        return _matmul_acc(self.numerics, transpose_b, dtype(out_dtype))

    def matmul_sum_out(self, out_dtype: DType | str, *, transpose_b: bool = False) -> FixedAccumFn:
        """An Accum function whose group is one ``matmul`` (``matmul_t``) split over its ``K``
        tiles: the exact sum of the products, emitted as ``matmul_out(out_dtype)`` would emit
        the unsplit product (hierarchical tiling's fixed-point ``K`` split)."""
        return _matmul_sum(self.numerics, transpose_b, dtype(out_dtype))


def _binary(nm: Numerics, op: str, name: str) -> FixedMapFn:
    f = nm.frac_bits

    def type_rule(err: ErrorFn, a: ElemType, b: ElemType) -> ElemType:
        ta, tb = _hw_tile(a, err, "in0", name, f), _hw_tile(b, err, "in1", name, f)
        if ta.dtype != tb.dtype:
            raise err("in1", f"function '{name}' needs equal dtypes, got {ta.dtype} and {tb.dtype}")
        rows = broadcast_dim(ta.rows, tb.rows, err, name, "rows", ta, tb)
        cols = broadcast_dim(ta.cols, tb.cols, err, name, "columns", ta, tb)
        return Tile(ta.dtype, rows, cols)

    def apply(out: Tile, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        x, y = _exact(a), _exact(b)
        if op == "add":
            return nm.wrap(name, x + y, out.dtype)
        if op == "sub":
            return nm.wrap(name, x - y, out.dtype)
        if op == "mul":
            return nm.wrap(name, mul_q(x, y, f), out.dtype)
        if op == "max":
            return np.maximum(x, y).astype(out.dtype.numpy)
        return div_q(x, y, _bits(out), f, nm, name)  # div

    def flops(a: Tile, b: Tile) -> Dim:
        return product((a.rows if a.rows != 1 else b.rows, a.cols if a.cols != 1 else b.cols))

    return FixedMapFn(name, 2, type_rule, flops, apply, nm.params, "broadcast", op, nm)


def _unary(nm: Numerics, op: str) -> FixedMapFn:
    per_elem = ELEMENT_FLOPS[op]
    f = nm.frac_bits

    def type_rule(err: ErrorFn, a: ElemType) -> ElemType:
        t = _hw_tile(a, err, "in0", op, f)
        return Tile(t.dtype, t.rows, 1) if op == "row_sum" else t

    def apply(out: Tile, a: np.ndarray) -> np.ndarray:
        bits = _bits(out)
        if op == "exp":
            return exp_q(a, bits, f, nm)
        if op == "silu":
            return silu_q(a, bits, f)
        if op == "recip":
            return div_q(2**f, a, bits, f, nm, "recip")
        return nm.wrap("row_sum", _exact(a).sum(axis=1, keepdims=True), out.dtype)  # row_sum

    meta = "rowsum" if op == "row_sum" else "same"
    return FixedMapFn(
        op, 1, type_rule, lambda a: per_elem * a.elements, apply, nm.params, meta, op, nm
    )


def _matmul(nm: Numerics, transpose_b: bool, out_dtype: DType | None = None) -> FixedMapFn:
    f = nm.frac_bits
    name = "matmul_t" if transpose_b else "matmul"
    acc = dtype(nm.acc_dtype)

    def type_rule(err: ErrorFn, a: ElemType, b: ElemType) -> ElemType:
        ta, tb = _hw_tile(a, err, "in0", name, f), _hw_tile(b, err, "in1", name, f)
        if ta.dtype != tb.dtype:
            raise err("in1", f"function '{name}' needs equal dtypes, got {ta.dtype} and {tb.dtype}")
        k_b, n = (tb.cols, tb.rows) if transpose_b else (tb.rows, tb.cols)
        if dims_equal(ta.cols, k_b) is False:
            raise err("in1", f"function '{name}' needs matching inner dims, got {ta} and {tb}")
        return _hw_tile(Tile(out_dtype or acc, ta.rows, n), err, "in0", name, f)

    def apply(out: Tile, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        y = matmul_q(a, b.T if transpose_b else b, f, acc, nm, name)
        return nm.wrap(name, y, out.dtype)

    def flops(a: Tile, b: Tile) -> Dim:
        return matmul_flops(a.rows, a.cols, b.rows if transpose_b else b.cols)

    params = (("transpose_b", transpose_b), *nm.params)
    if out_dtype is not None:
        params = (*params, ("out_dtype", out_dtype.name))
    meta = "matmul_t" if transpose_b else "matmul"
    return FixedMapFn(name, 2, type_rule, flops, apply, params, meta, "matmul", nm, transpose_b)


def _fold(nm: Numerics, op: str) -> FixedAccumFn:
    name = f"accum_{op}"
    f = nm.frac_bits

    def type_rule(
        err: ErrorFn, in_types: tuple[ElemType, ...], reduced: tuple[Dim, ...]
    ) -> ElemType:
        return _hw_tile(in_types[0], err, "in0", name, f)

    def init(t: ElemType, first: tuple | None) -> np.ndarray:
        fill = 0 if op == "add" else np.iinfo(t.dtype.numpy).min
        shape = np.shape(first[0]) if first is not None else None
        if shape is None and not (isinstance(t, Tile) and t.is_static):
            raise StepRuntimeError(
                f"function '{name}': cannot build an initial value for an empty group of {t} (dynamic shape)"
            )
        return np.full(shape or (t.rows, t.cols), fill, dtype=t.dtype.numpy)

    def update(out: Tile, acc: np.ndarray, x: np.ndarray) -> np.ndarray:
        if acc.shape != np.shape(x):
            raise StepRuntimeError(
                f"function '{name}': accumulator {acc.shape} and element {np.shape(x)} differ"
            )
        if op == "add":
            return nm.wrap(name, _exact(acc) + _exact(x), out.dtype)
        return np.maximum(_exact(acc), _exact(x)).astype(out.dtype.numpy)

    return FixedAccumFn(
        name, 1, type_rule, init, update, lambda a: a.elements, nm.params, "same", op, nm
    )


def _matmul_init(name: str, transpose_b: bool, t: Tile, first: tuple | None, dt: Any) -> np.ndarray:
    """A matmul accumulator of zeros in ``dt``: the output tile's shape, or for a group whose
    first operands are ``first`` (dynamic tiles), ``a``'s rows by ``b``'s columns."""
    if first is None:
        if not (isinstance(t, Tile) and t.is_static):
            raise StepRuntimeError(
                f"function '{name}': cannot build an initial value for an empty group of {t} (dynamic shape)"
            )
        return np.zeros((t.rows, t.cols), dtype=dt)
    a, b = first
    n = np.shape(b)[0] if transpose_b else np.shape(b)[1]
    return np.zeros((np.shape(a)[0], n), dtype=dt)


def _matmul_acc(nm: Numerics, transpose_b: bool, out_dtype: DType | None = None) -> FixedAccumFn:
    mm = _matmul(nm, transpose_b, out_dtype)
    name = mm.name + "_acc"
    f = nm.frac_bits
    acc_dt = dtype(nm.acc_dtype)

    def type_rule(
        err: ErrorFn, in_types: tuple[ElemType, ...], reduced: tuple[Dim, ...]
    ) -> ElemType:
        return mm.out_type(err, *in_types)

    def init(t: Tile, first: tuple | None) -> np.ndarray:
        return _matmul_init(name, transpose_b, t, first, t.dtype.numpy)

    def update(out: Tile, acc: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        y = matmul_q(a, b.T if transpose_b else b, f, acc_dt, nm, name)
        return nm.wrap(name, _exact(acc) + y, out.dtype)

    return FixedAccumFn(
        name, 2, type_rule, init, update, mm._flops, mm.params, mm.meta, "matmul", nm, transpose_b
    )


def _matmul_sum(nm: Numerics, transpose_b: bool, out_dtype: DType | None = None) -> FixedAccumFn:
    """``matmul`` with its reduction split over the tiles of a group (hierarchical tiling):
    the exact sum of every product of the group, emitted as the one ``matmul`` of the unsplit
    tiles emits it (wrapped to the accumulator's width, ``round_shift``, wrapped to the output):
    an Accum of it over the ``K`` tiles equals the ``matmul`` of the whole ``K``, bit for bit."""
    mm = _matmul(nm, transpose_b, out_dtype)
    name = ("matmul_t" if transpose_b else "matmul") + "_sum"
    f = nm.frac_bits
    acc_dt = dtype(nm.acc_dtype)

    def type_rule(
        err: ErrorFn, in_types: tuple[ElemType, ...], reduced: tuple[Dim, ...]
    ) -> ElemType:
        return mm.out_type(err, *in_types)

    def init(t: Tile, first: tuple | None) -> np.ndarray:
        return _matmul_init(name, transpose_b, t, first, np.int64)

    def update(out: Tile, acc: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        b = np.asarray(b)
        return acc + exact_dot(a, b.T if transpose_b else b, name)

    def emit(out: Tile, acc: np.ndarray) -> np.ndarray:
        y = round_shift(nm.wrap(name, acc, acc_dt).astype(np.int64), f)
        return nm.wrap(name, y, out.dtype)

    params = (*mm.params, ("sum", True))
    return FixedAccumFn(
        name, 2, type_rule, init, update, mm._flops, params, mm.meta, "matmul", nm, transpose_b,
        _emit=emit, exact=True,
    )  # fmt: skip


@functools.cache
def _functions(nm: Numerics) -> FixedPointFunctions:
    return FixedPointFunctions(
        numerics=nm,
        add=_binary(nm, "add", "add"),
        sub=_binary(nm, "sub", "sub"),
        mul=_binary(nm, "mul", "mul"),
        div=_binary(nm, "div", "div"),
        maximum=_binary(nm, "max", "max"),
        exp=_unary(nm, "exp"),
        silu=_unary(nm, "silu"),
        recip=_unary(nm, "recip"),
        row_sum=_unary(nm, "row_sum"),
        matmul=_matmul(nm, False),
        matmul_t=_matmul(nm, True),
        accum_add=_fold(nm, "add"),
        accum_max=_fold(nm, "max"),
        matmul_acc=_matmul_acc(nm, False),
        matmul_t_acc=_matmul_acc(nm, True),
        retile_row=retile_row,
    )


def functions(config: Any, *, overflow: str | None = None) -> Any:
    """The hardware-exact functions for ``config`` (a :class:`Numerics` or a config with
    ``elem_dtype``, ``acc_dtype`` and ``frac_bits``, e.g. ``step_hw.config.HwConfig``).

    Fixed point gives a :class:`FixedPointFunctions`; ``bfloat16`` elements give the
    :class:`step_lang.float_numerics.FloatFunctions` of the same names.
    ``overflow`` is ``"wrap"`` (the hardware; default) or ``"raise"`` (fixed point only). The
    same arguments give the same (identical) objects.
    """
    nm = Numerics.of(config, overflow=overflow)
    if nm.is_float:
        from . import float_numerics

        return float_numerics.functions(nm)
    return _functions(nm)


def is_fixed_point(fn: Any) -> bool:
    """True for the function objects made by :func:`functions` for fixed point (and
    ``retile_row``)."""
    return isinstance(fn, (FixedMapFn, FixedAccumFn)) or fn is retile_row


def is_hardware_function(fn: Any) -> bool:
    """True for every function object :func:`functions` makes (fixed or floating point)."""
    from .float_numerics import FloatAccumFn, FloatMapFn

    return is_fixed_point(fn) or isinstance(fn, (FloatMapFn, FloatAccumFn))


# ---------------------------------------------------------------------------------------------
# Integer metadata at hardware widths
#
# The address and control functions of :mod:`step_lang.functions` produce int64 tiles, which the
# hardware has no encoding for (its elements are at most ``acc_dtype`` wide). These are the same
# functions with a chosen integer output dtype; like their int64 originals they raise
# StepRuntimeError when a result does not fit (the hardware wraps there and flags nothing, so a
# graph must keep its metadata in range).


def _int_dtype(what: str, out_dtype: DType | str) -> DType:
    dt = dtype(out_dtype)
    if dt.name not in HW_DTYPES:
        raise ValueError(f"{what} out_dtype must be one of {', '.join(HW_DTYPES)}, not {dt.name!r}")
    return dt


def _meta_scalar(err: ErrorFn, t: ElemType, port: str, fn: str) -> Tile:
    if not (isinstance(t, Tile) and t.rows == 1 and t.cols == 1 and t.dtype.is_integer):
        raise err(port, f"function '{fn}' needs a [1,1] integer tile, got {t}")
    return t


def _fit(v: int, dt: DType, fn: str) -> np.ndarray:
    lo, hi = _bounds(dt.nbytes * 8)
    if not lo <= v <= hi:
        raise StepRuntimeError(f"function '{fn}': result {v} does not fit {dt} [{lo}, {hi}]")
    return np.array([[v]], dtype=dt.numpy)


def cache_read_addr(row_offset: int, out_dtype: DType | str = "int32") -> FlatMapFn:
    """KV-cache tile addresses ``idx * row_offset + j`` for ``j < tiles``, as ``out_dtype`` tiles.

    :func:`step_lang.functions.cache_read_addr` (same name, same ``row_offset`` parameter) with a
    hardware-width result; the hardware block is ``step_hw.addrgen.CacheReadAddr``.
    """
    if isinstance(row_offset, bool) or not isinstance(row_offset, int) or row_offset < 1:
        raise ValueError(
            f"cache_read_addr row_offset must be a positive integer, not {row_offset!r}"
        )
    dt = _int_dtype("cache_read_addr", out_dtype)

    def type_rule(err: ErrorFn, idx: ElemType, tiles: ElemType):
        _meta_scalar(err, idx, "in0", "cache_read_addr")
        _meta_scalar(err, tiles, "in1", "cache_read_addr")
        return Tile(dt, 1, 1), (), None

    def apply(out: Tile, idx: np.ndarray, tiles: np.ndarray) -> list[Any]:
        i, n = int(idx[0, 0]), tile_count("cache_read_addr", "in1", tiles)
        if n > row_offset:
            raise StepRuntimeError(
                f"function 'cache_read_addr': {n} tiles exceed the row of {row_offset}"
            )
        return [_fit(i * row_offset + j, dt, "cache_read_addr") for j in range(n)]

    return FlatMapFn(
        "cache_read_addr",
        2,
        0,
        type_rule,
        apply,
        (("row_offset", row_offset), ("out_dtype", dt.name)),
    )


def accum_count(out_dtype: DType | str = "int32") -> AccumFn:
    """Count the elements of each group: one ``[1,1]`` ``out_dtype`` token per group.

    :data:`step_lang.functions.accum_count` (same name, ``count``) with a hardware-width result;
    the hardware block is ``step_hw.compute.rowops.CountUnit``.
    """
    dt = _int_dtype("accum_count", out_dtype)

    def type_rule(err: ErrorFn, in_types: tuple[ElemType, ...], reduced: tuple[Dim, ...]):
        return Tile(dt, 1, 1)

    def update(out: Tile, acc: np.ndarray, x: Any) -> np.ndarray:
        return _fit(int(acc[0, 0]) + 1, dt, "count")

    return AccumFn(
        "count",
        1,
        type_rule,
        lambda t, first: np.zeros((1, 1), dtype=dt.numpy),
        update,
        lambda a: 0,
        (("out_dtype", dt.name),),
        meta="ignores_values",
    )


def expert_addr(
    tiles_per_expert: int, base: int = 0, out_dtype: DType | str = "int32"
) -> FlatMapFn:
    """Tile addresses of the selected expert's weights, ``base + e * tiles_per_expert + j``, as
    ``out_dtype`` tiles.

    :func:`step_lang.functions.expert_addr` (same name, same ``tiles`` and ``base`` parameters)
    with a hardware-width result; the hardware block is ``step_hw.expert_addr.ExpertAddr``.
    """
    for what, v, lo in (("tiles_per_expert", tiles_per_expert, 1), ("base", base, 0)):
        if isinstance(v, bool) or not isinstance(v, int) or v < lo:
            kind = "positive" if lo else "non-negative"
            raise ValueError(f"expert_addr {what} must be a {kind} integer, not {v!r}")
    dt = _int_dtype("expert_addr", out_dtype)
    return _expert_addr(tiles_per_expert, base, out_dtype=dt)
