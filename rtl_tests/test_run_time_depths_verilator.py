"""Queue depths as run-time settings (``HwConfig.queue_capacity``) on Verilator: one build runs a
graph at two depth settings, each cycle for cycle as the build with those depths built in.

Builds (fast tier): the hardware-size SwiGLU with run-time depths and with the mixed depths
built in (its default-depth build is ``test_fast_cosim_verilator.py``'s), and the small
reconvergent graph with run-time depths (its deadlock report).
"""

from __future__ import annotations

import numpy as np
import pytest

from examples import swiglu
from step_hw import cosim
from step_hw.config import HwConfig
from step_hw.run_time_depths import shared_capacities
from step_lang import DONE, Stop, interpret
from step_lang.passes import lower

from .test_fast_cosim_verilator import _reconvergent


def _mixed():
    """The hardware-size SwiGLU with its queues at depths 1, 2 and 5 in turn."""
    g = swiglu.hardware()
    names = sorted({s.name for n in lower(swiglu.hardware()).nodes.values() for s in n.inputs})
    for i, name in enumerate(names):
        g.queue_depths[name] = (1, 2, 5)[i % 3]
    return g


def _pushes(trace: dict) -> dict:
    return {name: (q.get("depth"), q["push"]) for name, q in trace.items()}


def test_one_build_runs_a_graph_at_two_depth_settings():
    memory = swiglu.inputs(swiglu.HW_CONFIG, seed=4)
    want = interpret(swiglu.hardware(), memory).memory["out"]
    config = HwConfig(queue_capacity=shared_capacities([swiglu.hardware(), _mixed()], HwConfig()))
    assert config.queue_capacity  # some queues are built deeper than the default
    folders = set()
    for name, make in (("default", swiglu.hardware), ("mixed", _mixed)):
        built_in = cosim.run(make(), memory, tier="fast", trace=True, tag=f"rt_{name}")
        run_time = cosim.run(make(), memory, config=config, tier="fast", trace=True,
                             tag=f"rt_{name}")  # fmt: skip
        folders.add(run_time.folder.parent.parent)
        assert np.array_equal(run_time.outputs["out"], want)
        assert run_time.cycles == built_in.cycles
        # every queue takes every token in the same cycle; the trace gives each run's depths
        assert _pushes(run_time.trace) == _pushes(built_in.trace)
    assert len(folders) == 1
    assert built_in.cycles != cosim.run(swiglu.hardware(), memory, tier="fast").cycles


def test_a_depth_above_its_capacity_is_refused_before_a_build():
    g = _mixed()
    deep = next(name for name, depth in g.queue_depths.items() if depth == 5)
    with pytest.raises(
        ValueError, match=rf"^queue of stream '{deep}' into '.*': depth 5 exceeds its capacity 3 "
        r"\(HwConfig.queue_capacity\)$",
    ):  # fmt: skip
        cosim.run(g, swiglu.inputs(swiglu.HW_CONFIG), config=HwConfig(queue_capacity={deep: 3}),
                  tier="fast")  # fmt: skip
    with pytest.raises(ValueError, match=r"^HwConfig.queue_capacity names stream 'nothing.out', "
                       r"which has no queue in graph 'swiglu_b4_i4'$"):  # fmt: skip
        cosim.run(g, swiglu.inputs(swiglu.HW_CONFIG), config=HwConfig(queue_capacity={"nothing.out": 3}),
                  tier="fast")  # fmt: skip


def test_a_deadlock_report_gives_the_run_time_depths():
    """The reconvergent graph deadlocks at depth 3 on a build for depth 5, and at 5: each
    report names the depths its run set, not the capacities."""
    tokens = [np.full((1, 1), i, np.int16) for i in range(1, 9)] + [Stop(1), DONE]
    deeper = _reconvergent()
    deeper.queue_depths["x.out"] = 5  # and, lowered, its Broadcast's outputs
    config = HwConfig(queue_capacity=shared_capacities([_reconvergent(), deeper], HwConfig()))
    assert len(config.queue_capacity) == 4  # x.out and its three copies
    for graph, depth in ((_reconvergent(), 3), (deeper, 5)):
        with pytest.raises(cosim.CosimError) as err:
            cosim.run(graph, {}, inputs={"x": tokens}, config=config, tier="fast",
                      watchdog=200, tag=f"deadlock_rt{depth}")  # fmt: skip
        report = str(err.value)
        assert f"  x.out -> x_out_bc ({depth}/{depth})\n" in report
        assert f"x_out_bc waits for room on x_out_bc.out1 (full, {depth}/{depth})" in report


def test_the_axi_tier_sets_the_run_time_depths_too():
    """The cocotbext-axi bench drives ``queue_limits`` as the fast tier's does: the mixed depths
    on the run-time build take the cycles of the fast tier's build with them built in."""
    memory = swiglu.inputs(swiglu.HW_CONFIG, seed=4)
    config = HwConfig(queue_capacity=shared_capacities([swiglu.hardware(), _mixed()], HwConfig()))
    axi = cosim.run(_mixed(), memory, config=config, tag="rt_axi")
    built_in = cosim.run(_mixed(), memory, tier="fast", tag="rt_mixed")
    assert axi.cycles == built_in.cycles
    assert np.array_equal(axi.outputs["out"], interpret(_mixed(), memory).memory["out"])
