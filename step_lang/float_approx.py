"""BF16 ``exp``, ``silu``, reciprocal and division, bit for bit as the hardware computes them.

The reference of ``step_hw/compute/fp_approx.py``: numpy on ``uint16`` arrays of BF16 bit
patterns, returning ``uint16`` bit patterns. The computation uses integer arithmetic only (int64
arrays), step by step as the hardware does; floating point is used only to build the constant
tables at import time (deterministically) and in :func:`round_f64_to_bf16` / :func:`ulp_error`,
which measure the approximations against float64 math. ``docs/bf16_functions.md`` describes the
algorithms and the measured errors.

Rules (as :mod:`step_lang.floats`)
    * A subnormal input counts as a zero of its sign; any NaN input gives ``0x7FC0``.
    * Every function computes an unrounded approximation ``v = q * 2**k`` (``q`` an integer with
      at least 17 significant bits) and rounds it once, to nearest even on ``q``'s bits below
      the 8 kept (no sticky bit beyond ``q``: ``q`` is the approximation).
    * **Flush to zero is decided on the exponent after that rounding** (the exponent the result
      would have with an unbounded range): a result that rounds to a magnitude below
      ``2**-126`` is a zero of its sign. :mod:`step_lang.floats` decides on the exact value
      before rounding; the two agree on every input here because no exact result lies in
      ``[(1 - 2**-9) * 2**-126, 2**-126)`` (a quotient of 8-bit significands below 1 is at most
      ``1 - 1/255``; for exp and silu the exhaustive test shows it), while deciding on ``v``
      would flush quotients such as ``a / b = 2**-126`` with ``a`` and ``b`` of equal
      significand other than 1, whose approximation lies just below ``2**-126``.
    * A rounded magnitude beyond the largest finite BF16 is an infinity of the result's sign.
    * Specials: ``exp(-inf) = +0``, ``exp(+inf) = +inf``, ``exp(+-0) = 1``; ``silu(+inf) = +inf``,
      ``silu(-inf) = -0``, ``silu(+-0) = +-0``; ``recip(+-0) = +-inf``, ``recip(+-inf) = +-0``;
      ``div`` as IEEE 754: ``0/0`` and ``inf/inf`` are NaN, ``x/0`` is a signed infinity for
      finite nonzero ``x``, ``0/x`` and ``x/inf`` signed zeros, ``inf/x`` a signed infinity.

Errors are measured in ulps of the correctly rounded result (:func:`ulp_error`);
:data:`ERROR_BOUNDS` holds the bounds that ``tests/test_fp_approx.py`` asserts (exhaustively for
the single-input functions).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from . import floats
from .numerics import EXP2_TABLE, INTERP_BITS, SEGMENT_BITS, TABLE_BITS, recip_table

__all__ = [
    "ERROR_BOUNDS",
    "EXP2_TABLE",
    "EXP_INTERP_BITS",
    "EXP_SATURATE_EXP",
    "LOG2E_FRAC_BITS",
    "LOG2E_WIDE",
    "NEWTON_BITS",
    "RECIP_BITS",
    "RECIP_TABLE",
    "SILU_D_BITS",
    "T_FRAC_BITS",
    "bf16_values",
    "div_bf16",
    "exp_bf16",
    "recip_bf16",
    "round_f64_to_bf16",
    "silu_bf16",
    "ulp_error",
]

BF16_NAN = int(floats.BF16_NAN)  # the quiet NaN every unit returns (one home: floats.py)
BF16_ONE = 0x3F80
BF16_INF = 0x7F80
BIAS = 127

#: Fraction bits of the ``log2(e)`` constant: a 24-bit significand (relative error 2**-25).
LOG2E_FRAC_BITS = 23
LOG2E_WIDE = math.floor(math.log2(math.e) * 2**LOG2E_FRAC_BITS + 0.5)
#: Fraction bits of ``t = x * log2(e)``; ``r``, the fraction of ``t``, indexes ``EXP2_TABLE``.
T_FRAC_BITS = 24
#: Bits of ``r`` below the table index (the interpolation position inside a segment).
EXP_INTERP_BITS = T_FRAC_BITS - SEGMENT_BITS
#: Biased exponent from which ``|x| >= 128``: exp and silu saturate (``exp(+-128)`` is far
#: beyond the BF16 range).
EXP_SATURATE_EXP = BIAS + 7
#: Fraction bits of the reciprocal table's knots (``1 / (1 + i/2**K)``, ``numerics.recip_table``).
RECIP_BITS = TABLE_BITS
RECIP_TABLE: tuple[int, ...] = recip_table(RECIP_BITS)
#: Fraction bits of the Newton step's error term ``1 - m * r0``; the refined reciprocal has
#: ``NEWTON_BITS + 1`` fraction bits.
NEWTON_BITS = 23
#: Fraction bits of silu's denominator ``1 + exp(-x)`` (normalised to ``[1, 2)``).
SILU_D_BITS = 23

#: Worst-case error (ulps of the correctly rounded result, :func:`ulp_error`) that the tests
#: assert: exhaustively for exp, silu and recip, on random and special pairs for div.
ERROR_BOUNDS = {"exp": 1.0, "silu": 1.0, "recip": 0.0, "div": 0.0}


# ---------------------------------------------------------------------------------------------
# Integer building blocks (the hardware has one per step)


class _Fields(NamedTuple):
    """The fields and classes of BF16 operands (int64 arrays)."""

    sign: np.ndarray
    exp: np.ndarray  # biased exponent field
    sig: np.ndarray  # the significand 1.f as an 8-bit integer (128 + f)
    zero: np.ndarray  # zeros and (flushed) subnormals
    inf: np.ndarray
    nan: np.ndarray


def _decode(x: np.ndarray) -> _Fields:
    """The fields of BF16 bits."""
    x = np.asarray(x, dtype=np.uint16).astype(np.int64)
    sign, exp, frac = (x >> 15) & 1, (x >> 7) & 0xFF, x & 0x7F
    top = exp == 0xFF
    return _Fields(sign, exp, frac | 0x80, exp == 0, top & (frac == 0), top & (frac != 0))


def _pwl(table: tuple[int, ...], pos: np.ndarray, interp_bits: int) -> np.ndarray:
    """Piecewise-linear lookup: ``T[i] + ((T[i+1] - T[i]) * u) >> interp_bits`` at position
    ``pos = i * 2**interp_bits + u``."""
    t = np.asarray(table, dtype=np.int64)
    i, u = pos >> interp_bits, pos & ((1 << interp_bits) - 1)
    return t[i] + (((t[i + 1] - t[i]) * u) >> interp_bits)


def _top_bits(v: np.ndarray, width: int, bits: int) -> np.ndarray:
    """A ``width``-bit unsigned ``v`` rescaled to ``bits`` bits (dropping or appending low bits)."""
    return v >> (width - bits) if width >= bits else v << (bits - width)


def _exp2_parts(negate: np.ndarray, exp: np.ndarray, sig: np.ndarray) -> tuple[np.ndarray, ...]:
    """``exp(+-x) ~ mant * 2**(n - TABLE_BITS)`` for ``|x| = sig * 2**(exp - 134)`` below
    ``2**7`` (``exp < EXP_SATURATE_EXP``): ``|t| = |x| * LOG2E_WIDE`` in Q``T_FRAC_BITS``
    (truncated), ``t = -|t|`` when ``negate``, ``n = floor(t)``, and ``mant`` (in
    ``[2**16, 2**17)``) interpolated in ``EXP2_TABLE`` at the fraction of ``t``."""
    prod = sig * LOG2E_WIDE  # < 2**32
    shift = (EXP_SATURATE_EXP - 1) - exp  # |t| = prod * 2**(exp - 134 - 23 + 24)
    t_abs = prod >> np.clip(shift, 0, 32)
    t = np.where(negate == 1, -t_abs, t_abs)
    n = t >> T_FRAC_BITS
    mant = _pwl(EXP2_TABLE, t & ((1 << T_FRAC_BITS) - 1), EXP_INTERP_BITS)
    return mant, n


def _recip_newton(m: np.ndarray, frac_bits: int) -> np.ndarray:
    """``1/v`` in Q``NEWTON_BITS + 1`` for ``v = m / 2**frac_bits`` in ``[1, 2)``
    (``frac_bits >= 7``): ``r0`` interpolated in ``RECIP_TABLE`` at the top bits of ``v``'s
    fraction, then one Newton step ``r1 = r0 + r0 * (1 - v * r0)`` with the error term truncated
    to ``NEWTON_BITS`` fraction bits. Exact at ``v = 1``; otherwise ``r1 <= 1/v``."""
    pos_bits = SEGMENT_BITS + INTERP_BITS
    pos = _top_bits(m - (1 << frac_bits), frac_bits, pos_bits)
    r0 = _pwl(RECIP_TABLE, pos, INTERP_BITS)  # Q16, in [2**15, 2**16]
    err = ((1 << (RECIP_BITS + frac_bits)) - m * r0) >> (RECIP_BITS + frac_bits - NEWTON_BITS)
    shift = RECIP_BITS + NEWTON_BITS - (NEWTON_BITS + 1)
    return (r0 << (NEWTON_BITS + 1 - RECIP_BITS)) + ((r0 * err) >> shift)


def _leading_one(q: np.ndarray, leads: tuple[int, ...]) -> np.ndarray:
    """The position of ``q``'s leading one, known to be one of ``leads`` (the lowest if none)."""
    lead = np.full(np.shape(q), min(leads), dtype=np.int64)
    for p in sorted(leads):  # the highest set candidate wins
        lead = np.where((q >> p) & 1 == 1, p, lead)
    return lead


def _round(sign: np.ndarray, q: np.ndarray, scale: np.ndarray, leads: tuple[int, ...]):
    """BF16 bits of ``(-1)**sign * q * 2**scale`` (``q > 0``, its leading one at one of
    ``leads``, all >= 8): round to nearest even on the bits below the 8 kept; zero of the sign
    when the unrounded value is below ``2**-126``; infinity when the rounded value overflows."""
    lead = _leading_one(q, leads)
    drop = lead - 7
    keep, rest, half = q >> drop, q & ((1 << drop) - 1), 1 << (drop - 1)
    up = (rest > half) | ((rest == half) & (keep & 1 == 1))
    biased = lead + scale + BIAS  # exponent field before rounding
    kept = keep + up  # in [2**7, 2**8]
    carry = kept >> 8
    biased_r = biased + carry
    bits = (sign << 15) | (biased_r << 7) | (kept & 0x7F)
    bits = np.where(biased_r >= 0xFF, (sign << 15) | BF16_INF, bits)
    return np.where(biased_r <= 0, sign << 15, bits)


def _finish(out: np.ndarray, *cases: tuple[np.ndarray, int | np.ndarray]) -> np.ndarray:
    """``out`` with the special cases (condition, bits) applied, the first matching winning."""
    for cond, bits in reversed(cases):
        out = np.where(cond, bits, out)
    return np.asarray(out).astype(np.uint16)


# ---------------------------------------------------------------------------------------------
# The functions


def exp_bf16(x: np.ndarray) -> np.ndarray:
    """BF16 bits of ``exp(x)`` (BF16 bits): ``2**n * 2**r`` with ``t = x * log2(e) = n + r``."""
    f = _decode(x)
    mant, n = _exp2_parts(f.sign, f.exp, f.sig)
    out = _round(np.zeros_like(f.sign), mant, n - TABLE_BITS, (TABLE_BITS,))
    sat = f.exp >= EXP_SATURATE_EXP  # |x| >= 128, including the infinities
    negative = f.sign == 1
    return _finish(out, (f.nan, BF16_NAN), (f.zero, BF16_ONE), (sat & negative, 0), (sat, BF16_INF))


def silu_bf16(x: np.ndarray) -> np.ndarray:
    """BF16 bits of ``silu(x) = x / (1 + exp(-x))``, the denominator kept unrounded."""
    f = _decode(x)
    mant, n = _exp2_parts(1 - f.sign, f.exp, f.sig)  # exp(-x) ~ mant * 2**(n - 16)
    d, d_exp = _silu_denominator(mant, n)
    q = f.sig * _recip_newton(d, SILU_D_BITS)  # |x| / 2**(exp - 127) / d, in Q31
    out = _round(f.sign, q, f.exp - BIAS - d_exp - 31, (31, 30, 29))
    sat = f.exp >= EXP_SATURATE_EXP  # silu(x) rounds to x for x >= 128, to -0 for x <= -128
    return _finish(
        out,
        (f.nan, BF16_NAN),
        (f.zero | (sat & (f.sign == 1)), f.sign << 15),
        (sat, np.asarray(x, dtype=np.int64)),
    )


def _silu_denominator(mant: np.ndarray, n: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``1 + mant * 2**(n - 16)`` as ``d * 2**(d_exp - SILU_D_BITS)`` with ``d`` in
    ``[2**SILU_D_BITS, 2**(SILU_D_BITS + 1))`` (the bits shifted out are dropped)."""
    w = SILU_D_BITS
    wide = mant << (w - TABLE_BITS)  # Q w, in [2**w, 2**(w+1))
    # n >= 0: 2**n * (mant + 2**-n); n < 0: 1 + mant * 2**n (below 2)
    above = wide + ((1 << w) >> np.clip(n, 0, w + 1))
    below = (1 << w) + (wide >> np.clip(-n, 0, w + 2))
    d = np.where(n >= 0, above, below)
    d_exp = np.where(n >= 0, n, 0)
    carry = d >> (w + 1)  # above can reach [2, 3)
    return np.where(carry == 1, d >> 1, d), d_exp + carry


def recip_bf16(x: np.ndarray) -> np.ndarray:
    """BF16 bits of ``1 / x``: the reciprocal of the significand, then the exponent negated."""
    f = _decode(x)
    r1 = _recip_newton(f.sig, 7)  # Q24, in (2**23, 2**24]
    scale = BIAS - f.exp - (NEWTON_BITS + 1)
    out = _round(f.sign, r1, scale, (NEWTON_BITS + 1, NEWTON_BITS))
    return _finish(
        out, (f.nan, BF16_NAN), (f.zero, (f.sign << 15) | BF16_INF), (f.inf, f.sign << 15)
    )


def div_bf16(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """BF16 bits of ``a / b``: ``a``'s significand times the reciprocal of ``b``'s."""
    a, b = np.broadcast_arrays(np.asarray(a, dtype=np.uint16), np.asarray(b, dtype=np.uint16))
    fa, fb = _decode(a), _decode(b)
    sign = fa.sign ^ fb.sign
    q = fa.sig * _recip_newton(fb.sig, 7)  # Q31, in (2**30, 2**32)
    out = _round(sign, q, fa.exp - fb.exp - 31, (31, 30))
    nan = fa.nan | fb.nan | (fa.zero & fb.zero) | (fa.inf & fb.inf)
    return _finish(
        out,
        (nan, BF16_NAN),
        (fa.inf | fb.zero, (sign << 15) | BF16_INF),
        (fa.zero | fb.inf, sign << 15),
    )


# ---------------------------------------------------------------------------------------------
# Measuring against float64


def bf16_values(bits: np.ndarray) -> np.ndarray:
    """float64 values of BF16 bits, subnormals as zeros of their sign (the inputs' meaning)."""
    bits = np.asarray(bits, dtype=np.uint16).astype(np.uint32)
    sub = ((bits & 0x7F80) == 0) & ((bits & 0x7F) != 0)
    bits = np.where(sub, bits & 0x8000, bits).astype(np.uint32)
    with np.errstate(invalid="ignore"):  # signalling NaN patterns
        return (bits << 16).view(np.float32).astype(np.float64)


def round_f64_to_bf16(v: np.ndarray) -> np.ndarray:
    """BF16 bits of float64 values, correctly rounded with the same rules: to nearest even,
    magnitudes below ``2**-126`` to zeros of their sign, overflow to infinity, NaN to
    ``0x7FC0``."""
    v = np.asarray(v, dtype=np.float64)
    bits = v.view(np.uint64)
    drop = np.uint64(52 - 7)
    half = np.uint64((1 << 44) - 1)
    rounded = ((bits + half + ((bits >> drop) & np.uint64(1))) >> drop) << drop
    with np.errstate(over="ignore"):
        f32 = rounded.view(np.float64).astype(np.float32)  # exact, or infinity
    out = (f32.view(np.uint32) >> 16).astype(np.uint16)
    tiny = np.abs(v) < 2.0**-126
    out = np.where(tiny, np.where(np.signbit(v), 0x8000, 0), out)
    return np.where(np.isnan(v), BF16_NAN, out).astype(np.uint16)


def ulp_error(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    """``|got - want| / ulp(want)`` for BF16 bits, ``want`` the correctly rounded result.

    ``ulp(w)`` is the spacing of BF16 values at ``w``'s exponent: ``2**(e - 134)`` for a normal
    ``w`` with biased exponent ``e``; ``2**-126`` (the gap below the smallest normal) for a zero;
    for an infinity, that of the largest finite value, an infinity counting as ``2**128`` (the
    next value after the largest finite one). Two NaNs differ by 0, a NaN and a number by inf.
    """
    got, want = np.asarray(got, dtype=np.uint16), np.asarray(want, dtype=np.uint16)

    def value(bits: np.ndarray) -> np.ndarray:
        v = bf16_values(bits)
        return np.where(np.isinf(v), np.copysign(2.0**128, v), v)

    e = (want.astype(np.int64) >> 7) & 0xFF
    ulp = np.where(e == 0, 2.0**-126, np.exp2(np.minimum(e, 0xFE) - 134.0))
    err = np.abs(value(got) - value(want)) / ulp
    nan_g, nan_w = np.isnan(bf16_values(got)), np.isnan(bf16_values(want))
    return np.where(nan_g | nan_w, np.where(nan_g & nan_w, 0.0, np.inf), err)
