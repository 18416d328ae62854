"""Readers never change the user's graph (`step_lang.passes.lower`, docs/architecture.md)."""

from __future__ import annotations

import numpy as np
import pytest
from lang_helpers import centred, parse

from examples import swiglu
from sim import PaperProfile, SimDeadlock, simulate
from sim.engine import Engine
from sim.profiles import RtlProfile
from sim.sizing import plan_queue_sizes
from step_hw.config import HwConfig
from step_lang import (
    Graph,
    Sink,
    StepValueError,
    interpret,
    lower,
    metrics,
)

TOKENS = "1 2 3 4 5 6 7 8 S1 D"


def snapshot(g: Graph) -> tuple:
    """Everything a reader could change: nodes, their inputs, tensors, queue depths."""
    return (
        list(g.nodes),
        [
            (n.name, [s.name for s in n.inputs], [id(s.node) for s in n.inputs])
            for n in g.nodes.values()
        ],
        {k: id(t) for k, t in g.tensors.items()},
        dict(g.queue_depths),
        [id(n) for n in g.nodes.values()],
    )


def test_lowering_copies_and_leaves_the_graph_alone():
    g = centred()
    before = snapshot(g)
    low = lower(g)
    assert snapshot(g) == before
    assert "x_out_bc" in low.nodes and "x_out_bc" not in g.nodes
    assert all(n.graph is low for n in low.nodes.values())
    assert not any(n is m for n in low.nodes.values() for m in g.nodes.values())
    assert [s.name for s in low.nodes["center"].inputs] == ["x_out_bc.out2", "spread.out"]


def test_every_reader_in_any_order_any_number_of_times():
    g = swiglu.hardware()
    mem = swiglu.inputs(swiglu.HW_CONFIG, seed=2)
    before = snapshot(g)
    want = interpret(swiglu.hardware(), mem).memory["out"]
    cycles = []
    for _ in range(2):
        assert np.array_equal(interpret(g, mem).memory["out"], want)
        metrics(g)
        cycles.append(simulate(g, mem, profile=RtlProfile(HwConfig())).cycles)
        cycles.append(simulate(g, mem).cycles)
        plan_queue_sizes(g, [mem], hw_config=HwConfig(), functional=True, shrink_budget=2)
        from amaranth.hdl import Fragment

        from step_hw.elaborate import ElaboratedGraph

        Fragment.get(ElaboratedGraph(g, HwConfig()), None)  # elaborates every block
        assert snapshot(g) == before
    assert cycles[:2] == cycles[2:]


def test_a_graph_can_grow_between_reads():
    g = centred()
    r = interpret(g, inputs={"x": parse(TOKENS)})
    simulate(g, inputs={"x": parse(TOKENS)}, queue_depths={"x.out": 16})
    # the user adds a node reading a stream that already has readers: a new fan-out
    Sink(g.nodes["total"].out, name="peek")
    r2 = interpret(g, inputs={"x": parse(TOKENS)})
    assert r2.streams["total.out"] == r.streams["total.out"]
    assert "total_out_bc" in lower(g).nodes and "total_out_bc" not in g.nodes


def test_a_read_streams_depth_reaches_its_broadcast_outputs():
    g = centred()
    eng = Engine(g, PaperProfile(), None, functional=True, inputs={"x": parse(TOKENS)},
                 queue_depths={"x.out": 16, "x_out_bc.out0": 4})  # fmt: skip
    caps = {k: ch.cap for k, ch in eng.chan_by_name.items() if k.startswith("x")}
    assert caps == {"x.out": 16, "x_out_bc.out0": 4, "x_out_bc.out1": 16, "x_out_bc.out2": 16}
    # and so the reconvergent deadlock at the default depth 2 goes away
    simulate(g, inputs={"x": parse(TOKENS)}, queue_depths={"x.out": 16})
    with pytest.raises(SimDeadlock):
        simulate(g, inputs={"x": parse(TOKENS)})


def test_unknown_queue_depth_names_are_rejected():
    g = centred()
    with pytest.raises(StepValueError, match=r"^queue depth of nope\.out: graph 'reconv' has no"):
        simulate(g, inputs={"x": parse(TOKENS)}, queue_depths={"nope.out": 2})
    g.queue_depths["x_out_bc.out9"] = 2
    with pytest.raises(StepValueError, match=r"^queue depth of x_out_bc\.out9: graph 'reconv'"):
        interpret(g, inputs={"x": parse(TOKENS)})


def test_rtl_profile_reads_overrides_like_graph_depths():
    """``simulate(queue_depths=...)`` and ``Graph.queue_depths`` are one thing to every profile
    (the rtl profile's queue spacing included)."""
    mem = swiglu.inputs(swiglu.HW_CONFIG, seed=1)
    names = [s.name for n in lower(swiglu.hardware()).nodes.values() for s in n.outputs]
    for depth in (1, 2):
        depths = dict.fromkeys(names, depth)
        g = swiglu.hardware()
        by_override = simulate(g, mem, profile=RtlProfile(HwConfig()), queue_depths=depths)
        g.queue_depths.update(depths)
        by_graph = simulate(g, mem, profile=RtlProfile(HwConfig()))
        assert by_override.cycles == by_graph.cycles
