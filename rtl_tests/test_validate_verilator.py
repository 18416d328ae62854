"""Simulator (``rtl`` profile) against the RTL on one small point per workload.

Reuses the builds of ``test_graph_verilator.py``, ``test_attention_verilator.py`` and
``test_arbiter_verilator.py`` (the same designs: ``step_hw.cosim`` caches them by Verilog hash;
SwiGLU on one shared read port is the latter's), so it adds only the cocotb runs. ``make
validate`` runs the full sweeps (``bench/validate.py``, ``docs/validation.md``).
"""

from __future__ import annotations

import numpy as np
import pytest

from examples import attention, moe, swiglu
from sim import simulate
from sim.profiles import RtlProfile
from step_hw import cosim
from step_hw.config import HwConfig
from step_lang import interpret

#: The validation target per point (docs/validation.md): sim cycles within 5% of RTL cycles.
TOLERANCE = 0.05
#: The validation sweep's SwiGLU layer (bench.validate.SWIGLU_SIZE)
SWIGLU_1X1 = swiglu.SwiGLUConfig(batch=16, hidden=4, intermediate=32, dtype="int16")


def _moe_case(pattern: str):
    c = moe.HW
    b = np.arange(8)
    choices = {
        "skewed": np.stack([np.zeros(8, int), 1 + b % 2], axis=1),  # expert 3 gets no token
        "balanced": np.stack([b % c.experts, (b + 1) % c.experts], axis=1),
    }[pattern]
    return moe.hardware, moe.inputs(c, choices, seed=4)


def _attention_case():
    kv = [8, 12, 8, 2]  # the dynamic schedule: regions take requests as they become free
    return (lambda: attention.hardware("dynamic")), attention.hardware_inputs(kv, seed=1)


CASES = {
    "swiglu": lambda: (swiglu.hardware, swiglu.inputs(swiglu.HW_CONFIG, seed=3)),
    "attention_dynamic": _attention_case,
    "moe_skewed": lambda: _moe_case("skewed"),
    "moe_balanced": lambda: _moe_case("balanced"),
    # the four loads behind one AxiReadArbiter (the store alone on its write port)
    "swiglu_shared_ports": lambda: (
        swiglu.hardware,
        swiglu.inputs(swiglu.HW_CONFIG, seed=3),
        HwConfig(axi_ports=1),
    ),
    # 1x1 tiles on one read port: load_down's consumer stalls while the loads it feeds share
    # its port; a tile's last burst waits for room in the tile queue, so R never stalls (a
    # deadlock before that rule, tests/test_sim_rtl_profile.py)
    "swiglu_1x1_shared_ports": lambda: (
        lambda: swiglu.hardware(1, 1, HwConfig(tile_rows=16, tile_cols=4), SWIGLU_1X1),
        swiglu.inputs(SWIGLU_1X1, seed=0),
        HwConfig(tile_rows=16, tile_cols=4, axi_ports=1),
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_sim_predicts_rtl_cycles(case):
    make, memory, *config = CASES[case]()
    config = config[0] if config else HwConfig()
    shared = config.axi_ports is not None
    want = interpret(make(), memory).memory
    rtl = cosim.run(make(), memory, config=config, trace=shared, tag=f"validate_{case}")
    profile = RtlProfile(config)
    sim = simulate(make(), memory, profile=profile)
    for name, got in rtl.outputs.items():
        assert np.array_equal(got, want[name]), f"RTL tensor '{name}' differs"
        assert np.array_equal(sim.memory[name], want[name]), f"simulated '{name}' differs"
    err = abs(sim.cycles - rtl.cycles) / rtl.cycles
    assert err <= TOLERANCE, f"sim {sim.cycles} vs RTL {rtl.cycles} cycles ({err:.1%})"
    if shared:  # the shared ports' handshakes, cycle by cycle (docs/validation.md)
        axi = profile.axi_trace()
        assert axi and axi == {name: rtl.trace[name]["push"] for name in axi}
