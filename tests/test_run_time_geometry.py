# amaranth: UnusedElaboratable=no
"""Tiling as a run-time setting (``HwConfig.geometry_bounds``, ``step_hw.run_time_geometry``).

A node named in ``geometry_bounds`` is built for its bound and takes its geometry from the
elaborated graph's ``geometry`` input. The claim checked here is the one the validation rests on:
the design built for the bounds moves every token of each graph of a family in the cycle the
design built for that graph moves it (``amaranth_pushes``: every queue's pushes and the cycle
count), and every graph of the family converts to the same Verilog, so one build runs them all.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from amaranth.sim import Simulator
from hypothesis import given, settings
from hypothesis import strategies as st
from test_sim_rtl_profile import amaranth_pushes

from examples import swiglu
from step_hw import run_time_geometry as rtg
from step_hw.config import HwConfig
from step_hw.memory.sequence import AffineWalk, walk_reference
from step_hw.run_time_depths import shared_capacities
from step_lang import (
    Accum,
    Bufferize,
    Graph,
    Sink,
    Source,
    Streamify,
    StreamType,
    Tile,
    interpret,
    numerics,
)
from step_lang.passes import lower
from step_lang.types import DTYPES

# -- the walk's numbers ------------------------------------------------------------------------


def _walk_from_values(shape_bound, values, index_width):
    """The walk the fields describe, stepped as the hardware steps it (ends, deltas modulo the
    index width, base): ``(index, level)`` per element."""
    n = len(shape_bound)
    ends = [values[f"end{d}"] for d in range(n)]
    deltas = [values[f"delta{d}"] % (1 << index_width) for d in range(n)]
    m, index, out = [0] * n, values["base"], []
    while True:
        trailing = 0
        for d in reversed(range(n)):
            if m[d] != ends[d]:
                break
            trailing += 1
        out.append((index, trailing))
        if trailing == n:
            return out
        d = n - 1 - trailing
        m[d] += 1
        m[d + 1 :] = [0] * (n - d - 1)
        index = (index + deltas[d]) % (1 << index_width)


@given(
    shape=st.lists(st.integers(1, 4), min_size=0, max_size=3),
    strides=st.lists(st.integers(0, 5), min_size=3, max_size=3),
    base=st.integers(0, 7),
)
def test_walk_values_describe_the_walk(shape, strides, base):
    stride = strides[: len(shape)]
    values = rtg.walk_values(shape, stride, base)
    assert _walk_from_values(shape, values, 10) == walk_reference(shape, stride, base)


def test_fields_widths():
    assert rtg.walk_fields((4, 1, 16), 6) == [
        ("end0", 2), ("end1", 1), ("end2", 4),
        ("delta0", 6), ("delta1", 6), ("delta2", 6), ("base", 6),
    ]  # fmt: skip
    assert rtg.buffer_fields(256) == [("size", 9)]
    assert rtg.held_fields((4, 16)) == [("end0", 2), ("end1", 4), ("last", 6)]


# -- the run-time walk against the built-in one, cycle for cycle --------------------------------


def _trace(walk, params, steps):
    """``(index, level, last)`` of ``walk`` in every cycle of ``steps`` (start, advance) pairs."""
    out = []

    async def bench(ctx):
        if params is not None:
            for name, value in params.items():
                ctx.set(walk.params[name], value)
        for start, advance in steps:
            ctx.set(walk.start, start)
            ctx.set(walk.advance, advance)
            await ctx.delay(1e-7)
            out.append((ctx.get(walk.index), ctx.get(walk.level), ctx.get(walk.last)))
            await ctx.tick()

    sim = Simulator(walk)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    return out


@settings(max_examples=25, deadline=None)
@given(
    shape=st.lists(st.integers(1, 3), min_size=0, max_size=3),
    slack=st.lists(st.integers(0, 2), min_size=3, max_size=3),
    strides=st.lists(st.integers(0, 4), min_size=3, max_size=3),
    base=st.integers(0, 5),
    steps=st.lists(st.tuples(st.booleans(), st.booleans()), min_size=5, max_size=40),
)
def test_run_time_walk_is_the_built_in_walk_cycle_for_cycle(shape, slack, strides, base, steps):
    stride = strides[: len(shape)]
    bound = [e + s for e, s in zip(shape, slack, strict=False)]
    width = 7
    steps = [(True, False), *((s and i % 5 == 0, a) for i, (s, a) in enumerate(steps))]
    built_in = AffineWalk(shape=shape, stride=stride, base=base, index_width=width)
    run_time = AffineWalk(shape=bound, stride=stride, base=base, index_width=width, run_time=True)
    values = rtg.walk_values(shape, stride, base)
    params = {k: v % (1 << width) for k, v in values.items()}
    # from the cycle after the first start (before it, the run-time walk's index is 0)
    assert _trace(run_time, params, steps)[1:] == _trace(built_in, None, steps)[1:]


# -- whole graphs: one design for a family of tilings ----------------------------------------

SIZE, TILINGS = swiglu.TILED_SIZE, swiglu.TILED_TILINGS
HW = HwConfig()


def _tiled(b: int, i: int) -> Graph:
    return swiglu.hardware_tiled(b, i, 4, hw=HW, size=SIZE)


def _family_config(graphs) -> HwConfig:
    return dataclasses.replace(
        HW,
        geometry_bounds=rtg.shared_bounds(graphs, HW),
        queue_capacity=shared_capacities(graphs, HW),
    )


def test_shared_bounds_of_the_tilings():
    bounds = rtg.shared_bounds([_tiled(*t) for t in TILINGS], HW)
    # four loads, six buffer pairs, the held down projection
    assert sorted(bounds) == sorted([
        "load_x", "load_gate", "load_up", "load_down",
        "gate_a_buf", "gate_a_read", "up_a_buf", "up_a_read", "gate_b_buf", "gate_b_read",
        "up_b_buf", "up_b_read", "down_a_buf", "down_a_read", "down_b_buf", "down_b_read",
        "down",
    ])  # fmt: skip
    assert bounds["down"] == (2, 2)  # held (tile_b / 4, hidden / 4)
    assert bounds["load_x"] == (2, 2, 2, 2)


@pytest.mark.parametrize("tiling", TILINGS, ids=lambda t: f"{t[0]}x{t[1]}")
def test_one_design_moves_every_token_of_each_tiling_when_its_own_design_does(tiling):
    family = [_tiled(*t) for t in TILINGS]
    graph = _tiled(*tiling)
    memory = swiglu.inputs(SIZE, seed=1)
    assert amaranth_pushes(graph, {}, _family_config(family), memory) == amaranth_pushes(
        graph, {}, HW, memory
    )
    # (its output goes to memory: the co-simulation tests compare it with the interpreter)


def test_every_tiling_converts_to_the_same_verilog():
    from step_hw.elaborate import _convert

    family = [_tiled(*t) for t in TILINGS]
    config = _family_config(family)
    texts = {_convert(g, config, "family")[0] for g in family}
    assert len(texts) == 1
    # ... and not to the Verilog of a design built for one of them
    assert _convert(family[0], HW, "family")[0] not in texts


def test_the_run_description_sets_each_tilings_geometry():
    from step_hw.elaborate import convert

    family = [_tiled(*t) for t in TILINGS]
    config = _family_config(family)
    desc = convert(family[0], config)[1]
    fields = desc["geometry_fields"]
    assert set(fields) == set(dict(config.geometry_bounds))
    values = {}
    for t, g in zip(TILINGS, family, strict=True):
        run = rtg.run_description(g, config, desc)
        values[t] = run["geometry"]
        low = lower(g)
        # unpack the load's walk and compare it with the node's
        walk = {
            f: (run["geometry"] >> at) & ((1 << w) - 1) for f, (at, w) in fields["load_x"].items()
        }
        node = low.nodes["load_x"]
        assert [walk[f"end{d}"] + 1 for d in range(len(node.out_shape))] == list(node.out_shape)
        assert walk["base"] == node.base
    assert len(set(values.values())) == len(TILINGS)


# -- held accumulators of another count --------------------------------------------------------

FX = numerics.functions(HwConfig())
T = Tile(DTYPES["int16"], 4, 4)


def _held_graph(m: int, n: int) -> Graph:
    g = Graph("held")
    x = Source(g, StreamType(T, (2, 2, m, n, 2)), name="x").out
    Sink(Accum(x, fn=FX.accum_add, rank=2, held=2, inner=1, name="acc").out, name="k")
    return g


def _held_inputs(m: int, n: int) -> dict:
    rng = np.random.default_rng(m * 10 + n)
    data = rng.integers(-100, 100, (2, 2, m, n, 2, 4, 4)).astype(np.int16)

    def nested(a):  # the stream's nested lists of 4 x 4 tiles
        return a if a.ndim == 2 else [nested(x) for x in a]

    return {"x": nested(data)}


@pytest.mark.parametrize("held", [(1, 1), (1, 3), (2, 2), (2, 3)], ids=str)
def test_held_accumulators_of_any_count_within_the_bound(held):
    """Held extents (1, 1) under a bound of (2, 3) included: one position, where the built-in
    unit keeps folding in its register."""
    graph = _held_graph(*held)
    config = dataclasses.replace(HwConfig(), geometry_bounds={"acc": (2, 3)})
    inputs = _held_inputs(*held)
    tokens, built_in_tokens = {}, {}
    assert amaranth_pushes(graph, inputs, config, sink_payloads=tokens) == amaranth_pushes(
        graph, inputs, HwConfig(), sink_payloads=built_in_tokens
    )
    assert tokens == built_in_tokens  # every token's payload, the sums included
    assert len(tokens["acc.out"]) == 2 * math.prod(held) + 2 * held[0] + 1  # data, stops, done


# -- a buffer replayed whole in stored order ----------------------------------------------------


def _replay_graph(m: int, k: int) -> Graph:
    """A ``[2, m, k]`` stream into buffers of ``[m, k]`` tiles, each read whole twice."""
    g = Graph("replay")
    x = Source(g, StreamType(T, (2, m, k)), name="x").out
    b = Bufferize(x, 2, name="buf").out
    Sink(Streamify(b, repeat=(2,), name="read").out, name="k")
    return g


@pytest.mark.parametrize("shape", [(1, 1), (1, 3), (2, 2), (2, 3)], ids=str)
def test_a_stored_order_read_of_any_buffer_within_the_bound(shape):
    graph = _replay_graph(*shape)
    config = dataclasses.replace(HwConfig(), geometry_bounds={"buf": (2, 3), "read": (2, 2, 3)})
    rng = np.random.default_rng(sum(shape))
    data = rng.integers(-100, 100, (2, *shape, 4, 4)).astype(np.int16)
    inputs = {"x": [[[data[a, i, j] for j in range(shape[1])] for i in range(shape[0])]
                    for a in range(2)]}  # fmt: skip
    tokens, built_in_tokens, errors = {}, {}, []
    assert amaranth_pushes(
        graph, inputs, config, sink_payloads=tokens, errors=errors
    ) == amaranth_pushes(graph, inputs, HwConfig(), sink_payloads=built_in_tokens)
    assert tokens == built_in_tokens
    assert errors == []  # each buffer closes with its own element count
    read = graph.nodes["read"].out
    assert len(tokens["read.out"]) == len(interpret(graph, inputs=inputs).tokens(read))


# -- what is refused -------------------------------------------------------------------------


def test_bad_geometry_bounds_are_refused_in_one_line():
    graph = _tiled(4, 8)
    cases = [
        ({"nope": (1,)}, "HwConfig.geometry_bounds names node 'nope', which graph"),
        ({"load_x": (1, 2, 2, 2)}, "LinearOffChipLoad 'load_x': geometry [2, 2, 1, 2] exceeds"),
        ({"load_x": (2, 2)}, "LinearOffChipLoad 'load_x': geometry [2, 2, 1, 2] exceeds its bound"),
        ({"silu": (2,)}, "Map 'silu': its geometry cannot be a run-time setting"),
        ({"gate_a_read": (2, 4, 2)}, "Streamify 'gate_a_read': its Bufferize 'gate_a_buf' must"),
        ({"gate_a_buf": (2, 2)}, "Bufferize 'gate_a_buf': its Streamify 'gate_a_read' must"),
    ]
    for bounds, message in cases:
        config = dataclasses.replace(HW, geometry_bounds=bounds)
        with pytest.raises(
            ValueError, match="^" + message.replace("[", r"\[").replace("(", r"\(")
        ) as e:
            rtg.check_geometry(graph, config)
        assert "\n" not in str(e.value)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (3, "HwConfig.geometry_bounds must map node names to extents, not 3"),
        ({"a": ()}, "HwConfig.geometry_bounds['a'] must be a non-empty sequence of extents"),
        ({"a": (2, 0)}, "HwConfig.geometry_bounds['a'] extent must be a positive integer, not 0"),
        ({1: (2,)}, "HwConfig.geometry_bounds: node names are strings, not 1"),
    ],
)
def test_bad_config_values_are_refused(value, message):
    with pytest.raises(ValueError, match="^" + message.replace("[", r"\[").replace("(", r"\(")):
        HwConfig(geometry_bounds=value)


def test_config_stores_bounds_sorted():
    assert HwConfig(geometry_bounds={"b": [2, 3], "a": (1,)}).geometry_bounds == (
        ("a", (1,)),
        ("b", (2, 3)),
    )


def test_shared_bounds_refuses_graphs_with_other_nodes():
    with pytest.raises(ValueError, match="differ in nodes"):
        rtg.shared_bounds([_tiled(4, 8), _tiled(4, 4)], HW)


def test_a_geometry_value_that_does_not_fit_its_field_is_refused():
    low = lower(_tiled(4, 8))  # load_x walks (2, 2, 1, 2): end0 = 1
    with pytest.raises(
        ValueError, match=r"^LinearOffChipLoad 'load_x': geometry field end0 = 1 does not fit"
    ):
        rtg.pack_geometry(low, {"load_x": {"end0": (0, 0)}})
    # a negative step is packed modulo its field, as the walk's adder wraps
    assert rtg.pack_geometry(low, {"load_x": {"delta1": (3, 4)}}) == 15 << 3
