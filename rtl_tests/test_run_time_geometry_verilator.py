"""Tiling as a run-time setting (``HwConfig.geometry_bounds``) on Verilator: one build runs every
tiling of a family, each bit-exact with the interpreter and cycle for cycle as the build of that
tiling alone (every queue's pushes).

Builds: the family's shared design on the fast and the axi tier, and each tiling's own design on
the fast tier (``examples.swiglu.TILED_TILINGS``: the small SwiGLU on 4 x 4 hardware tiles).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from examples import swiglu
from step_hw import cosim
from step_hw.config import HwConfig
from step_hw.run_time_depths import shared_capacities
from step_hw.run_time_geometry import shared_bounds
from step_lang import interpret

HW = HwConfig()


def _tiled(b: int, i: int):
    return swiglu.hardware_tiled(b, i, 4, hw=HW, size=swiglu.TILED_SIZE)


def _family_config() -> HwConfig:
    family = [_tiled(*t) for t in swiglu.TILED_TILINGS]
    return dataclasses.replace(
        HW, geometry_bounds=shared_bounds(family, HW), queue_capacity=shared_capacities(family, HW)
    )


def _pushes(trace: dict) -> dict:
    return {name: q["push"] for name, q in trace.items()}


def test_one_build_runs_every_tiling_as_its_own_build():
    memory = swiglu.inputs(swiglu.TILED_SIZE, seed=3)
    config = _family_config()
    folders, cycles = set(), set()
    for b, i in swiglu.TILED_TILINGS:
        graph = _tiled(b, i)
        want = interpret(graph, memory).memory["out"]
        shared = cosim.run(
            graph, memory, config=config, tier="fast", trace=True, tag=f"geo_{b}x{i}"
        )
        own = cosim.run(_tiled(b, i), memory, tier="fast", trace=True, tag=f"geo_{b}x{i}")
        folders.add(shared.folder.parent.parent)
        # each tiling is elaborated (its own Verilog, the same text) and says so once
        assert shared.elaborate_s > 0
        assert np.array_equal(shared.outputs["out"], want)
        assert shared.cycles == own.cycles
        assert _pushes(shared.trace) == _pushes(own.trace)
        cycles.add(shared.cycles)
    assert len(folders) == 1  # one build
    assert len(cycles) == len(swiglu.TILED_TILINGS)  # ... of designs that differ in their timing


def test_the_axi_tier_sets_the_geometry_too():
    memory = swiglu.inputs(swiglu.TILED_SIZE, seed=3)
    b, i = swiglu.TILED_TILINGS[1]
    axi = cosim.run(_tiled(b, i), memory, config=_family_config(), tag="geo_axi")
    own = cosim.run(_tiled(b, i), memory, tier="fast", tag=f"geo_{b}x{i}")
    assert axi.cycles == own.cycles
    assert np.array_equal(axi.outputs["out"], interpret(_tiled(b, i), memory).memory["out"])


def test_a_geometry_beyond_its_bound_is_refused_before_a_build():
    config = dataclasses.replace(HW, geometry_bounds={"load_x": (1, 1, 1, 1)})
    with pytest.raises(ValueError, match=r"^LinearOffChipLoad 'load_x': geometry \[2, 2, 1, 2\] "
                       r"exceeds its bound \[1, 1, 1, 1\] \(HwConfig.geometry_bounds\)$"):  # fmt: skip
        cosim.run(_tiled(4, 8), swiglu.inputs(swiglu.TILED_SIZE), config=config, tier="fast")
