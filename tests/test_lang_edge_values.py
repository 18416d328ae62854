"""The interpreter at the edges of its values and shapes: empty buffers read in any order,
integers at the limits of their dtypes, bfloat16 matmuls, tiles whose dynamic extents disagree,
and replays that name inputs a merge lacks. Each case was a silent wrong result or a raw numpy
traceback; each is now the right tokens or a one-line error naming the node."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from lang_helpers import SCALAR, run_op, show

from step_lang import (
    DONE,
    Accum,
    Bufferize,
    EagerMerge,
    FixedOrder,
    Graph,
    Map,
    Scan,
    Sink,
    Source,
    Stop,
    Streamify,
    StreamType,
    Tile,
    interpret,
    regular,
)
from step_lang import functions as F
from step_lang.errors import StepRuntimeError, StepTypeError
from step_lang.stoprules import grid_tokens
from step_lang.types import bfloat16, float32, int32, int64, uint64


def _tile(dt, rows: int, cols: int) -> Tile:
    return Tile(dt, rows, cols)


def _binary(fn, a_type: Tile, b_type: Tile, a, b):
    """Run ``Map(a, b, fn)`` on one element each; the output token list."""
    g = Graph("t")
    x = Source(g, StreamType(a_type, (1,)), name="a").out
    y = Source(g, StreamType(b_type, (1,)), name="b").out
    out = Map(x, y, fn=fn, name="m").out
    Sink(out)
    return interpret(g, inputs={"a": [a, DONE], "b": [b, DONE]}).tokens(out)


# -- Streamify: an empty buffer reads as the canonical empty tensor in every order -----------


@pytest.mark.parametrize("order", [None, (0, 1)])
def test_identity_order_reads_an_empty_buffer_as_the_stored_order_does(order):
    """[1, D, 2] with D = 0 is one empty buffer: read in its stored order or with the identity
    permutation, its closing stop (the permuted read used to write nothing, and the buffer
    vanished from the stream)."""
    d = regular("D")
    outs, _ = run_op(
        lambda x: Streamify(Bufferize(x, 2).out, order=order).out,
        {"x": (StreamType(SCALAR, (1, d, 2)), "S2 D")},
    )
    assert outs == ["S2 D"]


def test_an_empty_buffer_between_others_keeps_the_stream_shape():
    """Two buffers of [R, 2], the first empty: permuted or not, the first read is its closing
    stop, so the second is still the second (dim 1 stays 2)."""
    d = regular("R")
    for order in (None, (0, 1)):
        outs, _ = run_op(
            lambda x, order=order: Streamify(Bufferize(x, 2).out, order=order).out,
            {"x": (StreamType(SCALAR, (1, 2, d, 2)), "S2 1 2 S1 3 4 S3 D")},
        )
        assert outs == ["S2 1 2 S1 3 4 S3 D"]


def test_a_transposed_empty_buffer_is_one_empty_vector_per_row():
    """[D, 2] with D = 0 read (1, 0) is a 2 x 0 tensor: two empty innermost vectors."""
    d = regular("D")
    outs, _ = run_op(
        lambda x: Streamify(Bufferize(x, 2).out, order=(1, 0)).out,
        {"x": (StreamType(SCALAR, (1, d, 2)), "S2 D")},
    )
    assert outs == ["S1 S2 D"]


@pytest.mark.parametrize(
    ("shape", "stops"),
    [
        ((0,), [Stop(1)]),
        ((2, 0), [Stop(1), Stop(2)]),
        ((0, 2), [Stop(2)]),
        ((2, 0, 3), [Stop(2), Stop(3)]),
        ((2, 3, 0), [Stop(1), Stop(1), Stop(2), Stop(1), Stop(1), Stop(3)]),
        ((0, 0, 2), [Stop(3)]),
    ],
)
def test_an_empty_grid_is_written_in_the_canonical_form(shape, stops):
    """One empty sub-tensor per position of the dims outside the first extent 0, each its
    closing stop: what ``tokens.canonical`` makes of the same nested data."""
    from step_lang.tokens import canonical, to_tokens

    assert grid_tokens(shape, lambda m: ["x"]) == stops

    def nested(dims):
        return [nested(dims[1:]) for _ in range(dims[0])] if dims else 0

    assert to_tokens(canonical([nested(shape)], len(shape)), len(shape)) == [*stops, DONE]


# -- integer arithmetic cannot wrap ----------------------------------------------------------


def _i64(v: int) -> np.ndarray:
    return np.array([[v]], np.int64)


@pytest.mark.parametrize(
    ("fn", "a", "b", "message"),
    [
        (F.add, 2**63 - 1, 1, "result 9223372036854775808 does not fit int64"),
        (F.sub, -(2**63), 1, "result -9223372036854775809 does not fit int64"),
        (F.mul, 2**32, 2**32, "result 18446744073709551616 does not fit int64"),
    ],
)
def test_int64_overflow_is_an_error_not_a_wrap(fn, a, b, message):
    t = _tile(int64, 1, 1)
    with pytest.raises(StepRuntimeError, match=f"^Map 'm': function '.*': {message}"):
        _binary(fn, t, t, _i64(a), _i64(b))


def test_int64_accum_overflow_is_an_error():
    g = Graph("t")
    x = Source(g, StreamType(_tile(int64, 1, 1), (1, 2)), name="x").out
    Sink(Accum(x, fn=F.accum_add, rank=1, name="acc").out)
    with pytest.raises(StepRuntimeError, match="does not fit int64"):
        interpret(g, inputs={"x": [_i64(2**63 - 1), _i64(1), Stop(1), DONE]})


def test_int32_matmul_sums_exactly_before_the_range_check():
    """Four products of -2**31 * -2**31 sum to 2**64: int64 wrapped that to 0 (a silent
    result); the true sum is reported. Two of them were reported as -2**63."""
    a_type, b_type = _tile(int32, 1, 4), _tile(int32, 4, 1)
    a, b = np.full((1, 4), -(2**31), np.int32), np.full((4, 1), -(2**31), np.int32)
    with pytest.raises(StepRuntimeError, match="result 18446744073709551616 does not fit int32"):
        _binary(F.matmul(), a_type, b_type, a, b)
    a_type, b_type = _tile(int32, 1, 2), _tile(int32, 2, 1)
    with pytest.raises(StepRuntimeError, match="result 9223372036854775808 does not fit int32"):
        _binary(F.matmul(), a_type, b_type, a[:, :2], b[:2])
    # an int64 result of the same operands fits where it fits
    one = _tile(int32, 1, 1)
    (got, _) = _binary(F.matmul(out_dtype="int64"), one, one, a[:, :1], b[:1])
    assert got.dtype == np.int64 and got[0, 0] == 2**62


def test_uint64_values_above_int64_are_not_negative():
    t = _tile(uint64, 1, 1)
    big = np.array([[2**63]], np.uint64)
    (got, _) = _binary(F.add, t, t, big, np.array([[5]], np.uint64))
    assert got.dtype == np.uint64 and int(got[0, 0]) == 2**63 + 5


def test_integer_division_is_exact_and_rounds_toward_zero():
    t = _tile(int64, 1, 1)
    (got, _) = _binary(F.div, t, t, _i64(2**62 + 1), _i64(1))
    assert int(got[0, 0]) == 2**62 + 1  # float64 division gave 2**62
    for a, b, q in ((7, 2, 3), (-7, 2, -3), (7, -2, -3), (-7, -2, 3)):
        (got, _) = _binary(F.div, t, t, _i64(a), _i64(b))
        assert int(got[0, 0]) == q


def test_a_bool_result_must_be_0_or_1():
    t = _tile(int32, 1, 1)
    with pytest.raises(StepRuntimeError, match="result 6 is not 0 or 1; it cannot be cast to bool"):
        _binary(
            F.matmul(out_dtype="bool"), t, t, np.array([[2]], np.int32), np.array([[3]], np.int32)
        )
    (got, _) = _binary(
        F.matmul(out_dtype="bool"), t, t, np.array([[1]], np.int32), np.array([[1]], np.int32)
    )
    assert got.dtype == np.bool_ and got[0, 0]


# -- bfloat16 matmuls ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "fn", [F.matmul(), F.matmul(transpose_b=True), F.matmul(out_dtype="float32")]
)
def test_bfloat16_matmul_sums_in_float32(fn):
    """einsum does not take bfloat16 (a raw TypeError); the products are summed in float32 and
    cast to the output dtype once."""
    rng = np.random.default_rng(0)
    t = _tile(bfloat16, 4, 4)
    a, b = (rng.standard_normal((4, 4)).astype(ml_dtypes.bfloat16) for _ in range(2))
    (got, _) = _binary(fn, t, t, a, b)
    bb = b.T if fn.name == "matmul_t" else b
    want = np.einsum("ik,kj->ij", a.astype(np.float32), bb.astype(np.float32))
    assert got.dtype == fn.out_type(lambda p, m: AssertionError(m), t, t).dtype.numpy
    assert np.array_equal(got, want.astype(got.dtype))


def test_bfloat16_matmul_acc():
    g = Graph("t")
    t = _tile(bfloat16, 2, 2)
    x = Source(g, StreamType(t, (1, 2)), name="a").out
    y = Source(g, StreamType(t, (1, 2)), name="b").out
    out = Accum(x, y, fn=F.matmul_acc(), rank=1, name="acc").out
    Sink(out)
    one = np.ones((2, 2), ml_dtypes.bfloat16)
    toks = interpret(g, inputs={"a": [one, one, Stop(1), DONE], "b": [one, one, Stop(1), DONE]})
    assert np.array_equal(toks.tokens(out)[0], np.full((2, 2), 4, ml_dtypes.bfloat16))


# -- tiles of dynamic extents that disagree at run time --------------------------------------


@pytest.mark.parametrize("fn", [F.add, F.sub, F.mul, F.div, F.maximum])
def test_elementwise_tiles_that_do_not_broadcast_are_named(fn):
    a_type, b_type = _tile(int32, regular("D"), 2), _tile(int32, regular("E"), 2)
    with pytest.raises(
        StepRuntimeError,
        match=rf"^Map 'm': function '{fn.name}': tiles of 2x2 and 3x2 do not broadcast",
    ):
        _binary(fn, a_type, b_type, np.ones((2, 2), np.int32), np.ones((3, 2), np.int32))


def test_row_append_of_a_row_of_other_columns_is_named():
    g = Graph("t")
    tile = Source(g, StreamType(_tile(int32, 2, regular("D")), (1,)), name="t").out
    row = Source(g, StreamType(_tile(int32, 1, regular("E")), (1,)), name="r").out
    at = Source(g, StreamType(SCALAR, (1,)), name="k").out
    Sink(Map(tile, row, at, fn=F.row_append, name="m").out)
    inputs = {"t": [np.zeros((2, 2), np.int32), DONE], "r": [np.ones((1, 3), np.int32), DONE],
              "k": [np.zeros((1, 1), np.int32), DONE]}  # fmt: skip
    with pytest.raises(StepRuntimeError, match="row of 3 columns into a tile of 2 columns"):
        interpret(g, inputs=inputs)


# -- Scan of an accumulator that grows -------------------------------------------------------


def test_scan_refuses_a_function_whose_accumulator_grows():
    """Scan emits the accumulator after every element: retile_row's grows a row per element,
    so no one tile type holds them (the graph was built and every run failed)."""
    g = Graph("t")
    x = Source(g, StreamType(_tile(int32, 1, 2), (1, 2)), name="x").out
    with pytest.raises(StepTypeError, match=r"^Scan 'sc', port 'in0': function 'retile_row' grows"):
        Scan(x, fn=F.retile_row, rank=1, name="sc")
    assert (
        show(
            run_op(
                lambda x: Scan(x, fn=F.accum_add, rank=1).out,
                {"x": (StreamType(SCALAR, (1, 2)), "1 2 S1 D")},
            )[1].tokens("scan0.out")
        )
        == "1 3 S1 D"
    )


# -- FixedOrder ------------------------------------------------------------------------------


def test_a_fixed_order_naming_a_missing_input_fails_even_without_chunks():
    g = Graph("t")
    a = Source(g, StreamType(SCALAR, (regular("A"),)), name="a").out
    b = Source(g, StreamType(SCALAR, (regular("B"),)), name="b").out
    merge = EagerMerge([a, b], name="mg")
    for o in merge.outputs:
        Sink(o)
    with pytest.raises(StepRuntimeError, match="step 0 names input 5, but the merge has 2 inputs"):
        interpret(g, inputs={"a": [DONE], "b": [DONE]}, merge_policy=FixedOrder([5]))


def test_an_integer_matmul_into_a_float_accumulator_sums_exactly():
    """int16 operands into a float32 accumulator: the products are summed as integers (int16
    arithmetic would wrap 4 * 30000**2), then added to the accumulator."""
    a, b = np.full((1, 4), 30000, np.int16), np.full((4, 1), 30000, np.int16)
    fn = F.matmul_acc(out_dtype="float32")
    got = fn.update(Tile(float32, 1, 1), np.zeros((1, 1), np.float32), a, b)
    assert got.dtype == np.float32 and got[0, 0] == np.float32(4 * 30000**2)
