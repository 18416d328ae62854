"""The simulator on every example and schedule: functional results equal the interpreter's bit for
bit, and the off-chip bytes it measures equal the cost model's after substituting the run's dims."""

from __future__ import annotations

import numpy as np
import pytest

from examples import attention, moe, swiglu, traces
from sim import simulate
from step_lang import interpret, metrics


def _same_memory(sim_mem, interp_mem):
    assert sim_mem.keys() == interp_mem.keys()
    for k in sim_mem:
        assert np.array_equal(sim_mem[k], interp_mem[k]), k


def _check(graph, memory, evaluate=None):
    ref = interpret(graph, memory)
    res = simulate(graph, memory)
    _same_memory(res.memory, ref.memory)
    m = metrics(graph, "paper")
    m = evaluate(m, graph, ref) if evaluate else m.evaluate(ref.bindings.regular)
    assert res.offchip_bytes == m.offchip_bytes
    assert res.cycles > 0
    return res


@pytest.mark.parametrize(("tile_b", "tile_i"), [(4, 8), (16, 64)])
def test_swiglu(tile_b, tile_i):
    c = swiglu.SwiGLUConfig(batch=16, hidden=32, intermediate=64)
    _check(swiglu.build(c, tile_b, tile_i), swiglu.inputs(c))


MOE_SCHEDULES = [
    moe.MoESchedule("static", tile_n=2, tile_f=16),
    moe.MoESchedule("dynamic", tile_f=16),
    moe.MoESchedule("static", tile_n=3, tile_f=16, regions=2),
    moe.MoESchedule("dynamic", tile_f=32, regions=4),
]


@pytest.mark.parametrize("schedule", MOE_SCHEDULES, ids=str)
def test_moe(schedule):
    choices = traces.synthetic_routing(12, moe.SMALL.experts, moe.SMALL.top_k, skew=1.5, seed=1)
    _check(moe.build(moe.SMALL, schedule, 12), moe.inputs(moe.SMALL, choices))


@pytest.mark.parametrize("schedule", attention.SCHEDULES)
def test_attention(schedule):
    c = attention.SMALL
    lengths = [0, 3, 7, 12, 1, 20, 4, 9]
    _check(
        attention.build(c, schedule, 8, regions=2), attention.inputs(c, lengths), attention.evaluate
    )


def test_timing_only_matches_functional_cycles():
    choices = traces.synthetic_routing(12, moe.SMALL.experts, moe.SMALL.top_k, seed=2)
    g = moe.build(moe.SMALL, moe.MoESchedule("static", tile_n=2, tile_f=16), 12)
    mem = moe.inputs(moe.SMALL, choices)
    full = simulate(g, mem)
    control = {k: v for k, v in mem.items() if not np.issubdtype(v.dtype, np.floating)}
    meta = simulate(g, control, functional=False)
    assert meta.cycles == full.cycles
    assert meta.offchip_bytes == full.offchip_bytes
    assert "out" not in meta.memory
