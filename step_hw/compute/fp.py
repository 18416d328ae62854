"""Floating-point datapaths in Amaranth: BF16 products and FP32 sums, bit for bit as
:mod:`step_lang.floats` (flush-to-zero, round to nearest even, canonical NaN).

Each function adds combinational logic for one element to a module and returns the result's
bits (``unsigned(32)`` for FP32, ``unsigned(16)`` for BF16); the units that use them register
the result, and later ones may pipeline them. ``tests/test_fp_units.py`` checks them against
:mod:`step_lang.floats`: every special pair, every BF16 value for the conversion's outputs, and
random operands.
"""

from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Mux, Signal, Value, signed, unsigned

from step_lang.floats import BF16_NAN, F32_NAN

from .fp_cells import cell

__all__ = ["add_f32", "bf16_to_f32", "f32_to_bf16", "max_float", "mul_bf16"]

# The quiet NaNs every unit returns, the interpreter's (one home: step_lang.floats).
_F32_NAN = int(F32_NAN)
_BF16_NAN = int(BF16_NAN)


def _s(v: Value) -> Value:
    """An unsigned value as a signed one of the same magnitude (one bit wider)."""
    v = Value.cast(v)
    return Cat(v, Const(0, 1)).as_signed()


@cell("f32_to_bf16", lambda: (32,), lambda: 16)
def f32_to_bf16(m: Module, x: Value, *, name: str = "cvt") -> Value:
    """BF16 bits of FP32 bits ``x``: round to nearest even, subnormals to zero, canonical NaN,
    overflow to infinity (``floats.f32_to_bf16``)."""
    x = Value.cast(x)
    exp, frac, sign = x[23:31], x[0:23], x[31]
    daz = Signal(32, name=f"{name}_daz")
    m.d.comb += daz.eq(Mux((exp == 0) & (frac != 0), Cat(Const(0, 31), sign), x))
    rounded = Signal(33, name=f"{name}_rounded")
    m.d.comb += rounded.eq(daz + 0x7FFF + daz[16])
    nan = (exp == 0xFF) & (frac != 0)
    return Mux(nan, _BF16_NAN, rounded[16:32])


@cell("mul_bf16", lambda: (16, 16), lambda: 32)
def mul_bf16(m: Module, a: Value, b: Value, *, name: str = "mul") -> Value:
    """FP32 bits of the exact product of BF16 bits ``a`` and ``b`` (``floats.mul_bf16``)."""
    a, b = Value.cast(a), Value.cast(b)
    ea, eb, fa, fb = a[7:15], b[7:15], a[0:7], b[0:7]
    sign = a[15] ^ b[15]
    zero_a, zero_b = ea == 0, eb == 0  # zeros and (flushed) subnormals
    inf_a, inf_b = (ea == 0xFF) & (fa == 0), (eb == 0xFF) & (fb == 0)
    nan = ((ea == 0xFF) & (fa != 0)) | ((eb == 0xFF) & (fb != 0))
    nan = nan | (inf_a & zero_b) | (zero_a & inf_b)
    prod = Signal(16, name=f"{name}_prod")
    m.d.comb += prod.eq(Cat(fa, 1) * Cat(fb, 1))  # 1.fa x 1.fb in [2**14, 2**16)
    exp = Signal(signed(11), name=f"{name}_exp")  # biased exponent of the product
    frac = Signal(23, name=f"{name}_frac")
    with m.If(prod[15]):
        m.d.comb += [exp.eq(_s(ea) + _s(eb) - 126), frac.eq(Cat(Const(0, 8), prod[0:15]))]
    with m.Else():
        m.d.comb += [exp.eq(_s(ea) + _s(eb) - 127), frac.eq(Cat(Const(0, 9), prod[0:14]))]
    out = Signal(32, name=f"{name}_out")
    with m.If(nan):
        m.d.comb += out.eq(_F32_NAN)
    with m.Elif(inf_a | inf_b | (exp >= 0xFF)):
        m.d.comb += out.eq(Cat(Const(0, 23), Const(0xFF, 8), sign))
    with m.Elif(zero_a | zero_b | (exp <= 0)):  # a zero operand, or an exact result < 2**-126
        m.d.comb += out.eq(Cat(Const(0, 31), sign))
    with m.Else():
        m.d.comb += out.eq(Cat(frac, exp[0:8], sign))
    return out


@cell("add_f32", lambda: (32, 32), lambda: 32)
def add_f32(m: Module, a: Value, b: Value, *, name: str = "add") -> Value:
    """FP32 bits of ``a + b`` (FP32 bits): flush-to-zero, round to nearest even
    (``floats.add_f32``).

    The operand of larger magnitude keeps its 24-bit significand; the other is shifted right by
    the exponent difference into three extra bits (guard, round, and a sticky bit that ORs
    everything shifted out), added or subtracted, renormalised by a leading-zero count, and
    rounded. A result whose exponent before rounding is below the smallest normal is a zero of
    the result's sign.
    """
    a, b = Value.cast(a), Value.cast(b)
    ea, eb, sa, sb = a[23:31], b[23:31], a[31], b[31]
    zero_a, zero_b = ea == 0, eb == 0  # zeros and (flushed) subnormals
    inf_a, inf_b = (ea == 0xFF) & (a[0:23] == 0), (eb == 0xFF) & (b[0:23] == 0)
    nan = ((ea == 0xFF) & (a[0:23] != 0)) | ((eb == 0xFF) & (b[0:23] != 0))
    nan = nan | (inf_a & inf_b & (sa != sb))

    # x: the operand of larger magnitude, y the other (ties: a)
    swap = b[0:31] > a[0:31]
    x, y = Signal(32, name=f"{name}_x"), Signal(32, name=f"{name}_y")
    m.d.comb += [x.eq(Mux(swap, b, a)), y.eq(Mux(swap, a, b))]
    ex, ey = x[23:31], y[23:31]
    mx = Cat(Const(0, 3), x[0:23], 1)  # 27 bits: 1.frac and guard, round, sticky
    my = Signal(27, name=f"{name}_my")
    d = Signal(8, name=f"{name}_d")
    m.d.comb += d.eq(ex - ey)
    shifted = Signal(27, name=f"{name}_shifted")
    lost = Signal(name=f"{name}_lost")
    full_y = Cat(Const(0, 3), y[0:23], 1)
    m.d.comb += shifted.eq(full_y >> d)
    # the bits shifted out of the 27-bit window: any set bit below position d
    m.d.comb += lost.eq(Mux(d >= 27, 1, (full_y & ((Const(1, 28) << d) - 1)[0:27]) != 0))
    m.d.comb += my.eq(Mux(ey == 0, 0, shifted | lost))  # y zero: nothing to add
    subtract = x[31] ^ y[31]
    total = Signal(28, name=f"{name}_total")
    m.d.comb += total.eq(Mux(subtract, mx - my, mx + my))

    # Normalise: the leading one to bit 26 (an add may carry into bit 27).
    lz = Signal(range(29), name=f"{name}_lz")  # leading zeros of total[0:27]
    m.d.comb += lz.eq(27)
    for j in range(27):  # later assignments win: the highest set bit decides
        with m.If(total[j]):
            m.d.comb += lz.eq(26 - j)
    norm = Signal(27, name=f"{name}_norm")
    exp = Signal(signed(11), name=f"{name}_exp")  # biased exponent before rounding
    with m.If(total[27]):  # carry: shift right by one, keeping the sticky bit
        m.d.comb += [norm.eq(Cat(total[1] | total[0], total[2:28])), exp.eq(_s(ex) + 1)]
    with m.Else():
        m.d.comb += [norm.eq(total[0:27] << lz), exp.eq(_s(ex) - _s(lz))]
    keep = norm[3:27]  # 24 bits, the leading one at the top
    up = norm[2] & (norm[1] | norm[0] | keep[0])
    rounded = Signal(25, name=f"{name}_rounded")
    m.d.comb += rounded.eq(keep + up)
    exp_r = Signal(signed(11), name=f"{name}_exp_r")
    frac_r = Signal(23, name=f"{name}_frac_r")
    with m.If(rounded[24]):  # 1.111..1 rounded up to 10.000..0
        m.d.comb += [exp_r.eq(exp + 1), frac_r.eq(rounded[1:24])]
    with m.Else():
        m.d.comb += [exp_r.eq(exp), frac_r.eq(rounded[0:23])]

    out = Signal(32, name=f"{name}_out")
    with m.If(nan):
        m.d.comb += out.eq(_F32_NAN)
    with m.Elif(inf_a | inf_b):
        m.d.comb += out.eq(Cat(Const(0, 23), Const(0xFF, 8), Mux(inf_a, sa, sb)))
    with m.Elif(zero_a & zero_b):
        m.d.comb += out.eq(Cat(Const(0, 31), sa & sb))  # -0 only for (-0) + (-0)
    with m.Elif(zero_b):
        m.d.comb += out.eq(a)
    with m.Elif(zero_a):
        m.d.comb += out.eq(b)
    with m.Elif(total == 0):  # x + (-x)
        m.d.comb += out.eq(0)
    with m.Elif(exp <= 0):  # the exact result is below 2**-126
        m.d.comb += out.eq(Cat(Const(0, 31), x[31]))
    with m.Elif(exp_r >= 0xFF):
        m.d.comb += out.eq(Cat(Const(0, 23), Const(0xFF, 8), x[31]))
    with m.Else():
        m.d.comb += out.eq(Cat(frac_r, exp_r[0:8], x[31]))
    return out


def bf16_to_f32(x: Value) -> Value:
    """FP32 bits of BF16 bits ``x`` (exact: 16 zero bits below)."""
    return Cat(Const(0, 16), Value.cast(x)[0:16])


@cell("max_float", lambda width: (width, width), lambda width: width)
def max_float(m: Module, a: Value, b: Value, *, width: int, name: str = "max") -> Value:
    """The larger of two ``width``-bit (16: BF16, 32: FP32) values, ``-0 < +0``, subnormal
    operands as zeros of their sign, NaN operands giving the canonical NaN
    (``float_numerics.max_bits``)."""
    frac_w = 7 if width == 16 else 23
    nan_bits = _BF16_NAN if width == 16 else _F32_NAN

    def prepare(x: Value, tag: str) -> tuple[Value, Value, Value]:
        x = Value.cast(x).as_unsigned()[0:width]
        exp, frac, sign = x[frac_w : width - 1], x[0:frac_w], x[width - 1]
        flushed = Signal(width, name=f"{name}_{tag}_daz")
        m.d.comb += flushed.eq(Mux((exp == 0) & (frac != 0), Cat(Const(0, width - 1), sign), x))
        nan = (exp == (1 << (width - 1 - frac_w)) - 1) & (frac != 0)
        key = Signal(signed(width + 1), name=f"{name}_{tag}_key")  # sign-magnitude to ordered
        mag = _s(flushed[0 : width - 1])
        m.d.comb += key.eq(Mux(sign, -mag - 1, mag))
        return flushed, nan, key

    xa, nan_a, ka = prepare(a, "a")
    xb, nan_b, kb = prepare(b, "b")
    out = Signal(width, name=f"{name}_out")
    m.d.comb += out.eq(Mux(nan_a | nan_b, nan_bits, Mux(ka >= kb, xa, xb)))
    return out


# Shapes for callers that declare ports.
F32 = unsigned(32)
BF16 = unsigned(16)
