"""Every operator on the worked token examples of the reference (STEP_REFERENCE §1-§3, §12)."""

from __future__ import annotations

import numpy as np
import pytest
from lang_helpers import SCALAR, parse, run_op, sc, show

from step_lang import (
    Accum,
    Bufferize,
    EagerMerge,
    Expand,
    FixedOrder,
    FlatMap,
    Flatten,
    Graph,
    LinearOffChipLoad,
    LinearOffChipStore,
    Map,
    Parallelize,
    Partition,
    Promote,
    RandomOffChipLoad,
    RandomOffChipStore,
    Reassemble,
    RepeatStatic,
    Reshape,
    RetileStreamify,
    Scan,
    Selector,
    Sink,
    Source,
    Streamify,
    StreamType,
    Tile,
    Zip,
    format_tokens,
    from_tokens,
    interpret,
    ragged,
    regular,
)
from step_lang import functions as F
from step_lang.types import int32


def st(*shape, elem=SCALAR):
    return StreamType(elem, shape)


def test_ragged_example_decodes_to_paper_tensors():
    toks = parse("1 2 S1 3 S2 4 S1 5 6 7 S2 D")
    nested = from_tokens(toks, 2)
    values = [[[int(v[0, 0]) for v in row] for row in t] for t in nested]
    assert values == [[[1, 2], [3]], [[4], [5, 6, 7]]]


def test_accum_add_rank1():
    (out,), _ = run_op(
        lambda x: Accum(x, fn=F.accum_add, rank=1).out, {"x": (st(1, 2, 2), "1 2 S1 3 4 S2 D")}
    )
    assert out == "3 7 S1 D"


def test_accum_rank2_reduces_whole_tensors():
    (out,), _ = run_op(
        lambda x: Accum(x, fn=F.accum_add, rank=2).out, {"x": (st(1, 2, 2), "1 2 S1 3 4 S2 D")}
    )
    assert out == "10 D"


def test_scan_add():
    (out,), _ = run_op(
        lambda x: Scan(x, fn=F.accum_add, rank=1).out, {"x": (st(1, 2, 2), "1 2 S1 3 4 S2 D")}
    )
    assert out == "1 3 S1 3 7 S2 D"


def test_map_binary_add():
    (out,), _ = run_op(
        lambda x, y: Map(x, y, fn=F.add).out,
        {"x": (st(1, 2), "1 2 S1 D"), "y": (st(1, 2), "10 20 S1 D")},
    )
    assert out == "11 22 S1 D"


def test_flatmap_doubles_each_element():
    dup = F.FlatMapFn("dup", 1, 1, lambda err, t: (t, (2,), 1), lambda out, x: [[x, x]])
    (out,), res = run_op(lambda x: FlatMap(x, fn=dup).out, {"x": (st(1, 2), "1 2 S1 D")})
    assert out == "1 1 S1 2 2 S2 D"
    assert res.streams  # every stream was checked against its type


def test_retile_streamify_rows():
    g = Graph()
    from step_lang import Source

    x = Source(g, st(1, 1, elem=Tile(int32, 2, 4)), name="x").out
    y = RetileStreamify(x).out
    Sink(y)
    tile = np.arange(8, dtype=np.int32).reshape(2, 4)
    r = interpret(g, inputs={"x": [[tile]]})
    toks = r.tokens(y)
    assert [t.tolist() for t in toks[:2]] == [[[0, 1, 2, 3]], [[4, 5, 6, 7]]]
    assert format_tokens(toks[2:]) == "S1 D"
    assert y.shape == (1, 2)


def test_flatten_inner_two():
    (out,), _ = run_op(lambda x: Flatten(x, 0, 1).out, {"x": (st(1, 2, 3), "1 2 3 S1 4 5 6 S2 D")})
    assert out == "1 2 3 4 5 6 S1 D"


def test_flatten_outer_pair_keeps_inner_stops():
    (out,), _ = run_op(
        lambda x: Flatten(x, 1, 2).out, {"x": (st(1, 2, 2, 1), "1 S1 2 S2 3 S1 4 S3 D")}
    )
    assert out == "1 S1 2 S1 3 S1 4 S2 D"


def test_reshape_pads_ragged_innermost():
    outs, _ = run_op(
        lambda x: Reshape(x, 2, pad=sc(0), pad_flags=True).outputs,
        {"x": (st(1, 2, ragged("D0")), "1 2 3 S1 4 S2 D")},
    )
    assert outs == ["1 2 S1 3 0 S2 4 0 S3 D", "False False S1 False True S2 False True S3 D"]


def test_reshape_outer_dim():
    (out,), _ = run_op(
        lambda x: Reshape(x, 2, rank=1).out, {"x": (st(1, 4, 1), "1 S1 2 S1 3 S1 4 S2 D")}
    )
    assert out == "1 S1 2 S2 3 S1 4 S3 D"


def test_promote_positional():
    (out,), _ = run_op(lambda x: Promote(x, 1).out, {"x": (st(1, 3), "1 2 3 S1 D")})
    assert out == "1 2 3 S2 D"


def test_promote_innermost_position():
    (out,), _ = run_op(lambda x: Promote(x, 0).out, {"x": (st(1, 2), "1 2 S1 D")})
    assert out == "1 S1 2 S2 D"


@pytest.mark.parametrize(("tokens", "expected"), [("D", "D"), ("1 2 D", "1 2 S1 D")])
def test_promote_outermost_handles_empty(tokens, expected):
    (out,), _ = run_op(lambda x: Promote(x).out, {"x": (st(regular("N")), tokens)})
    assert out == expected


def test_expand_by_reference():
    (out,), _ = run_op(
        lambda x, r: Expand(x, r, 1).out,
        {"x": (st(1, 2, 1), "7 S1 8 S2 D"), "r": (st(1, 2, ragged("R")), "0 0 0 S1 0 S2 D")},
    )
    assert out == "7 7 7 S1 8 S2 D"


def test_repeat_static():
    (out,), _ = run_op(lambda x: RepeatStatic(x, 3).out, {"x": (st(1, 2), "1 2 S1 D")})
    assert out == "1 1 1 S1 2 2 2 S2 D"


def test_zip_pairs_elements():
    (out,), _ = run_op(
        lambda a, b: Zip(a, b).out, {"a": (st(1, 2), "1 2 S1 D"), "b": (st(1, 2), "3 4 S1 D")}
    )
    assert (
        out
        == "(array([[1]], dtype=int32), array([[3]], dtype=int32)) (array([[2]], dtype=int32), array([[4]], dtype=int32)) S1 D"
    )


def test_a_function_on_a_zip_takes_its_tuples_apart():
    """``Map(Zip(a, b), add)`` unpacks the tuple (``Node.unpacks_tuple``, which the simulator
    and the elaborator read too) and adds what ``Map(a, b, add)`` adds; a Map of two streams
    and an operator without a function do not unpack."""
    g = Graph("zipped")
    a = Source(g, st(1, 2), name="a").out
    b = Source(g, st(1, 2), name="b").out
    zipped = Map(Zip(a, b).out, fn=F.add, name="zipped")
    pairs = Map(a, b, fn=F.add, name="pairs")
    assert zipped.unpacks_tuple and not pairs.unpacks_tuple
    assert not zipped.inputs[0].node.unpacks_tuple  # the Zip itself
    assert zipped.arg_types == pairs.arg_types
    x, y = np.ones((1, 1), np.int32), np.full((1, 1), 2, np.int32)
    assert zipped.fn_args([(x, y)]) == pairs.fn_args([x, y]) == (x, y)
    Sink(zipped.out)
    Sink(pairs.out)
    res = interpret(g, inputs={"a": parse("1 2 S1 D"), "b": parse("3 4 S1 D")})
    assert show(res.tokens(zipped.out)) == show(res.tokens(pairs.out)) == "4 6 S1 D"


def test_partition_rank0():
    outs, _ = run_op(
        lambda x, s: Partition(x, s, 0).outputs,
        {"x": (st(3), "1 2 3 D"), "s": (st(3, elem=Selector(2)), "[10] [01] [11] D")},
    )
    assert outs == ["1 3 D", "2 3 D"]


def test_partition_rank1_ragged():
    outs, res = run_op(
        lambda x, s: Partition(x, s, 1, name="route").outputs,
        {
            "x": (st(1, 3, ragged("R")), "1 2 S1 3 S1 4 5 S2 D"),
            "s": (st(1, 3, elem=Selector(2)), "[10] [01] [10] S1 D"),
        },
    )
    assert outs == ["1 2 S1 4 5 S1 D", "3 S1 D"]
    assert res.bindings.values() == {"route_n000": 2, "route_n001": 1}


def test_reassemble_rank0_index_order():
    (out,), _ = run_op(
        lambda a, b, c, s: Reassemble([a, b, c], s).out,
        {
            "a": (st(regular("na")), "1 D"),
            "b": (st(regular("nb")), "2 D"),
            "c": (st(regular("nc")), "3 D"),
            "s": (st(1, 2, elem=Selector(3)), "[110] [001] S1 D"),
        },
    )
    assert out == "1 2 S1 3 S2 D"


def test_reassemble_rank1_keeps_chunks_whole():
    (out,), _ = run_op(
        lambda a, b, s: Reassemble([a, b], s).out,
        {
            "a": (st(regular("na"), 2), "1 2 S1 D"),
            "b": (st(regular("nb"), 2), "3 4 S1 D"),
            "s": (st(1, elem=Selector(2)), "[11] D"),
        },
    )
    assert out == "1 2 S1 3 4 S2 D"


def test_eager_merge_follows_arrival_policy():
    outs, _ = run_op(
        lambda a, b: EagerMerge([a, b]).outputs,
        {"a": (st(regular("na")), "1 2 D"), "b": (st(regular("nb")), "3 D")},
        merge_policy=FixedOrder([1, 0, 0]),
    )
    assert outs == ["3 1 2 D", "[01] [10] [10] D"]


def test_eager_merge_rank1_chunks():
    outs, _ = run_op(
        lambda a, b: EagerMerge([a, b]).outputs,
        {"a": (st(regular("na"), 2), "1 2 S1 D"), "b": (st(regular("nb"), 2), "3 4 S1 D")},
        merge_policy=FixedOrder([1, 0]),
    )
    assert outs == ["3 4 S1 1 2 S1 D", "[01] [10] D"]


def test_parallelize_round_robin():
    outs, _ = run_op(
        lambda x: Parallelize(x, 2, rank=0).outputs, {"x": (st(1, 5), "1 2 3 4 5 S1 D")}
    )
    assert outs == ["1 3 5 D", "2 4 D"]


def test_parallelize_chunks_of_rank1():
    outs, _ = run_op(
        lambda x: Parallelize(x, 2).outputs, {"x": (st(3, 2), "1 2 S1 3 4 S1 5 6 S1 D")}
    )
    assert outs == ["1 2 S1 5 6 S1 D", "3 4 S1 D"]


def test_bufferize_then_streamify_static_repeat():
    (buf, out), _ = run_op(
        lambda x: [b := Bufferize(x, 1).out, Streamify(b, repeat=[2]).out],
        {"x": (st(1, 2, 2), "1 2 S1 3 4 S2 D")},
    )
    assert buf == "Buffer(2 elements) Buffer(2 elements) S1 D"
    assert out == "1 2 S1 1 2 S2 3 4 S1 3 4 S3 D"


def test_streamify_by_reference():
    (out,), _ = run_op(
        lambda x, r: Streamify(Bufferize(x, 1).out, ref=r).out,
        {"x": (st(1, 2), "1 2 S1 D"), "r": (st(1, 3), "0 0 0 S1 D")},
    )
    assert out == "1 2 S1 1 2 S1 1 2 S2 D"


def test_streamify_affine_transposed_read():
    (out,), _ = run_op(
        lambda x: Streamify(Bufferize(x, 2).out, stride=(1, 2), out_shape=(2, 2)).out,
        {"x": (st(1, 2, 2), "1 2 S1 3 4 S2 D")},
    )
    assert out == "1 3 S1 2 4 S2 D"


def _load_graph(**kw):
    g = Graph()
    t = g.tensor("w", (64, 256), "int32")
    load = LinearOffChipLoad(t, tile=(64, 64), **kw)
    Sink(load.out)
    return g, load


W = np.arange(64 * 256, dtype=np.int32).reshape(64, 256)


def _tile_names(tokens):
    return format_tokens(tokens, lambda t: f"t{t[0, 0] // 64}")


def test_linear_load_stride_zero_rereads():
    g, load = _load_graph(stride=(0, 0, 1), out_shape=(3, 1, 4))
    r = interpret(g, {"w": W})
    assert _tile_names(r.tokens(load.out)) == "t0 t1 t2 t3 S2 t0 t1 t2 t3 S2 t0 t1 t2 t3 S3 D"
    assert load.out.shape == (1, 3, 1, 4)


def test_linear_load_with_reference():
    g = Graph()
    from step_lang import Source

    t = g.tensor("w", (64, 128), "int32")
    ref = Source(g, st(1, 2), name="ref").out
    load = LinearOffChipLoad(t, tile=(64, 64), out_shape=(2,), stride=(1,), ref=ref)
    Sink(load.out)
    r = interpret(g, {"w": W[:, :128]}, inputs={"ref": parse("0 0 S1 D")})
    assert _tile_names(r.tokens(load.out)) == "t0 t1 S1 t0 t1 S2 D"
    assert load.out.shape == (1, 2, 2)


def test_random_load_follows_addresses():
    g = Graph()
    from step_lang import Source

    t = g.tensor("w", (64, 256), "int32")
    a = Source(g, st(1, 2, elem=Tile(int32, 1, 1)), name="a").out
    load = RandomOffChipLoad(a, t, tile=(64, 64))
    Sink(load.out)
    r = interpret(g, {"w": W}, inputs={"a": parse("3 1 S1 D")})
    assert _tile_names(r.tokens(load.out)) == "t3 t1 S1 D"


def test_random_store_writes_and_acks():
    g = Graph()
    from step_lang import Source

    t = g.tensor("o", (2, 2), "int32")
    a = Source(g, st(1, 2), name="a").out
    d = Source(g, st(1, 2), name="d").out
    store = RandomOffChipStore(a, d, t)
    Sink(store.out)
    r = interpret(g, inputs={"a": parse("3 0 S1 D"), "d": parse("7 9 S1 D")})
    assert r.memory["o"].tolist() == [[9, 0], [0, 7]]
    assert show(r.tokens(store.out)) == "True True S1 D"


def test_linear_store_round_trip():
    g = Graph()
    src = g.tensor("x", (4, 8), "int32")
    dst = g.tensor("y", (4, 8), "int32")
    LinearOffChipStore(LinearOffChipLoad(src, tile=(2, 4)).out, dst)
    x = np.arange(32, dtype=np.int32).reshape(4, 8)
    r = interpret(g, {"x": x})
    assert np.array_equal(r.memory["y"], x)
    assert r.written == {"y"}
