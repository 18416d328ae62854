"""`step_lang.numerics`: accuracy of the fixed-point approximations, exactness of the arithmetic,
the overflow policies, and graphs that run in the interpreter with the hardware's numbers."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from step_lang import (
    DONE,
    Accum,
    Graph,
    Map,
    Scan,
    Sink,
    Source,
    StepRuntimeError,
    StepTypeError,
    Stop,
    StreamType,
    Tile,
    interpret,
    ragged,
)
from step_lang import numerics as nm
from step_lang.numerics import Numerics
from step_lang.types import float32, int8, int16, int32

# (bits, frac_bits) of the accuracy tables: every int8 and int16 value is tried.
EXHAUSTIVE = [(8, 0), (8, 4), (8, 7), (16, 0), (16, 4), (16, 8), (16, 12)]
SAMPLED = [(32, 8), (32, 16), (32, 24)]


def values(bits: int) -> np.ndarray:
    """Every value of a small dtype; for int32 a sample with the extremes and a dense middle."""
    if bits <= 16:
        return np.arange(-(2 ** (bits - 1)), 2 ** (bits - 1))
    rng = np.random.default_rng(bits)
    return np.concatenate(
        [rng.integers(-(2**31), 2**31, 100_000), np.arange(-50_000, 50_000), [-(2**31), 2**31 - 1]]
    )


def lsb(f: int) -> float:
    return 2.0**-f


# -- tables -----------------------------------------------------------------------------------


def test_tables_span_their_ranges():
    p = nm.TABLE_BITS
    assert nm.EXP2_TABLE[0] == 2**p and nm.EXP2_TABLE[-1] == 2 ** (p + 1)
    assert nm.SIGMOID_TABLE[0] == 2 ** (p - 1)
    assert nm.recip_table(p)[0] == 2**p and nm.recip_table(p)[-1] == 2 ** (p - 1)
    assert all(len(t) == 2**nm.SEGMENT_BITS + 1 for t in (nm.EXP2_TABLE, nm.SIGMOID_TABLE))
    assert np.all(np.diff(nm.EXP2_TABLE) > 0) and np.all(np.diff(nm.SIGMOID_TABLE) > 0)
    assert np.all(np.diff(nm.recip_table(p)) < 0)
    assert round(math.log2(math.e) * 2**16) == nm.LOG2E


# -- accuracy against float references --------------------------------------------------------


@pytest.mark.parametrize(("bits", "f"), EXHAUSTIVE + SAMPLED)
def test_exp_error_bound(bits: int, f: int):
    """Below MAX: ``|exp_q(x) - exp(x)| <= 1.2e-4 * exp(x) + 0.5 LSB``; above it, MAX."""
    x = values(bits)
    y = nm.exp_q(x, bits, f).astype(float)
    hi = 2 ** (bits - 1) - 1
    with np.errstate(over="ignore"):
        ref = np.exp(x * lsb(f)) / lsb(f)  # in LSBs
    inside = ref < hi
    assert np.all(np.abs(y - ref)[inside] <= 1.2e-4 * ref[inside] + 0.5)
    assert np.all(y[ref >= hi + 0.5] == hi)
    assert np.all(np.diff(y[np.argsort(x)]) >= 0)  # monotone


@pytest.mark.parametrize(("bits", "f"), EXHAUSTIVE + SAMPLED)
def test_silu_error_bound(bits: int, f: int):
    """``|silu_q(x) - silu(x)| <= 3e-3 + 0.5 LSB`` everywhere (no overflow is possible)."""
    x = values(bits)
    y = nm.silu_q(x, bits, f).astype(float) * lsb(f)
    xf = x * lsb(f)
    with np.errstate(over="ignore"):
        ref = xf / (1 + np.exp(-xf))
    assert np.all(np.abs(y - ref) <= 3e-3 + 0.5 * lsb(f))


@pytest.mark.parametrize(("bits", "f"), EXHAUSTIVE + SAMPLED)
def test_recip_error_bound(bits: int, f: int):
    """In range: ``|recip_q(x) - 1/x| <= 3e-4 * |1/x| + 0.5 LSB``; out of range, MIN or MAX."""
    x = values(bits)
    x = x[x != 0]
    y = nm.div_q(2**f, x, bits, f).astype(float)
    ref = 1 / (x * lsb(f)) / lsb(f)
    lo, hi = -(2 ** (bits - 1)), 2 ** (bits - 1) - 1
    inside = (ref > lo) & (ref < hi)
    assert np.all(np.abs(y - ref)[inside] <= 3e-4 * np.abs(ref[inside]) + 0.5)
    assert np.all(y[ref >= hi + 0.5] == hi) and np.all(y[ref <= lo - 0.5] == lo)


@pytest.mark.parametrize(("bits", "f"), [(8, 4), (16, 8), (16, 12), (32, 16)])
def test_div_error_bound(bits: int, f: int):
    """In range: ``|div_q(a, b) - a/b| <= 3e-4 * |a/b| + 0.5 LSB`` (int8: every pair)."""
    if bits == 8:
        a, b = (g.reshape(-1) for g in np.meshgrid(values(8), values(8)))
    else:
        rng = np.random.default_rng(f)
        a, b = rng.integers(-(2 ** (bits - 1)), 2 ** (bits - 1), (2, 200_000))
        b = np.concatenate([b, rng.integers(-300, 300, 200_000)])  # small divisors: big quotients
        a = np.concatenate([a, rng.integers(-(2 ** (bits - 1)), 2 ** (bits - 1), 200_000)])
    b = np.where(b == 0, 1, b)
    y = nm.div_q(a, b, bits, f).astype(float)
    ref = a / b / lsb(f)
    hi = 2 ** (bits - 1) - 1
    inside = np.abs(ref) < hi
    assert np.all(np.abs(y - ref)[inside] <= 3e-4 * np.abs(ref[inside]) + 0.5)
    assert np.all(y[ref >= hi + 0.5] == hi) and np.all(y[ref <= -hi - 1.5] == -hi - 1)


# -- exact values -----------------------------------------------------------------------------


@pytest.mark.parametrize(("bits", "f"), EXHAUSTIVE + SAMPLED)
def test_exact_points(bits: int, f: int):
    one = 2**f
    hi, lo = 2 ** (bits - 1) - 1, -(2 ** (bits - 1))
    if one <= hi:
        assert nm.exp_q(np.array([0]), bits, f)[0] == one  # exp(0) = 1
        assert nm.div_q(one, np.array([one]), bits, f)[0] == one  # 1 / 1 = 1
    x = values(bits)
    # a / 1.0 = a, and a / -1.0 = -a, exactly
    if one <= hi:
        assert np.array_equal(nm.div_q(x, np.full_like(x, one), bits, f), x)
        y = x[x != lo]  # -MIN does not fit
        assert np.array_equal(nm.div_q(y, np.full_like(y, -one), bits, f), -y)
    # silu: 0 at 0, the identity from +8 on, 0 from -8 down
    s = nm.silu_q(x, bits, f)
    assert nm.silu_q(np.array([0]), bits, f)[0] == 0
    assert np.array_equal(s[x >= 8 * one], x[x >= 8 * one])
    assert np.all(s[x <= -8 * one] == 0)
    # division by zero saturates by the dividend's sign
    assert list(nm.div_q(np.array([5, 0, -5]), np.zeros(3, int), bits, f)) == [hi, hi, lo]


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_div_is_odd_and_power_of_two_exact(data):
    bits, f = data.draw(st.sampled_from([(8, 3), (16, 8), (32, 12)]))
    lo, hi = -(2 ** (bits - 1)), 2 ** (bits - 1) - 1
    a = data.draw(st.integers(lo + 1, hi))
    b = data.draw(st.integers(lo + 1, hi).filter(bool))
    q = int(nm.div_q(np.array([a]), np.array([b]), bits, f)[0])
    if lo < q < hi:  # not saturated: the magnitude is rounded, so the sign comes out exactly
        assert int(nm.div_q(np.array([-a]), np.array([b]), bits, f)[0]) == -q
        assert int(nm.div_q(np.array([a]), np.array([-b]), bits, f)[0]) == -q
    k = data.draw(st.integers(0, bits - 2 - f)) if bits - 2 - f >= 0 else 0
    if 2 ** (f + k) <= hi:  # by 2**k: round(a / 2**k), ties away from zero
        got = int(nm.div_q(np.array([a]), np.array([2 ** (f + k)]), bits, f)[0])
        assert got == int(math.copysign(math.floor(abs(a) / 2**k + 0.5), a))


# -- linear arithmetic: exact in range, wrapping or raising outside ---------------------------

NM8 = Numerics(frac_bits=3, elem_dtype="int8")
NM16 = Numerics(frac_bits=8, elem_dtype="int16")


def tiles(dt, shape, extremes: bool = True):
    lo, hi = np.iinfo(dt.numpy).min, np.iinfo(dt.numpy).max
    elem = st.integers(lo, hi)
    if extremes:
        elem = st.one_of(st.sampled_from([lo, hi, 0, -1, 1]), elem)
    n = shape[0] * shape[1]
    return st.lists(elem, min_size=n, max_size=n).map(lambda v: np.array(v).reshape(shape))


def wrap(v, bits: int) -> np.ndarray:
    return ((np.asarray(v, dtype=object) + 2 ** (bits - 1)) % 2**bits - 2 ** (bits - 1)).astype(
        np.int64
    )


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_linear_ops_wrap_and_raise(data):
    numerics = data.draw(st.sampled_from([NM8, NM16]))
    dt = int8 if numerics is NM8 else int16
    bits, f = dt.nbytes * 8, numerics.frac_bits
    a, b = data.draw(tiles(dt, (2, 3))), data.draw(tiles(dt, (2, 3)))
    t = Tile(dt, 2, 3)
    wrapping = nm.functions(numerics)
    raising = nm.functions(numerics, overflow="raise")
    exact = {
        "add": a.astype(object) + b,
        "sub": a.astype(object) - b,
        # round half up: (a*b + 2**(f-1)) // 2**f
        "mul": (a.astype(object) * b + (2 ** (f - 1) if f else 0)) // 2**f,
        "max": np.maximum(a, b).astype(object),
    }
    for name, want in exact.items():
        fn = getattr(wrapping, "maximum" if name == "max" else name)
        got = fn.apply(t, a, b)
        assert got.dtype == dt.numpy
        assert np.array_equal(got, wrap(want, bits))
        fits = all(-(2 ** (bits - 1)) <= v < 2 ** (bits - 1) for v in want.reshape(-1))
        strict = getattr(raising, "maximum" if name == "max" else name)
        if fits:
            assert np.array_equal(strict.apply(t, a, b), got)
        else:
            with pytest.raises(
                StepRuntimeError,
                match=rf"^function '{name}': result -?\d+ does not fit {dt} \[-?\d+, \d+\] \(overflow='raise'; the hardware wraps\)$",
            ):
                strict.apply(t, a, b)
    # row sums: exact, wrapped
    got = wrapping.row_sum.apply(Tile(dt, 2, 1), a)
    assert np.array_equal(got, wrap(a.astype(object).sum(axis=1, keepdims=True), bits))


def test_mul_rounds_half_up():
    fns = nm.functions(Numerics(frac_bits=2, elem_dtype="int8"))
    t = Tile(int8, 1, 4)
    # 0.25, -0.25, 0.75, -0.75 times 0.5: 0.5, -0.5, 1.5, -1.5 LSB, rounded up at the ties
    a = np.array([[1, -1, 3, -3]])
    b = np.array([[2, 2, 2, 2]])
    assert fns.mul.apply(t, a, b).tolist() == [[1, 0, 2, -1]]


@settings(max_examples=40, deadline=None)
@given(st.data())
def test_matmul_accumulates_in_int32(data):
    """``matmul`` sums exact products modulo 2**32 and rounds once; ``matmul_acc`` over K tiles
    adds the per-tile results; ``matmul_t`` multiplies by the transpose."""
    numerics = data.draw(st.sampled_from([NM8, NM16]))
    dt = int8 if numerics is NM8 else int16
    f = numerics.frac_bits
    k = data.draw(st.integers(1, 4))
    a1, a2 = data.draw(tiles(dt, (2, k))), data.draw(tiles(dt, (2, k)))
    b1, b2 = data.draw(tiles(dt, (k, 3))), data.draw(tiles(dt, (k, 3)))
    fns = nm.functions(numerics)
    out = Tile(int32, 2, 3)
    s = a1.astype(object) @ b1.astype(object)
    want = (wrap(s, 32).astype(object) + (2 ** (f - 1) if f else 0)) // 2**f
    got = fns.matmul.apply(out, a1, b1)
    assert got.dtype == np.int32 and np.array_equal(got, want.astype(np.int64))
    assert np.array_equal(fns.matmul_t.apply(out, a1, b1.T.copy()), got)
    acc = fns.matmul_acc.init(out, (a1, b1))
    acc = fns.matmul_acc.update(out, acc, a1, b1)
    acc = fns.matmul_acc.update(out, acc, a2, b2)
    assert np.array_equal(acc, wrap(got.astype(object) + fns.matmul.apply(out, a2, b2), 32))
    # narrowing to int16 wraps the int32 result
    narrow = fns.matmul_out("int16").apply(Tile(int16, 2, 3), a1, b1)
    assert np.array_equal(narrow, wrap(got, 16))


def test_matmul_overflow_policy():
    """int16 products of extremes overflow an int32 accumulator after two terms."""
    a = np.full((1, 2), -(2**15))
    b = np.full((2, 1), -(2**15))  # 2 * 2**30 = 2**31: one past int32's top
    out = Tile(int32, 1, 1)
    wrapping = nm.functions(Numerics(frac_bits=0, elem_dtype="int16"))
    assert wrapping.matmul.apply(out, a, b).tolist() == [[-(2**31)]]
    raising = nm.functions(Numerics(frac_bits=0, elem_dtype="int16"), overflow="raise")
    with pytest.raises(
        StepRuntimeError,
        match=r"^function 'matmul': result 2147483648 does not fit int32 \[-2147483648, 2147483647\] "
        r"\(overflow='raise'; the hardware wraps\)$",
    ):
        raising.matmul.apply(out, a, b)


def test_saturating_units_raise_under_raise():
    raising = nm.functions(Numerics(frac_bits=4, elem_dtype="int8"), overflow="raise")
    t = Tile(int8, 1, 1)
    with pytest.raises(
        StepRuntimeError,
        match=r"^function 'exp': the result of 127 \(Q4\) does not fit int8 \[-128, 127\] \(overflow='raise'; the hardware saturates\)$",
    ):
        raising.exp.apply(t, np.array([[127]]))
    with pytest.raises(
        StepRuntimeError, match=r"^function 'div': division by zero \(the hardware saturates\)$"
    ):
        raising.div.apply(t, np.array([[1]]), np.array([[0]]))
    with pytest.raises(
        StepRuntimeError, match=r"^function 'recip': division by zero \(the hardware saturates\)$"
    ):
        raising.recip.apply(t, np.array([[0]]))
    assert raising.exp.apply(t, np.array([[-128]])).tolist() == [[0]]  # underflow is no error


# -- in graphs --------------------------------------------------------------------------------


def run(build, types, tokens):
    g = Graph("t")
    srcs = [Source(g, ty, name=f"x{i}").out for i, ty in enumerate(types)]
    node = build(*srcs)
    Sink(node.out)
    return interpret(g, inputs={f"x{i}": t for i, t in enumerate(tokens)}).tokens(node.out)


def test_graph_runs_with_hardware_arithmetic():
    fns = nm.functions(SimpleNamespace(elem_dtype="int16", acc_dtype="int32", frac_bits=8))
    assert fns is nm.functions(Numerics(frac_bits=8, elem_dtype="int16"))  # cached, identical
    st16 = StreamType(Tile(int16, 1, 2), (1, 2, ragged("n")))
    x = [
        v.astype(np.int16) if isinstance(v, np.ndarray) else v
        for v in [
            np.array([[256, -256]]),
            Stop(1),
            np.array([[512, 0]]),
            np.array([[-2560, 2560]]),
            Stop(2),
            DONE,
        ]
    ]
    got = run(lambda s: Map(s, fn=fns.exp, name="e"), [st16], [x])
    assert [t.tolist() if isinstance(t, np.ndarray) else t for t in got] == [
        nm.exp_q(x[0], 16, 8).tolist(),
        Stop(1),
        nm.exp_q(x[2], 16, 8).tolist(),
        nm.exp_q(x[3], 16, 8).tolist(),
        Stop(2),
        DONE,
    ]
    # Accum of a sum that wraps in int16: 3 * 20000 = 60000 -> 60000 - 65536
    big = [np.array([[20000, 1]], dtype=np.int16)] * 3 + [Stop(1), Stop(2), DONE]
    got = run(lambda s: Accum(s, fn=fns.accum_add, rank=1, name="acc"), [st16], [big])
    assert got[0].tolist() == [[60000 - 65536, 3]] and got[1].tolist() == [[0, 0]]  # empty group
    got = run(lambda s: Scan(s, fn=fns.accum_max, rank=1, name="sc"), [st16], [big])
    assert [t.tolist() for t in got[:3]] == [[[20000, 1]]] * 3


def test_graph_raise_names_the_node():
    fns = nm.functions(Numerics(frac_bits=8, elem_dtype="int16"), overflow="raise")
    st16 = StreamType(Tile(int16, 1, 1), (2,))
    x = [np.array([[30000]], dtype=np.int16)] * 2 + [DONE]
    with pytest.raises(
        StepRuntimeError,
        match=r"^Map 'twice': function 'add': result 60000 does not fit int16 \[-32768, 32767\] "
        r"\(overflow='raise'; the hardware wraps\)$",
    ):
        run(lambda s, t: Map(s, t, fn=fns.add, name="twice"), [st16, st16], [x, x])


@pytest.mark.parametrize(
    ("types", "fn", "message"),
    [
        (
            [Tile(float32, 2, 2)],
            "exp",
            r"^Map 'bad', port 'in0': function 'exp' computes in fixed point and needs an int8, int16 or int32 tile, got Tile<float32, 2x2>$",
        ),
        (
            [Tile(int8, 2, 2)],
            "silu",
            r"^Map 'bad', port 'in0': function 'silu' has 8 fraction bits, more than a Tile<int8, 2x2> element holds$",
        ),
        (
            [Tile(int16, 2, 2), Tile(int32, 2, 2)],
            "add",
            r"^Map 'bad', port 'in1': function 'add' needs equal dtypes, got int16 and int32$",
        ),
        (
            [Tile(int16, 2, 3), Tile(int16, 2, 2)],
            "mul",
            r"^Map 'bad', port 'in1': function 'mul' cannot broadcast columns of Tile<int16, 2x3> and Tile<int16, 2x2>$",
        ),
        (
            [Tile(int16, 2, 3), Tile(int16, 2, 2)],
            "matmul",
            r"^Map 'bad', port 'in1': function 'matmul' needs matching inner dims, got Tile<int16, 2x3> and Tile<int16, 2x2>$",
        ),
    ],
)
def test_type_errors_name_the_node(types, fn, message):
    fns = nm.functions(Numerics(frac_bits=8, elem_dtype="int16"))
    g = Graph("t")
    srcs = [Source(g, StreamType(t, (3,))).out for t in types]
    with pytest.raises(StepTypeError, match=message):
        Map(*srcs, fn=getattr(fns, fn), name="bad")


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        (
            {"elem_dtype": "float64"},
            ValueError,
            r"^Numerics.elem_dtype must be one of int8, int16, int32, bfloat16, float32, "
            r"not 'float64'$",
        ),
        (
            {"elem_dtype": "float32"},
            ValueError,
            r"^Numerics: floating point is elem_dtype bfloat16 with acc_dtype float32, "
            r"not float32 with int32$",
        ),
        (
            {"elem_dtype": "bfloat16", "acc_dtype": "float32", "frac_bits": 8},
            ValueError,
            r"^Numerics.frac_bits applies to fixed point; bfloat16 has none \(0, not 8\)$",
        ),
        (
            {"frac_bits": 8, "elem_dtype": "int8"},
            ValueError,
            r"^Numerics.frac_bits must be an integer in \[0, 8\) for int8, not 8$",
        ),
        (
            {"frac_bits": True},
            ValueError,
            r"^Numerics.frac_bits must be an integer in \[0, 16\) for int16, not True$",
        ),
        (
            {"overflow": "saturate"},
            ValueError,
            r"^Numerics.overflow must be one of wrap, raise, not 'saturate'$",
        ),
        (
            {"elem_dtype": "int32", "acc_dtype": "int16"},
            ValueError,
            r"^Numerics.acc_dtype int16 is narrower than elem_dtype int32$",
        ),
    ],
)
def test_numerics_validation(kwargs, error, message):
    with pytest.raises(error, match=message):
        Numerics(**kwargs)


def test_functions_needs_a_config():
    with pytest.raises(
        TypeError,
        match=r"^Numerics need a Numerics or a config with elem_dtype, acc_dtype and frac_bits, not 8$",
    ):
        nm.functions(8)


def test_flops_follow_the_conventions():
    fns = nm.functions(Numerics(frac_bits=8))
    t = Tile(int16, 2, 3)
    assert fns.add.flops(t, t) == 6 and fns.exp.flops(t) == 24 and fns.silu.flops(t) == 48
    assert fns.row_sum.flops(t) == 6 and fns.matmul.flops(t, Tile(int16, 3, 4)) == 2 * 2 * 3 * 4
    assert {f.name for f in fns} >= {"add", "max", "exp", "matmul_t", "matmul_acc", "retile_row"}
    assert all(nm.is_fixed_point(f) for f in fns)
