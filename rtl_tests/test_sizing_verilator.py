"""Sized queues in co-simulation: the depths `sim.sizing` picks (with the simulator's ``rtl``
profile) hold on the generated RTL. Each sized design must finish without deadlock, produce the
interpreter's outputs bit for bit and take at most 2% more cycles than the same graph with every
queue 1024 deep. SwiGLU runs in `make test`; the larger designs (two extra builds each) run in
`make test-all`."""

from __future__ import annotations

import numpy as np
import pytest

from rtl_tests import cosim
from sim.sizing import DEEP, plan_queue_sizes
from step_hw.config import HwConfig
from step_lang import interpret
from stepcli.sizing import hardware_case

CASES = [
    ("swiglu", "mn_mk"),
    pytest.param("moe", "static", marks=pytest.mark.slow),
    pytest.param("moe", "dynamic", marks=pytest.mark.slow),
    pytest.param("attention", "dynamic", marks=pytest.mark.slow),
]


@pytest.mark.parametrize(("example", "schedule"), CASES)
def test_sized_queues_hold_in_cosimulation(example, schedule):
    graph, images = hardware_case(example, schedule, images=2)
    report = plan_queue_sizes(graph, images, hw_config=HwConfig(), functional=True)
    assert report.deadlock_free and report.bits_sized < report.bits_default
    for i, memory in enumerate(images):
        sized, _ = hardware_case(example, schedule, images=1)
        sized.queue_depths.update(report.depths)
        deep, _ = hardware_case(example, schedule, images=1)
        deep.queue_depths.update(dict.fromkeys(report.depths, DEEP))
        want = interpret(hardware_case(example, schedule)[0], memory).memory
        got_sized = cosim.run(sized, memory, tag=f"sized_{example}_{schedule}_{i}")
        got_deep = cosim.run(deep, memory, tag=f"deep_{example}_{schedule}_{i}")
        for name, tensor in got_sized.outputs.items():
            assert np.array_equal(tensor, want[name]), f"sized RTL tensor '{name}' differs"
        assert got_sized.cycles <= got_deep.cycles * 1.02, (
            f"sized {got_sized.cycles} cycles, depth {DEEP} {got_deep.cycles}"
        )
