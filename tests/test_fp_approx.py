"""BF16 exp, silu, recip and div: the Amaranth datapaths (step_hw/compute/fp_approx.py) against
the numpy model (step_lang/float_approx.py) bit for bit, and the model against float64.

The single-input datapaths see all 65,536 BF16 inputs on the Amaranth simulator
(``fp_cells.evaluate``: 128 copies driven in parallel, 512 simulator steps per unit); division
sees every pair of special values and random pairs. The model's errors are measured in ulps of
the correctly rounded float64 result (``float_approx.ulp_error``): exhaustively for the
single-input functions, on every pair of significands at the exponents of the normal range's
edges and on 10**6 random pairs for div.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from step_hw.compute import fp_approx as hw
from step_hw.compute.fp_cells import evaluate
from step_lang import float_approx as fa

ALL_BF16 = np.arange(2**16, dtype=np.uint32).astype(np.uint16)

# zeros, subnormals, smallest normals, largest normals, ones, infinities, NaNs (quiet,
# signalling, negative), and a few ordinary values
SPECIAL = [
    0x0000, 0x8000, 0x0001, 0x807F, 0x0080, 0x8080, 0x7F7F, 0xFF7F, 0x3F80, 0xBF80,
    0x7F80, 0xFF80, 0x7FC0, 0x7F81, 0xFFFF, 0x4040, 0xC0A0, 0x3F81,
]  # fmt: skip


def _show(bad: np.ndarray, *cols: np.ndarray) -> str:
    return ", ".join(" ".join(f"{int(c[i]):#06x}" for c in cols) for i in bad[:5])


def _assert_same(got: np.ndarray, want: np.ndarray, *inputs: np.ndarray) -> None:
    bad = np.flatnonzero(got != want)
    assert not bad.size, f"{bad.size} mismatches (inputs, got, want): " + _show(
        bad, *inputs, got, want
    )


def _div_pairs(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Every pair of special values, then ``n`` random pairs, half of them of nearby
    magnitudes (``b`` is ``a`` with a few low bits and maybe the sign flipped)."""
    sp = np.array(list(itertools.product(SPECIAL, repeat=2)), dtype=np.uint16)
    rng = np.random.default_rng(seed)
    a = rng.integers(0, 2**16, n).astype(np.uint16)
    b = rng.integers(0, 2**16, n).astype(np.uint16)
    near = rng.random(n) < 0.5
    flips = rng.integers(0, 2**5, n).astype(np.uint16) | (0x8000 * (rng.random(n) < 0.5))
    b[near] = a[near] ^ flips[near].astype(np.uint16)
    return np.concatenate([sp[:, 0], a]), np.concatenate([sp[:, 1], b])


# ---------------------------------------------------------------------------------------------
# Hardware against the model, bit for bit

UNARY = {
    "exp": (hw.exp_bf16, fa.exp_bf16),
    "silu": (hw.silu_bf16, fa.silu_bf16),
    "recip": (hw.recip_bf16, fa.recip_bf16),
}


@pytest.mark.parametrize("unit", sorted(UNARY))
def test_every_bf16_input_matches_the_model(unit):
    build, model = UNARY[unit]
    _assert_same(evaluate(build, [ALL_BF16]), model(ALL_BF16), ALL_BF16)


def test_div_on_special_and_random_pairs_matches_the_model():
    a, b = _div_pairs(20_000, seed=1)
    _assert_same(evaluate(hw.div_bf16, [a, b]), fa.div_bf16(a, b), a, b)


# ---------------------------------------------------------------------------------------------
# The model against float64


def _reference(fn: str, v: np.ndarray, w: np.ndarray | None = None) -> np.ndarray:
    """float64 values of ``fn`` on float64 operands, correctly rounded to BF16."""
    with np.errstate(all="ignore"):
        exact = {
            "exp": lambda: np.exp(v),
            "silu": lambda: np.where(v == -np.inf, -0.0, v / (1 + np.exp(-v))),
            "recip": lambda: 1 / v,
            "div": lambda: v / w,
        }[fn]()
    return fa.round_f64_to_bf16(exact)


def _errors(fn: str, got: np.ndarray, *args: np.ndarray) -> tuple[float, float]:
    """Worst error in ulps and the fraction of results equal to the correctly rounded ones."""
    want = _reference(fn, *(fa.bf16_values(a) for a in args))
    err = fa.ulp_error(got, want)
    return float(err.max()), float(np.mean(got == want))


@pytest.mark.parametrize("fn", ["exp", "silu", "recip"])
def test_single_input_error_is_within_the_bound_on_every_input(fn):
    worst, exact = _errors(fn, UNARY[fn][1](ALL_BF16), ALL_BF16)
    assert worst <= fa.ERROR_BOUNDS[fn], (fn, worst)
    assert exact >= 0.999, (fn, exact)  # almost all correctly rounded


def test_div_error_is_within_the_bound_on_random_pairs():
    a, b = _div_pairs(1_000_000, seed=2)
    worst, exact = _errors("div", fa.div_bf16(a, b), a, b)
    assert worst <= fa.ERROR_BOUNDS["div"], worst
    assert exact >= 0.999, exact


@pytest.mark.parametrize(
    ("exp_a", "exp_b"),
    [(127, 127), (1, 127), (1, 128), (2, 128), (254, 127), (254, 126), (100, 30), (3, 250)],
)
def test_div_error_is_within_the_bound_for_every_pair_of_significands(exp_a, exp_b):
    """The quotient's significand depends only on the operands' significands; the chosen
    exponents put results at the edges of the normal range (flush to zero, overflow)."""
    sig = np.arange(2**7, dtype=np.uint16)
    fa_, fb_ = (g.ravel() for g in np.meshgrid(sig, sig))
    for sign_a, sign_b in itertools.product((0, 0x8000), repeat=2):
        a = (sign_a | (exp_a << 7) | fa_).astype(np.uint16)
        b = (sign_b | (exp_b << 7) | fb_).astype(np.uint16)
        worst, _ = _errors("div", fa.div_bf16(a, b), a, b)
        assert worst <= fa.ERROR_BOUNDS["div"], (exp_a, exp_b, worst)


def _bits(values: list[int]) -> np.ndarray:
    return np.array(values, dtype=np.uint16)


@pytest.mark.parametrize(
    ("fn", "inputs", "outputs"),
    [
        ("exp", [0xFF80, 0x7F80, 0x0000, 0x8000, 0x0001, 0x807F], [0, 0x7F80] + [0x3F80] * 4),
        ("exp", [0x7FC0, 0xFFC1, 0x7F81], [0x7FC0] * 3),
        ("silu", [0x7F80, 0xFF80, 0x0000, 0x8000, 0x0001, 0x807F], [0x7F80, 0x8000, 0, 0x8000, 0, 0x8000]),
        ("silu", [0x7F7F, 0xFF7F, 0x7FC0, 0xFFFF], [0x7F7F, 0x8000, 0x7FC0, 0x7FC0]),
        ("recip", [0x0000, 0x8000, 0x0001, 0x807F, 0x7F80, 0xFF80], [0x7F80, 0xFF80] * 2 + [0, 0x8000]),
        ("recip", [0x3F80, 0xC000, 0x7F7F, 0x7FC0], [0x3F80, 0xBF00, 0, 0x7FC0]),
    ],
)  # fmt: skip
def test_specials_of_the_single_input_functions(fn, inputs, outputs):
    x = _bits(inputs)
    _assert_same(UNARY[fn][1](x), _bits(outputs), x)


def test_specials_of_div():
    zero, inf, one, two, sub = 0x0000, 0x7F80, 0x3F80, 0x4000, 0x0001
    neg = 0x8000
    cases = [
        (zero, zero, 0x7FC0), (neg | zero, sub, 0x7FC0), (inf, neg | inf, 0x7FC0),
        (one, zero, inf), (one, neg | zero, neg | inf), (neg | two, sub, neg | inf),
        (zero, one, zero), (zero, neg | two, neg | zero), (sub, one, zero),
        (inf, two, inf), (neg | inf, two, neg | inf), (inf, zero, inf),
        (one, inf, zero), (neg | two, inf, neg | zero), (zero, inf, zero),
        (0x7FC0, one, 0x7FC0), (one, 0xFF81, 0x7FC0), (two, two, one),
        (0x7F7F, 0x3F00, inf), (0x0080, 0x4000, zero), (0x0080, 0x3F80, 0x0080),
    ]  # fmt: skip
    a, b, want = (_bits(list(c)) for c in zip(*cases, strict=True))
    _assert_same(fa.div_bf16(a, b), want, a, b)


def test_tables_are_small():
    """The hardware replicates these per tile element: at most 33 knots each."""
    assert len(fa.EXP2_TABLE) <= 33 and len(fa.RECIP_TABLE) <= 33
    assert fa.LOG2E_WIDE.bit_length() <= 24
