"""Graph IR: naming, broadcast insertion, feedback loops, deadlock reports, DOT export."""

from __future__ import annotations

import numpy as np
import pytest
from lang_helpers import SCALAR, parse, sc, show

from step_lang import (
    EagerMerge,
    Feedback,
    Flatten,
    Graph,
    LinearOffChipLoad,
    LinearOffChipStore,
    Map,
    Partition,
    Reassemble,
    RoundRobin,
    Selector,
    Sink,
    Source,
    StepDeadlock,
    StepGraphError,
    StreamType,
    Tile,
    interpret,
    regular,
)
from step_lang import functions as F
from step_lang.passes import lower
from step_lang.types import int32


def test_a_tensors_dtype_is_given_by_position_or_by_name():
    """``Graph.tensor(name, shape, dtype)``, as docs/semantics.md writes it (the keyword was
    ``dtype_`` until 2026-12-07, so ``dtype=`` raised ``TypeError``)."""
    g = Graph("t")
    assert g.tensor("a", (4, 4), dtype="int32").dtype == int32
    assert g.tensor("b", (4, 4), "int32").dtype == int32
    assert g.tensor("c", (4, 4)).dtype.name == "float32"


def test_auto_names_are_deterministic_and_unique():
    g = Graph()
    x = Source(g, StreamType(SCALAR, (4,)), name="x").out
    a = Map(x, x, fn=F.add)
    b = Map(a.out, a.out, fn=F.mul)
    assert (a.name, b.name) == ("map0", "map1")
    Sink(b.out)
    assert list(g.nodes) == ["x", "map0", "map1", "sink0"]


def test_fan_out_gets_one_broadcast_per_stream():
    g = Graph()
    x = Source(g, StreamType(SCALAR, (3,)), name="x").out
    y = Map(x, x, fn=F.add, name="double")
    Sink(y.out)
    r = interpret(g, inputs={"x": parse("1 2 3 D")})
    assert show(r.tokens(y.out)) == "2 4 6 D"
    assert list(g.nodes) == ["x", "double", "sink0"]  # the user's graph is not changed
    low = lower(g)
    bc = low.nodes["x_out_bc"]
    assert bc.kind == "Broadcast" and bc.n == 2
    assert [s.name for s in low.nodes["double"].inputs] == ["x_out_bc.out0", "x_out_bc.out1"]
    assert [s.name for s in y.inputs] == ["x.out", "x.out"]
    again = lower(low)  # idempotent: a lowered graph lowers to an equal copy
    assert list(again.nodes) == list(low.nodes)
    assert sum(n.kind == "Broadcast" for n in again.nodes.values()) == 1


def _region_id(i: int, n: int) -> F.MapFn:
    """Map any element to the [1, n] one-hot tile of region ``i`` (a completion signal)."""

    def apply(out, x):
        t = np.zeros((1, n), dtype=np.int32)
        t[0, i] = 1
        return t

    return F.MapFn(f"region{i}", 1, lambda err, t: Tile(int32, 1, n), lambda t: 0, apply)


def dynamic_parallel_graph(n_requests: int, regions: int) -> Graph:
    """Requests go to whichever region signalled completion first (a feedback loop)."""
    g = Graph("dynpar")
    req_t = g.tensor("req", (n_requests, 1), "int32")
    out_t = g.tensor("out", (n_requests, 1), "int32")
    init = g.tensor("init", (regions, regions), "int32")
    keep = Source(g, StreamType(Selector(1), (n_requests + regions,)), name="keep").out
    req = Flatten(
        LinearOffChipLoad(req_t, tile=(1, 1), out_shape=(n_requests,), name="requests").out, 0, 1
    ).out
    seed = Flatten(
        LinearOffChipLoad(init, tile=(1, regions), out_shape=(regions,), name="seed").out, 0, 1
    ).out
    fb = Feedback(g, StreamType(Tile(int32, 1, regions), (regular("F"),)), name="free")
    avail_merge = EagerMerge([seed, fb.out], name="avail")
    avail = avail_merge.outputs[0]
    Sink(avail_merge.outputs[1])
    first_n = Partition(avail, keep, 0, name="cut").outputs[0]
    sel = Map(first_n, fn=F.to_selector(regions), name="sel").out
    lanes = Partition(req, sel, 0, name="dispatch").outputs
    done = [Map(lane, lane, fn=F.mul, name=f"work{i}").out for i, lane in enumerate(lanes)]
    signals = [Map(d, fn=_region_id(i, regions), name=f"signal{i}").out for i, d in enumerate(done)]
    merged = EagerMerge(signals, name="completions")
    Sink(merged.outputs[1])
    fb.bind(merged.outputs[0])
    gathered = Reassemble(done, sel, count=1, name="gather").out
    LinearOffChipStore(gathered, out_t, name="store")
    return g


@pytest.mark.parametrize("policy", [None, RoundRobin()])
def test_feedback_loop_dynamic_parallelization(policy):
    n, regions = 7, 3
    g = dynamic_parallel_graph(n, regions)
    req = np.arange(1, n + 1, dtype=np.int32).reshape(n, 1)
    keep = [np.array([True])] * n + [np.array([False])] * regions
    r = interpret(
        g,
        {"req": req, "init": np.eye(regions, dtype=np.int32)},
        inputs={"keep": keep},
        merge_policy=policy,
    )
    assert r.memory["out"].reshape(-1).tolist() == [k * k for k in range(1, n + 1)]
    counts = [
        r.bindings.regular[s]
        for s in sorted(r.bindings.regular, key=str)
        if str(s).startswith("dispatch_n")
    ]
    assert sum(counts) == n and all(c >= 1 for c in counts)


def test_deadlock_names_blocked_nodes_and_queues():
    g = Graph("loop")
    x = Source(g, StreamType(SCALAR, (2,)), name="x").out
    fb = Feedback(g, StreamType(SCALAR, (2,)), name="back")
    y = Map(x, fb.out, fn=F.add, name="adder")
    fb.bind(y.out)
    with pytest.raises(StepDeadlock) as info:
        interpret(g, inputs={"x": parse("1 2 D")})
    err = info.value
    assert set(err.blocked) == {"adder", "back"}
    assert err.blocked["adder"] == "input 'in1' (back.out)"
    assert err.queues["x.out"] == 2
    assert "graph 'loop' deadlocked" in str(err)


def test_dot_export_lists_nodes_edges_and_types():
    g = Graph("small")
    x = Source(g, StreamType(SCALAR, (2,)), name="x").out
    Sink(Map(x, x, fn=F.add, name="twice").out, name="drain")
    dot = g.to_dot()
    assert dot.startswith('digraph "small" {')
    assert '"twice" [label="twice\\nMap\\nfn=add"];' in dot
    assert '"twice" -> "drain" [label="out→in\\nStrm<Tile<int32, 1x1>, [2]>"];' in dot


def test_feedback_edges_are_dashed_in_dot():
    g = dynamic_parallel_graph(2, 2)
    interpret(
        g,
        {"req": np.ones((2, 1), np.int32), "init": np.eye(2, dtype=np.int32)},
        inputs={"keep": [np.array([True])] * 2 + [np.array([False])] * 2},
    )
    assert '"completions" -> "free" [label="data→in' in g.to_dot()
    assert "style=dashed" in g.to_dot()


def test_topo_order_ignores_feedback_edges():
    g = dynamic_parallel_graph(2, 2)
    order = [n.name for n in g.topo_order()]
    assert order.index("free") < order.index("avail") < order.index("completions")


def test_interpreter_checks_declared_static_dims():
    g = Graph()
    x = Source(g, StreamType(SCALAR, (1, 3)), name="x").out
    Sink(x)
    with pytest.raises(Exception, match=r"declared 3, observed 2"):
        interpret(g, inputs={"x": [[sc(1), sc(2)]]})


@pytest.mark.parametrize("lift", ["promote", "repeat"])
def test_rank0_blocks_close_eagerly_inside_loops(lift):
    """A block's closing stop on a rank-0 input is written at once, or this loop would deadlock."""
    from step_lang import Accum, Promote, RepeatStatic
    from step_lang.types import bool_, int64

    g = Graph("held")
    seed_t, keep_t = g.tensor("seed", (1, 1), int64), g.tensor("keep", (4, 1), bool_)
    seed = Flatten(LinearOffChipLoad(seed_t, tile=(1, 1), out_shape=(1,)).out, 0, 1).out
    keep = Flatten(LinearOffChipLoad(keep_t, tile=(1, 1), out_shape=(4,)).out, 0, 1).out
    fb = Feedback(g, StreamType(Tile(int64, 1, 1), (regular("F"),)), name="fb")
    m = EagerMerge([seed, fb.out])
    Sink(m.outputs[1])
    x = Partition(m.outputs[0], Map(keep, fn=F.to_selector(1)).out, 0).outputs[0]
    y = Promote(x, 0, name="lift").out if lift == "promote" else RepeatStatic(x, 2, name="lift").out
    counted = Map(
        Accum(y, fn=F.accum_count, rank=1, name="count").out, fn=F.scalar_op("mul", 0), name="zero"
    ).out
    fb.bind(counted)
    r = interpret(
        g, {"seed": np.zeros((1, 1), np.int64), "keep": np.array([[1], [1], [1], [0]], bool)}
    )
    assert show(r.tokens("count.out")) == ("1 1 1 D" if lift == "promote" else "2 2 2 D")


def test_name_scope_prefixes_given_names():
    g = Graph("g")
    with g.name_scope("attn_"):
        t = g.tensor("q", (4, 4), "int32")
        with g.name_scope("r0_"):
            src = Source(g, StreamType(SCALAR, (3,)), name="x")
        s = Sink(src.out)  # a generated name is not prefixed
    assert t.name == "attn_q" and src.name == "attn_r0_x" and s.name == "sink0"
    assert list(g.tensors) == ["attn_q"]
    with (
        pytest.raises(
            StepGraphError, match=r"^name_scope prefix must be an identifier, not 'a b'$"
        ),
        g.name_scope("a b"),
    ):
        pass
