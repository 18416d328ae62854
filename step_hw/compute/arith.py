"""Fixed-point arithmetic in Amaranth: the datapaths of :mod:`step_lang.numerics`, bit for bit.

Each function adds combinational logic for one element to a module and returns its result. They
follow the integer formulas of :mod:`step_lang.numerics` step by step and take their constants and
tables from it, so the interpreter (with the numerics functions) and the hardware agree exactly;
``tests/test_hw_compute.py`` checks them against each other, exhaustively for int8.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

from amaranth.hdl import Cat, Const, Module, Mux, Signal, Value, signed, unsigned

from step_lang import numerics as nm

__all__ = [
    "div_q",
    "exp_q",
    "mul_q",
    "overflows",
    "round_shift",
    "round_shift_var",
    "saturate",
    "silu_q",
    "wrap",
]

_POS_BITS = nm.SEGMENT_BITS + nm.INTERP_BITS


def _bounds(bits: int) -> tuple[int, int]:
    return -(2 ** (bits - 1)), 2 ** (bits - 1) - 1


def overflows(v: Value, bits: int) -> Value:
    """Whether ``v`` (an exact, wide enough result) leaves the signed ``bits``-bit range: where
    the hardware wraps or saturates and ``numerics`` under ``overflow="raise"`` raises."""
    lo, hi = _bounds(bits)
    return (v < lo) | (v > hi)


def wrap(v: Value, bits: int) -> Value:
    """``v`` modulo ``2**bits`` as a signed value (two's-complement wrap-around)."""
    return Value.cast(v)[:bits].as_signed()


def saturate(v: Value, bits: int) -> Value:
    """``v`` clamped to the signed ``bits``-bit range."""
    lo, hi = _bounds(bits)
    return Mux(v > hi, hi, Mux(v < lo, lo, v))[:bits].as_signed()


def round_shift(v: Value, s: int) -> Value:
    """``(v + 2**(s-1)) >> s``: round to nearest, ties towards +infinity (``s`` a constant)."""
    if s == 0:
        return v
    return (v + (1 << (s - 1))) >> s


def round_shift_var(m: Module, v: Value, s: Value, *, name: str = "rs") -> Value:
    """:func:`round_shift` by a run-time amount ``s >= 0``, as ``((v >> (s-1)) + 1) >> 1``
    (the same value without an adder as wide as ``v`` plus a decoded rounding constant)."""
    s = Value.cast(s)
    s1 = Signal(unsigned(len(s)), name=f"{name}_s1")
    m.d.comb += s1.eq(s - 1)
    return Mux(s == 0, v, ((v >> s1) + 1) >> 1)


def _pwl(m: Module, table: Sequence[int], pos: Value, *, name: str) -> Value:
    """Piecewise-linear lookup at a ``K + F``-bit position: knot plus interpolated slope."""
    deltas = [b - a for a, b in itertools.pairwise(table)]
    base = Signal(range(min(table), max(table) + 1), name=f"{name}_base")
    delta = Signal(signed(max(abs(d) for d in deltas).bit_length() + 1), name=f"{name}_delta")
    with m.Switch(pos[nm.INTERP_BITS :]):
        for i, d in enumerate(deltas):
            with m.Case(i):
                m.d.comb += [base.eq(table[i]), delta.eq(d)]
    frac = pos[: nm.INTERP_BITS]
    return base + ((delta * frac) >> nm.INTERP_BITS)


def _top_bits(v: Value, width: int, bits: int) -> Value:
    """A ``width``-bit unsigned ``v`` rescaled to ``bits`` bits (as ``numerics._top_bits``)."""
    v = Value.cast(v).as_unsigned()
    v = Cat(v, Const(0, width - len(v)))[:width] if len(v) < width else v[:width]
    if width >= bits:
        return v[width - bits :]
    return (v << (bits - width))[:bits]


def mul_q(a: Value, b: Value, *, bits: int, frac_bits: int) -> Value:
    """Fixed-point product, wrapped to ``bits``: ``wrap(round_shift(a * b, f))``."""
    return wrap(round_shift(a * b, frac_bits), bits)


def exp_q(
    m: Module,
    x: Value,
    *,
    bits: int,
    frac_bits: int,
    name: str = "exp",
    flags: list[Value] | None = None,
) -> Value:
    """Fixed-point ``exp`` (``numerics.exp_q``), saturating at the largest value; the
    saturation condition is appended to ``flags`` when given."""
    f, p = frac_bits, nm.TABLE_BITS
    q = f + nm.LOG2E_BITS
    hi = _bounds(bits)[1]
    t = Signal(signed(bits + nm.LOG2E.bit_length() + 1), name=f"{name}_t")
    n = Signal(signed(len(t)), name=f"{name}_n")
    m.d.comb += [t.eq(x * nm.LOG2E), n.eq(t >> q)]
    mant = Signal(unsigned(p + 2), name=f"{name}_mant")
    m.d.comb += mant.eq(_pwl(m, nm.EXP2_TABLE, _top_bits(t, q, _POS_BITS), name=name))
    big = n >= bits - 1 - f  # mant >= 2**P: the result is >= 2**(bits-1) > MAX
    e = Signal(signed(len(n) + 1), name=f"{name}_e")
    m.d.comb += e.eq(n + (f - p))
    # Right shifts beyond P + 2 leave 0 (mant < 2**(P+1)), so the amount is clamped.
    rs = Signal(range(p + 3), name=f"{name}_rs")
    m.d.comb += rs.eq(Mux(-e > p + 2, p + 2, -e))
    y = Signal(signed(p + 3 + max(bits - 2 - p, 0)), name=f"{name}_y")
    m.d.comb += y.eq(round_shift_var(m, mant, rs, name=f"{name}_rs"))
    if bits - 2 - p >= 0:  # left shifts happen only when the element is wider than P + 2 bits
        ls = Signal(range(bits - 1 - p), name=f"{name}_ls")
        m.d.comb += ls.eq(e)
        with m.If(e >= 0):
            m.d.comb += y.eq(mant << ls)
    if flags is not None:
        flags.append(big | (y > hi))
    return Mux(big | (y > hi), hi, y)[:bits].as_signed()


def silu_q(m: Module, x: Value, *, bits: int, frac_bits: int, name: str = "silu") -> Value:
    """Fixed-point ``silu`` (``numerics.silu_q``); never overflows."""
    p = nm.TABLE_BITS
    q = frac_bits + nm.SIGMOID_RANGE_BITS
    a = Signal(unsigned(bits), name=f"{name}_abs")
    m.d.comb += a.eq(abs(x))
    big = a >= 2**q
    s = Signal(unsigned(p + 1), name=f"{name}_s")
    # Below the cut-off, a < 2**q: its q low bits are the position on [0, 8).
    pos = _top_bits(a, q, _POS_BITS)
    m.d.comb += s.eq(Mux(big, 2**p, _pwl(m, nm.SIGMOID_TABLE, pos, name=name)))
    sig = Signal(unsigned(p + 1), name=f"{name}_sig")
    m.d.comb += sig.eq(Mux(x < 0, 2**p - s, s))
    return wrap(round_shift(x * sig, p), bits)


def div_q(
    m: Module,
    a: Value | int,
    b: Value,
    *,
    bits: int,
    frac_bits: int,
    name: str = "div",
    flags: list[Value] | None = None,
) -> Value:
    """Fixed-point ``a / b`` (``numerics.div_q``), saturating; ``a`` may be a constant (``recip``).
    Division by zero or saturation is appended to ``flags`` when given."""
    f = frac_bits
    p = nm.div_table_bits(f)
    lo, hi = _bounds(bits)
    mag_b = Signal(unsigned(bits), name=f"{name}_mag_b")
    m.d.comb += mag_b.eq(abs(b))
    if isinstance(a, int):
        mag_a, a_neg = Const(abs(a)), Const(int(a < 0))
    else:
        mag_a = Signal(unsigned(bits), name=f"{name}_mag_a")
        m.d.comb += mag_a.eq(abs(a))
        a_neg = a < 0
    # Leading-one detection: later assignments win, so the highest set bit gives msb.
    msb = Signal(range(bits), name=f"{name}_msb")
    for j in range(1, bits):
        with m.If(mag_b[j]):
            m.d.comb += msb.eq(j)
    shift = Signal(range(bits), name=f"{name}_shift")
    norm = Signal(unsigned(bits), name=f"{name}_norm")
    m.d.comb += [shift.eq(bits - 1 - msb), norm.eq(mag_b << shift)]
    r = Signal(unsigned(p + 1), name=f"{name}_r")
    m.d.comb += r.eq(_pwl(m, nm.recip_table(p), _top_bits(norm, bits - 1, _POS_BITS), name=name))
    s = Signal(range(p - f + bits), name=f"{name}_s")
    m.d.comb += s.eq(msb + (p - f))
    mag = Signal(unsigned(len(mag_a) + p + 1), name=f"{name}_mag")
    m.d.comb += mag.eq(round_shift_var(m, mag_a * r, s, name=f"{name}_rs"))
    y = Mux(a_neg ^ (b < 0), -mag, mag)
    y = Mux(b == 0, Mux(a_neg, lo, hi), y)
    if flags is not None:
        flags.append((b == 0) | overflows(y, bits))
    return saturate(y, bits)
