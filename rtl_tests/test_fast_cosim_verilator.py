"""The fast co-simulation tier (``cosim.run(..., tier="fast")``: memory, sources and sinks inside
the simulation, ``step_hw/cosim/fast_top.py``) against the interpreter, the cocotbext-axi tier and
the ``rtl`` profile.

Builds: the hardware-size SwiGLU (alone on its ports and on one shared read port) and decode
attention's dynamic schedule, each once for the fast tier; the axi-tier runs reuse the builds of
``test_graph_verilator.py`` and ``test_validate_verilator.py``.
"""

from __future__ import annotations

import numpy as np
import pytest

from examples import attention, swiglu
from sim import simulate
from sim.profiles import RtlProfile
from step_hw import cosim
from step_hw.config import HwConfig
from step_hw.memory_model import MemoryModel
from step_lang import interpret


def _memory(seed: int = 1) -> dict:
    return swiglu.inputs(swiglu.HW_CONFIG, seed=seed)


@pytest.mark.parametrize(("pattern", "seed"), [("always", 1), ("periodic", 2), ("random", 3)])
def test_fast_tier_matches_interpreter(pattern, seed):
    memory = _memory(seed)
    want = interpret(swiglu.hardware(), memory).memory["out"]
    r = cosim.run(
        swiglu.hardware(), memory, tier="fast", pattern=pattern, seed=seed, tag=f"fast_{pattern}"
    )
    assert np.array_equal(r.outputs["out"], want)
    assert r.cycles > 0 and r.sim_s > 0


def test_random_back_pressure_is_seeded():
    """Two seeds of the random pattern give different schedules (cycles), one seed the same."""
    runs = [
        cosim.run(
            swiglu.hardware(), _memory(), tier="fast", pattern="random", seed=s, tag=f"seed_{s}_{i}"
        )
        for i, s in enumerate((5, 5, 6))
    ]
    assert runs[0].cycles == runs[1].cycles != runs[2].cycles


def test_fast_tier_handshakes_equal_the_axi_tiers():
    """Without back-pressure the fast tier's memory is cocotbext-axi's RAM cycle for cycle: every
    queue's and every AXI channel's handshake cycles are equal, and so are the cycles and the
    rtl profile's prediction."""
    got = {
        tier: cosim.run(swiglu.hardware(), _memory(), tier=tier, trace=True, tag="trace_always_1")
        for tier in ("fast", "axi")
    }
    fast, axi = got["fast"], got["axi"]
    assert fast.cycles == axi.cycles
    assert set(fast.trace) == set(axi.trace)
    for name in fast.trace:
        assert fast.trace[name]["push"] == axi.trace[name]["push"], name
    assert any(name.endswith(".r") and fast.trace[name]["push"] for name in fast.trace)
    sim = simulate(swiglu.hardware(), _memory(), profile=RtlProfile(HwConfig()))
    assert sim.cycles == fast.cycles


@pytest.mark.parametrize(
    "memory_model",
    [MemoryModel.axi_ram(), MemoryModel(latency=9, write_response=5), MemoryModel.hbm()],
)
def test_shared_port_handshakes_equal_the_rtl_profile(memory_model):
    """The four loads behind one AxiReadArbiter: the rtl profile's port model
    (``RtlProfile.for_memory``) gives the fast tier's AR and R handshakes cycle for cycle, on the
    calibrated memory and on slower ones."""
    config = HwConfig(axi_ports=1)
    r = cosim.run(
        swiglu.hardware(), _memory(), config=config, tier="fast", memory_model=memory_model,
        trace=True, tag=f"shared_{memory_model.tag}",
    )  # fmt: skip
    profile = RtlProfile.for_memory(memory_model, config)
    sim = simulate(swiglu.hardware(), _memory(), profile=profile)
    assert np.array_equal(r.outputs["out"], sim.memory["out"])
    axi = profile.axi_trace()
    assert axi and axi == {name: r.trace[name]["push"] for name in axi}
    assert sim.cycles == r.cycles


def test_slower_memory_costs_what_the_profile_says():
    """On the ports of its own, each load and the store see the HBM-like latency; the profile
    of the same memory predicts the cycles."""
    hbm = MemoryModel.hbm()
    base = cosim.run(swiglu.hardware(), _memory(), tier="fast", tag="fast_always")
    r = cosim.run(swiglu.hardware(), _memory(), tier="fast", memory_model=hbm, tag="hbm")
    sim = simulate(swiglu.hardware(), _memory(), profile=RtlProfile.for_memory(hbm))
    assert r.cycles > base.cycles + hbm.latency
    assert abs(sim.cycles - r.cycles) / r.cycles <= 0.01, (sim.cycles, r.cycles)


def test_fast_watchdog_reports_queue_levels():
    """As the axi tier: no queue moves for the loads' first reads, so a 4-cycle watchdog fires
    and the report lists every queue (all empty), read through the harness's level port."""
    with pytest.raises(
        cosim.CosimError, match=r"(?s)no progress.*full queues \(0\).*empty queues \(11\)"
    ):
        cosim.run(swiglu.hardware(), _memory(), tier="fast", watchdog=4, tag="watchdog")


def test_fast_tier_refuses_what_it_cannot_do():
    with pytest.raises(ValueError, match="axi_errors needs the axi tier"):
        cosim.run(swiglu.hardware(), _memory(), tier="fast", axi_errors=("w_gate",))
    with pytest.raises(ValueError, match=r"memory_model .* needs the fast tier"):
        cosim.run(swiglu.hardware(), _memory(), memory_model=MemoryModel.hbm())
    with pytest.raises(
        ValueError, match="co-simulation tier must be one of axi, fast, not 'verilog'"
    ):
        cosim.run(swiglu.hardware(), _memory(), tier="verilog")
    with pytest.raises(
        ValueError, match="co-simulation pattern must be one of always, periodic, random"
    ):
        cosim.run(swiglu.hardware(), _memory(), tier="fast", pattern="bursty")


@pytest.mark.parametrize(("pattern", "seed"), [("always", 1), ("random", 2)])
def test_fast_attention_matches_interpreter(pattern, seed):
    """Decode attention (dynamic schedule): Sources and Sinks as ROMs and recorders in the
    simulation, appends to the KV caches through the write ports."""
    kv = [0, 15, 5, 10]
    memory = attention.hardware_inputs(kv, seed=seed)
    want = interpret(attention.hardware("dynamic"), memory).memory
    r = cosim.run(
        attention.hardware("dynamic"),
        memory,
        tier="fast",
        pattern=pattern,
        seed=seed,
        tag=f"attention_{pattern}",
    )
    for name in ("out", "k_cache", "v_cache"):
        assert np.array_equal(r.outputs[name], want[name]), name
    if pattern == "always":
        sim = simulate(attention.hardware("dynamic"), memory, profile=RtlProfile(HwConfig()))
        assert abs(sim.cycles - r.cycles) / r.cycles <= 0.05, (sim.cycles, r.cycles)


@pytest.mark.parametrize(
    ("make", "config"),
    [
        (swiglu.hardware, HwConfig(axi_ports=1)),  # shared ports: wider IDs
        (lambda: attention.hardware("dynamic"), HwConfig()),  # Sources and Sinks
    ],
    ids=["swiglu_shared", "attention"],
)
def test_fast_harness_is_lint_clean(tmp_path, make, config):
    """The generated harness passes ``verilator --lint-only -Wall`` with the project's waivers
    restricted to the design's file: it needs none of them (they are about Amaranth's output)."""
    import re

    from step_hw.cosim import fast_top, verilator
    from step_hw.elaborate import convert

    text, desc = convert(make(), config, name="step_top")
    (tmp_path / "step_top.v").write_text(text)
    (tmp_path / "step_fast.v").write_text(fast_top.wrapper(desc, text))
    waivers = re.sub(
        r"(?m)^(lint_off -rule \w+)$", r'\1 -file "*step_top.v"', verilator.WAIVERS.read_text()
    )
    assert waivers.count('-file "*step_top.v"') >= 5
    (tmp_path / "design_only.vlt").write_text(waivers)
    r = verilator.lint(
        [tmp_path / "step_top.v", tmp_path / "step_fast.v"],
        top="step_fast",
        waivers=tmp_path / "design_only.vlt",
    )
    assert r.returncode == 0, r.stderr[-3000:]
