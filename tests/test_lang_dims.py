"""Dimensions: the absorbing rule, symbol naming, and token converters on edge cases."""

from __future__ import annotations

import numpy as np
import pytest
import sympy as sp
from lang_helpers import SCALAR, parse, sc

from step_lang import (
    DONE,
    Flatten,
    Graph,
    RaggedSymbol,
    Reshape,
    Source,
    StepValueError,
    Stop,
    StreamType,
    array_to_tokens,
    canonical,
    from_tokens,
    ragged,
    regular,
    to_tokens,
    tokens_to_array,
)
from step_lang.dims import absorb, ceil_div, dims_equal, is_ragged


def test_flatten_of_ragged_mints_a_fresh_named_symbol():
    g = Graph()
    x = Source(g, StreamType(SCALAR, (2, 2, ragged("D0"))), name="x").out
    y = Flatten(x, 0, 1, name="flat").out
    assert y.shape[0] == 2
    assert isinstance(y.shape[1], RaggedSymbol) and str(y.shape[1]) == "flat_n"


def test_flatten_of_regular_keeps_the_product():
    g = Graph()
    d = regular("D")
    x = Source(g, StreamType(SCALAR, (1, d, 4)), name="x").out
    assert Flatten(x, 0, 1).out.shape == (1, 4 * d)


def test_reshape_of_regular_is_a_ceiling():
    g = Graph()
    d = regular("D")
    x = Source(g, StreamType(SCALAR, (1, d)), name="x").out
    y = Reshape(x, 4, pad=sc(0)).out
    assert y.shape == (1, sp.ceiling(d / 4), 4)


def test_absorb_rule():
    r, n = ragged("r"), regular("n")
    fresh = iter([ragged("fresh")])
    assert absorb(3 * n, lambda: next(fresh)) == 3 * n
    assert absorb(r, lambda: next(fresh)) == r
    assert str(absorb(2 * r + n, lambda: next(fresh))) == "fresh"
    assert is_ragged(r + 1) and not is_ragged(n + 1)
    assert ceil_div(10, 4) == 3 and ceil_div(0, 4) == 0
    assert dims_equal(n, n) is True and dims_equal(3, 4) is False and dims_equal(n, 4) is None


def test_ragged_and_regular_symbols_differ():
    assert ragged("x") != regular("x")
    assert regular("x") == regular("x")
    assert ragged("x").is_integer and ragged("x").is_nonnegative


@pytest.mark.parametrize(
    ("nested", "rank", "text"),
    [
        ([], 0, "D"),
        ([[]], 1, "S1 D"),
        ([[], []], 1, "S1 S1 D"),
        ([[[], []]], 2, "S1 S2 D"),
        ([[[1], []]], 2, "1 S1 S2 D"),
        ([[[], [1]]], 2, "S1 1 S2 D"),
        ([[[1, 2], [3]], [[4], [5, 6, 7]]], 2, "1 2 S1 3 S2 4 S1 5 6 7 S2 D"),
    ],
)
def test_converters_on_empty_and_ragged(nested, rank, text):
    def as_tiles(n, k):
        return [sc(v) for v in n] if k == 1 else [as_tiles(c, k - 1) for c in n]

    data = as_tiles(nested, rank + 1)
    toks = to_tokens(data, rank)
    assert [t if isinstance(t, Stop) or t is DONE else int(t[0, 0]) for t in toks] == [
        t if isinstance(t, Stop) or t is DONE else int(t[0, 0]) for t in parse(text)
    ]
    back = from_tokens(toks, rank)

    def values(n, k):
        return [int(v[0, 0]) for v in n] if k == 1 else [values(c, k - 1) for c in n]

    assert values(back, rank + 1) == nested


def test_empty_non_innermost_dim_is_rejected_and_canonicalised():
    with pytest.raises(
        StepValueError, match=r"^dimension of rank 1 at \[0\] is empty; stop tokens"
    ):
        to_tokens([[]], 2)
    assert canonical([[]], 2) == [[[]]]
    assert from_tokens(to_tokens(canonical([[]], 2), 2), 2) == [[[]]]


def test_array_round_trip():
    arr = np.arange(2 * 3 * 4, dtype=np.int32).reshape(2, 3, 1, 4)
    toks = array_to_tokens(arr, rank=1, elem_ndim=2)
    assert sum(isinstance(t, Stop) for t in toks) == 2
    assert np.array_equal(tokens_to_array(toks, 1, (2, 3)), arr)
