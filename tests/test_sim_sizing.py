"""Deadlock diagnosis and simulator-guided queue sizing on a reconvergent graph."""

from __future__ import annotations

import pytest
from lang_helpers import SCALAR, parse

from sim import SimDeadlock, simulate
from sim.sizing import diagnose, size_queues
from step_lang import Accum, Expand, Graph, Map, Promote, Sink, Source, StreamType
from step_lang import functions as F

TOKENS = "1 2 3 4 5 6 7 8 S1 D"


def centred(n: int) -> Graph:
    """x - sum(x): the sum needs the whole vector while the direct paths wait in queues."""
    g = Graph("reconv")
    x = Source(g, StreamType(SCALAR, (1, n)), name="x").out
    total = Accum(x, fn=F.accum_add, rank=1, name="total").out
    spread = Expand(Promote(total, 0, name="lift").out, x, 1, name="spread").out
    Sink(Map(x, spread, fn=F.sub, name="center").out, name="sink")
    return g


def test_diagnosis_names_the_queue_the_paths_and_a_depth():
    g = centred(8)
    deep = simulate(
        g,
        inputs={"x": parse(TOKENS)},
        queue_depths={s: 64 for s in ("x_out_bc.out1", "x_out_bc.out2")},
    )
    with pytest.raises(SimDeadlock) as info:
        simulate(g, inputs={"x": parse(TOKENS)})
    (d,) = diagnose(g, info.value, deep.queue_high_water)
    assert d.queue == "x_out_bc.out1" and d.consumer == "spread" and d.waits_for == "lift.out"
    assert d.ancestor == "x_out_bc"
    assert d.short_path == ["x_out_bc", "spread"]
    assert d.long_path == ["x_out_bc", "total", "lift", "spread"]
    assert d.suggested_depth == deep.queue_high_water["x_out_bc.out1"] >= 7
    assert str(d).startswith(
        "queue x_out_bc.out1 is full while its consumer 'spread' waits for lift.out"
    )


def test_size_queues_removes_the_deadlock_without_slowing_down():
    g = centred(8)
    report = size_queues(g, inputs={"x": parse(TOKENS)})
    assert report["cycles_sized"] == report["cycles_deep"]
    assert report["depths"]["x_out_bc.out1"] >= 7 and report["depths"]["x_out_bc.out2"] >= 7
    assert report["depths"]["total.out"] == 2  # short queues stay at the default
    r = simulate(g, inputs={"x": parse(TOKENS)})  # the graph now carries the depths
    assert r.cycles == report["cycles_sized"]
