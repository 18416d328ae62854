"""Whole-graph co-simulation on Verilator: the hardware-size SwiGLU and MoE layers, each built
once (``step_hw.cosim`` caches builds by Verilog hash), run with AXI memories that answer at
once and with random latency and back-pressure; every output tensor must equal the
interpreter's bit for bit (hardware-exact fixed-point numerics)."""

from __future__ import annotations

import numpy as np
import pytest

from examples import moe, swiglu, traces
from step_hw import cosim
from step_lang import interpret


def _swiglu_memory(seed: int) -> dict:
    return swiglu.inputs(swiglu.HW_CONFIG, seed=seed)


def _moe_memory(seed: int) -> dict:
    choices = traces.synthetic_routing(8, moe.HW.experts, moe.HW.top_k, skew=1.5, seed=seed)
    return moe.inputs(moe.HW, choices, seed=seed)


EXAMPLES = {"swiglu": (swiglu.hardware, _swiglu_memory), "moe": (moe.hardware, _moe_memory)}


@pytest.mark.parametrize("example", list(EXAMPLES))
@pytest.mark.parametrize("pattern", ["always", "random"])
# seed 2 repeats the same designs on other data: make test-all
@pytest.mark.parametrize("seed", [1, pytest.param(2, marks=pytest.mark.slow)])
def test_cosim_matches_interpreter(example, pattern, seed):
    make, memory_of = EXAMPLES[example]
    memory = memory_of(seed)
    want = interpret(make(), memory).memory
    r = cosim.run(make(), memory, pattern=pattern, seed=seed, tag=f"{pattern}_{seed}")
    assert set(r.outputs) == {"out"}
    for name, got in r.outputs.items():
        assert np.array_equal(got, want[name]), f"tensor '{name}' differs"
    assert r.cycles > 0


def test_watchdog_reports_queue_levels():
    """No queue moves for the first dozen cycles (the loads' first reads are in flight), so a
    watchdog of 4 cycles fires there, and its report lists the queues (all empty)."""
    with pytest.raises(
        cosim.CosimError, match=r"(?s)no progress.*full queues \(0\).*empty queues \(11\)"
    ):
        cosim.run(swiglu.hardware(), _swiglu_memory(1), watchdog=4, tag="watchdog")


def test_one_graph_object_through_every_reader_twice():
    """Interpret, simulate, size, elaborate and co-simulate one graph object, twice: no reader
    changes it (``step_lang.passes.lower``), so the second round gives the same results."""
    from sim import simulate
    from sim.profiles import RtlProfile
    from sim.sizing import plan_queue_sizes
    from step_hw.config import HwConfig

    g = swiglu.hardware()
    memory = _swiglu_memory(1)
    nodes = list(g.nodes)
    rounds = []
    for _ in range(2):
        want = interpret(g, memory).memory["out"]
        r = cosim.run(g, memory, tag="always_1")  # the build of test_cosim_matches_interpreter
        sim = simulate(g, memory, profile=RtlProfile(HwConfig()))
        plan_queue_sizes(g, [memory], hw_config=HwConfig(), functional=True, shrink_budget=1)
        assert np.array_equal(r.outputs["out"], want) and np.array_equal(sim.memory["out"], want)
        rounds.append((r.cycles, sim.cycles))
        assert list(g.nodes) == nodes
    assert rounds[0] == rounds[1]


def test_an_axi_error_names_the_node():
    """The memory answers the gate weights' reads with SLVERR: the load's sticky error flag
    rises and the co-simulation's error names it (the build of the tests above)."""
    with pytest.raises(
        cosim.CosimError, match=r"a block raised its error flag: load_gate \(error\)"
    ):
        cosim.run(swiglu.hardware(), _swiglu_memory(1), axi_errors=("w_gate",), tag="slverr")


NODES = ("gate", "up", "silu", "mul", "down")  # the SwiGLU layer's compute units


def test_an_overflow_is_reported_by_node():
    """Every input at the largest int16: the matmuls' int32 sums wrap. The outputs still equal the
    interpreter's (which wraps the same way) and the run reports the overflowing nodes."""
    memory = {k: np.full_like(v, np.iinfo(v.dtype).max) for k, v in _swiglu_memory(1).items()}
    want = interpret(swiglu.hardware(), memory).memory["out"]
    r = cosim.run(swiglu.hardware(), memory, tag="overflow")
    assert np.array_equal(r.outputs["out"], want)
    flagged = {node for node, flag in r.flags if flag == "overflow"}
    assert flagged and flagged <= set(NODES), r.flags
