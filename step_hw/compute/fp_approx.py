"""BF16 ``exp``, ``silu``, reciprocal and division in Amaranth, bit for bit as
:mod:`step_lang.float_approx`.

Each function adds combinational logic for one element to a module and returns the result's
BF16 bits (``unsigned(16)``). They follow the integer steps of :mod:`step_lang.float_approx` one
for one and take every constant and table from it: a piecewise-linear table lookup (33 knots,
one small multiplier), a Newton step for reciprocals, and one final round to nearest even.
Signal names start with ``name``, so several instances fit in one module.
``tests/test_fp_approx.py`` checks them against the numpy model on every BF16 input (and on
special and random pairs for division); ``docs/bf16_functions.md`` has the algorithms and errors.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

from amaranth.hdl import Cat, Const, Module, Mux, Signal, Value, signed, unsigned

from step_lang import float_approx as fa
from step_lang.numerics import INTERP_BITS, SEGMENT_BITS

from .fp_cells import cell

__all__ = ["div_bf16", "exp_bf16", "recip_bf16", "silu_bf16"]

_BIAS = fa.BIAS
_T_MAX_SHIFT = 32  # |t| = prod >> shift with prod < 2**32: larger shifts leave 0


def _s(v: Value) -> Value:
    """An unsigned value as a signed one of the same magnitude (one bit wider)."""
    v = Value.cast(v)
    return Cat(v, Const(0, 1)).as_signed()


class _Decoded:
    """The fields and classes of a BF16 operand."""

    def __init__(self, x: Value):
        x = Value.cast(x)[0:16]
        self.bits, self.sign, self.exp, frac = x, x[15], x[7:15], x[0:7]
        self.sig = Cat(frac, Const(1, 1))  # 1.frac as an 8-bit integer
        self.zero = self.exp == 0  # zeros and (flushed) subnormals
        self.inf = (self.exp == 0xFF) & (frac == 0)
        self.nan = (self.exp == 0xFF) & (frac != 0)


def _pwl(m: Module, table: Sequence[int], pos: Value, interp_bits: int, *, name: str) -> Value:
    """``T[i] + ((T[i+1] - T[i]) * u) >> interp_bits`` at ``pos = i * 2**interp_bits + u``."""
    deltas = [b - a for a, b in itertools.pairwise(table)]
    base = Signal(range(min(table), max(table) + 1), name=f"{name}_base")
    delta = Signal(signed(max(abs(d) for d in deltas).bit_length() + 1), name=f"{name}_delta")
    with m.Switch(pos[interp_bits:]):
        for i, d in enumerate(deltas):
            with m.Case(i):
                m.d.comb += [base.eq(table[i]), delta.eq(d)]
    out = Signal(range(min(table), max(table) + 1), name=f"{name}_pwl")
    m.d.comb += out.eq(base + ((delta * pos[:interp_bits]) >> interp_bits))
    return out


def _exp2_parts(m: Module, negate: Value, x: _Decoded, *, name: str) -> tuple[Value, Value]:
    """``exp(+-x) ~ mant * 2**(n - 16)`` (``float_approx._exp2_parts``): ``(mant, n)``."""
    prod = Signal(32, name=f"{name}_prod")
    m.d.comb += prod.eq(x.sig * fa.LOG2E_WIDE)
    top = fa.EXP_SATURATE_EXP - 1  # the exponent at which |t| = prod
    shift = Signal(range(_T_MAX_SHIFT + 1), name=f"{name}_shift")
    far = x.exp <= top - _T_MAX_SHIFT
    m.d.comb += shift.eq(Mux(x.exp >= top, 0, Mux(far, _T_MAX_SHIFT, top - x.exp)))
    t_abs = Signal(32, name=f"{name}_t_abs")
    m.d.comb += t_abs.eq(prod >> shift)
    t = Signal(signed(33), name=f"{name}_t")
    m.d.comb += t.eq(Mux(negate, -_s(t_abs), _s(t_abs)))
    n = Signal(signed(33 - fa.T_FRAC_BITS), name=f"{name}_n")
    m.d.comb += n.eq(t >> fa.T_FRAC_BITS)
    mant = _pwl(m, fa.EXP2_TABLE, t[: fa.T_FRAC_BITS], fa.EXP_INTERP_BITS, name=name)
    return mant, n


def _recip_newton(m: Module, v: Value, frac_bits: int, *, name: str) -> Value:
    """``1/v`` in Q``NEWTON_BITS + 1`` for ``v`` in Q``frac_bits`` in ``[1, 2)``
    (``float_approx._recip_newton``): table and interpolation, then one Newton step."""
    pos_bits = SEGMENT_BITS + INTERP_BITS
    frac = Value.cast(v)[:frac_bits]
    if pos_bits >= frac_bits:
        pos = Cat(Const(0, pos_bits - frac_bits), frac)
    else:
        pos = frac[frac_bits - pos_bits :]
    r0 = _pwl(m, fa.RECIP_TABLE, pos, INTERP_BITS, name=name)  # Q16
    one = 1 << (fa.RECIP_BITS + frac_bits)
    residual = Signal(signed(fa.RECIP_BITS + frac_bits + 3), name=f"{name}_residual")
    m.d.comb += residual.eq(one - _s(v * r0))
    err = Signal(signed(16), name=f"{name}_err")  # 1 - v * r0 in Q NEWTON_BITS
    m.d.comb += err.eq(residual >> (fa.RECIP_BITS + frac_bits - fa.NEWTON_BITS))
    r1 = Signal(fa.NEWTON_BITS + 2, name=f"{name}_r1")
    shift = fa.RECIP_BITS + fa.NEWTON_BITS - (fa.NEWTON_BITS + 1)
    m.d.comb += r1.eq((r0 << (fa.NEWTON_BITS + 1 - fa.RECIP_BITS)) + ((r0 * err) >> shift))
    return r1


def _round(
    m: Module, sign: Value, q: Value, scale: Value, leads: Sequence[int], *, name: str
) -> Value:
    """BF16 bits of ``(-1)**sign * q * 2**scale`` (``float_approx._round``): the leading one of
    ``q`` at one of ``leads``, round to nearest even, zero when the rounded exponent is below
    the normal range, infinity when above."""
    q = Value.cast(q)
    kept: Value = Const(0, 9)
    lead: Value = Const(min(leads), 6)
    for p in sorted(leads):  # later (higher) candidates win
        keep, half, sticky = q[p - 7 : p + 1], q[p - 8], q[: p - 8] != 0
        rounded = keep + (half & (sticky | keep[0]))
        kept = Mux(q[p], rounded, kept)
        lead = Mux(q[p], p, lead)
    k = Signal(9, name=f"{name}_kept")
    m.d.comb += k.eq(kept)
    biased = Signal(signed(12), name=f"{name}_biased")  # exponent field after rounding
    m.d.comb += biased.eq(scale + _s(lead) + _BIAS + k[8])
    out = Signal(16, name=f"{name}_rounded")
    with m.If(biased <= 0):
        m.d.comb += out.eq(Cat(Const(0, 15), sign))
    with m.Elif(biased >= 0xFF):
        m.d.comb += out.eq(Cat(Const(fa.BF16_INF, 15), sign))
    with m.Else():
        m.d.comb += out.eq(Cat(k[0:7], biased[0:8], sign))
    return out


def _select(m: Module, default: Value, *cases: tuple[Value, Value | int], name: str) -> Value:
    """``default`` with the special cases (condition, bits) applied, the first matching winning
    (``float_approx._finish``)."""
    out = Signal(16, name=f"{name}_out")
    first = True
    for cond, bits in cases:
        with m.If(cond) if first else m.Elif(cond):
            m.d.comb += out.eq(bits)
        first = False
    with m.Else():
        m.d.comb += out.eq(default)
    return out


@cell("exp_bf16", lambda: (16,), lambda: 16)
def exp_bf16(m: Module, x: Value, *, name: str = "exp") -> Value:
    """BF16 bits of ``exp(x)`` (``float_approx.exp_bf16``)."""
    d = _Decoded(x)
    mant, n = _exp2_parts(m, d.sign, d, name=name)
    out = _round(m, Const(0, 1), mant, n - fa.TABLE_BITS, (fa.TABLE_BITS,), name=name)
    sat = d.exp >= fa.EXP_SATURATE_EXP
    return _select(
        m,
        out,
        (d.nan, fa.BF16_NAN),
        (d.zero, fa.BF16_ONE),
        (sat & d.sign, 0),
        (sat, fa.BF16_INF),
        name=name,
    )


def _silu_denominator(m: Module, mant: Value, n: Value, *, name: str) -> tuple[Value, Value]:
    """``1 + mant * 2**(n - 16)`` as ``(d, d_exp)`` (``float_approx._silu_denominator``)."""
    w = fa.SILU_D_BITS
    wide = Cat(Const(0, w - fa.TABLE_BITS), mant)  # Q w
    up = Signal(range(w + 2), name=f"{name}_up")
    down = Signal(range(w + 3), name=f"{name}_down")
    m.d.comb += [
        up.eq(Mux(n > w + 1, w + 1, n)),  # used when n >= 0
        down.eq(Mux(-n > w + 2, w + 2, -n)),  # used when n < 0
    ]
    raw = Signal(w + 2, name=f"{name}_d_raw")
    with m.If(n >= 0):
        m.d.comb += raw.eq(wide + (Const(1 << w, w + 1) >> up))
    with m.Else():
        m.d.comb += raw.eq((1 << w) + (wide >> down))
    carry = raw[w + 1]
    d = Signal(w + 1, name=f"{name}_d")
    m.d.comb += d.eq(Mux(carry, raw[1 : w + 2], raw[: w + 1]))
    d_exp = Signal(signed(len(n) + 1), name=f"{name}_d_exp")
    m.d.comb += d_exp.eq(Mux(n >= 0, n, 0) + carry)
    return d, d_exp


@cell("silu_bf16", lambda: (16,), lambda: 16)
def silu_bf16(m: Module, x: Value, *, name: str = "silu") -> Value:
    """BF16 bits of ``silu(x) = x / (1 + exp(-x))`` (``float_approx.silu_bf16``)."""
    d = _Decoded(x)
    mant, n = _exp2_parts(m, ~d.sign, d, name=name)
    den, den_exp = _silu_denominator(m, mant, n, name=name)
    r1 = _recip_newton(m, den, fa.SILU_D_BITS, name=name)
    q = Signal(33, name=f"{name}_q")
    m.d.comb += q.eq(d.sig * r1)
    scale = _s(d.exp) - _BIAS - den_exp - 31
    out = _round(m, d.sign, q, scale, (31, 30, 29), name=name)
    sat = d.exp >= fa.EXP_SATURATE_EXP
    return _select(
        m,
        out,
        (d.nan, fa.BF16_NAN),
        (d.zero | (sat & d.sign), Cat(Const(0, 15), d.sign)),
        (sat, d.bits),
        name=name,
    )


@cell("recip_bf16", lambda: (16,), lambda: 16)
def recip_bf16(m: Module, x: Value, *, name: str = "recip") -> Value:
    """BF16 bits of ``1 / x`` (``float_approx.recip_bf16``)."""
    d = _Decoded(x)
    r1 = _recip_newton(m, d.sig, 7, name=name)
    scale = _BIAS - _s(d.exp) - (fa.NEWTON_BITS + 1)
    leads = (fa.NEWTON_BITS + 1, fa.NEWTON_BITS)
    out = _round(m, d.sign, r1, scale, leads, name=name)
    return _select(
        m,
        out,
        (d.nan, fa.BF16_NAN),
        (d.zero, Cat(Const(fa.BF16_INF, 15), d.sign)),
        (d.inf, Cat(Const(0, 15), d.sign)),
        name=name,
    )


@cell("div_bf16", lambda: (16, 16), lambda: 16)
def div_bf16(m: Module, a: Value, b: Value, *, name: str = "div") -> Value:
    """BF16 bits of ``a / b`` (``float_approx.div_bf16``)."""
    da, db = _Decoded(a), _Decoded(b)
    sign = da.sign ^ db.sign
    r1 = _recip_newton(m, db.sig, 7, name=name)
    q = Signal(33, name=f"{name}_q")
    m.d.comb += q.eq(da.sig * r1)
    out = _round(m, sign, q, _s(da.exp) - _s(db.exp) - 31, (31, 30), name=name)
    nan = da.nan | db.nan | (da.zero & db.zero) | (da.inf & db.inf)
    return _select(
        m,
        out,
        (nan, fa.BF16_NAN),
        (da.inf | db.zero, Cat(Const(fa.BF16_INF, 15), sign)),
        (da.zero | db.inf, Cat(Const(0, 15), sign)),
        name=name,
    )


# Shape for callers that declare ports.
BF16 = unsigned(16)
