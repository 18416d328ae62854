"""The fast co-simulation tier (``cosim.run(..., tier="fast")``: memory, sources and sinks inside
the simulation, ``step_hw/cosim/fast_top.py``) against the interpreter, the cocotbext-axi tier and
the ``rtl`` profile.

Builds: the hardware-size SwiGLU (alone on its ports, on one shared read port, and with 8 bursts
in flight per controller) and decode attention's dynamic schedule, each once for the fast tier;
a small reconvergent graph that deadlocks, for both tiers; a RandomStore whose acks are paced, and one of fetch blocks for both tiers; the other axi-tier runs reuse the
builds of ``test_graph_verilator.py`` and ``test_validate_verilator.py``.
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
from step_lang import (
    DONE,
    Accum,
    Expand,
    Graph,
    LinearOffChipLoad,
    Map,
    Promote,
    RandomOffChipStore,
    RepeatStatic,
    Scan,
    Sink,
    Source,
    Stop,
    StreamType,
    Tile,
    interpret,
)
from step_lang.numerics import functions
from step_lang.types import int16

# every knob of the memory model away from the calibrated RAM, a queue shorter than the
# controllers' two bursts in flight among them
_ODD = MemoryModel(latency=5, write_response=3, outstanding=1, beat_interval=3, start_up=7)


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
    [
        MemoryModel.axi_ram(),
        MemoryModel(latency=9, write_response=5),
        MemoryModel.hbm(),
        MemoryModel.paper(),
        _ODD,
    ],
    ids=lambda m: m.tag,
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


@pytest.mark.parametrize("memory_model", [MemoryModel.paper(), _ODD], ids=lambda m: m.tag)
def test_memory_model_timing_on_ports_of_their_own(memory_model):
    """Each load and the store on a port of its own: the memory keeps its definition (the first R
    beat ``latency + start_up`` after the first AR, beats ``beat_interval`` apart, the first B
    ``write_response + start_up`` after the last W, at most ``outstanding`` ARs ahead of the
    bursts the memory took), and the profile, whose port model then covers every port, gives
    every handshake cycle for cycle."""
    m = memory_model
    r = cosim.run(
        swiglu.hardware(), _memory(), tier="fast", memory_model=m, trace=True, tag=f"own_{m.tag}"
    )
    ports = {name.rsplit(".", 1)[0] for name in r.trace if name.startswith("m_axi_")}
    reads = [p for p in ports if f"{p}.ar" in r.trace]
    assert reads and len(reads) < len(ports)
    for p in ports:
        t = {ch: r.trace[f"{p}.{ch}"]["push"] for ch in ("ar", "r", "aw", "w", "b")
             if f"{p}.{ch}" in r.trace}  # fmt: skip
        beats = t.get("r", t.get("w"))
        assert beats and min(np.diff(beats)) >= m.beat_interval, p
        if "r" in t:
            assert t["r"][0] - t["ar"][0] >= m.latency + m.start_up, p
        else:
            assert t["b"][0] - t["w"][0] >= m.write_response + m.start_up, p
    profile = RtlProfile.for_memory(m)
    sim = simulate(swiglu.hardware(), _memory(), profile=profile)
    assert np.array_equal(r.outputs["out"], interpret(swiglu.hardware(), _memory()).memory["out"])
    axi = profile.axi_trace()
    assert set(axi) == {name for name in r.trace if name.startswith("m_axi_")}
    assert axi == {name: r.trace[name]["push"] for name in axi}
    assert sim.cycles == r.cycles


def test_outstanding_requests_hide_the_latency():
    """On the HBM-like memory, controllers with 8 bursts in flight (the memory queues 16) finish
    far sooner than with 2, and the profile predicts both."""
    hbm, got = MemoryModel.hbm(), {}
    for mo in (2, 8):
        config = HwConfig(max_outstanding=mo)
        r = cosim.run(
            swiglu.hardware(), _memory(), config=config, tier="fast", memory_model=hbm,
            tag=f"hbm_mo{mo}",
        )  # fmt: skip
        sim = simulate(swiglu.hardware(), _memory(), profile=RtlProfile.for_memory(hbm, config))
        assert abs(sim.cycles - r.cycles) / r.cycles <= 0.01, (mo, sim.cycles, r.cycles)
        got[mo] = r.cycles
    assert got[8] < 0.8 * got[2], got


def test_a_cached_design_reports_its_recorded_times(monkeypatch):
    """A design found by its key on disk (a new process) converts and builds nothing, and still
    reports what its conversion and build took when they were done."""
    from step_hw.cosim import harness

    first = cosim.design(swiglu.hardware(), HwConfig(), tier="fast", quiet=True)
    monkeypatch.setattr(harness, "_DESIGNS", {})  # as in a new process
    again = cosim.design(swiglu.hardware(), HwConfig(), tier="fast", quiet=True)
    assert again.folder == first.folder
    assert (again.build_s, again.elaborate_s) == (0.0, 0.0)
    assert again.recorded_build_s == first.recorded_build_s > 1.0
    assert again.recorded_elaborate_s > 0.1


def test_fast_watchdog_reports_queue_levels():
    """As the axi tier: no queue moves for the loads' first reads, so a 4-cycle watchdog fires
    and the report lists every queue (all empty), read through the harness's level port."""
    with pytest.raises(
        cosim.CosimError, match=r"(?s)no progress.*full queues \(0\).*empty queues \(11\)"
    ):
        cosim.run(swiglu.hardware(), _memory(), tier="fast", watchdog=4, tag="watchdog")


def _reconvergent() -> Graph:
    """x - sum(x) on int16 scalars: the sum needs the whole vector while x's direct paths fill
    their queues, so the hardware deadlocks at the default depths."""
    F = functions(HwConfig())
    g = Graph("reconv")
    x = Source(g, StreamType(Tile(int16, 1, 1), (1, 8)), name="x").out
    total = Accum(x, fn=F.accum_add, rank=1, name="total").out
    spread = Expand(Promote(total, 0, name="lift").out, x, 1, name="spread").out
    Sink(Map(x, spread, fn=F.sub, name="center").out, name="sink")
    return g


def test_deadlock_report_names_full_queues_and_blocked_nodes():
    """A real deadlock (not an idle wait): both tiers end it in the same report, from the
    queue levels the fast tier's harness reads out of the design."""
    tokens = [np.full((1, 1), i, np.int16) for i in range(1, 9)] + [Stop(1), DONE]
    reports = {}
    for tier in ("fast", "axi"):
        with pytest.raises(cosim.CosimError) as err:
            cosim.run(
                _reconvergent(), {}, inputs={"x": tokens}, tier=tier, watchdog=200,
                tag="deadlock",
            )  # fmt: skip
        text = str(err.value)
        reports[tier] = text[text.index("full queues") : text.index("run folder")]
    assert reports["fast"] == reports["axi"]
    report = reports["fast"]
    assert "full queues (3):\n  x.out -> x_out_bc (3/3)\n" in report
    assert "x_out_bc waits for room on x_out_bc.out1 (full, 3/3)" in report
    assert "total waits for a token on x_out_bc.out0 (empty)" in report
    assert "likely cause: reconvergent paths" in report


def test_fast_tier_refuses_what_it_cannot_do():
    with pytest.raises(ValueError, match=r"^run: axi_errors needs the axi tier"):
        cosim.run(swiglu.hardware(), _memory(), tier="fast", axi_errors=("w_gate",))
    with pytest.raises(ValueError, match=r"^run: memory_model .* needs the fast tier"):
        cosim.run(swiglu.hardware(), _memory(), memory_model=MemoryModel.hbm())
    with pytest.raises(ValueError, match=r"^run: tier must be one of axi, fast, not 'verilog'$"):
        cosim.run(swiglu.hardware(), _memory(), tier="verilog")
    with pytest.raises(
        ValueError, match=r"^run: pattern must be one of always, periodic, random, not 'bursty'$"
    ):
        cosim.run(swiglu.hardware(), _memory(), tier="fast", pattern="bursty")


@pytest.mark.parametrize(("pattern", "seed"), [("always", 1), ("random", 2)])
def test_fast_attention_matches_interpreter(pattern, seed):
    """Decode attention (dynamic schedule): Sources and Sinks as ROMs and recorders in the
    simulation, appends to the KV caches through the write ports; without back-pressure the rtl
    profile's cycle count is the RTL's."""
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
    if pattern == "always":  # the rtl profile models this memory cycle for cycle
        sim = simulate(attention.hardware("dynamic"), memory, profile=RtlProfile(HwConfig()))
        assert sim.cycles == r.cycles


def _scatter_with_paced_acks(ack_depth: int = 2, reader: bool = False) -> tuple[Graph, dict, dict]:
    """A load's column walk, a Scan, and a RandomStore to tiles 0, 3 and 0 whose acks go to a
    Sink through a queue of ``ack_depth`` (2: a token every other cycle); with ``reader``
    through a RepeatStatic first, whose output queue has depth 1."""
    g = Graph("scatter_paced_acks")
    a = g.tensor("a", (2, 12), "int16")
    tiles = LinearOffChipLoad(a, tile=(2, 4), out_shape=(3, 1), stride=(1, 3), name="ld").out
    sums = Scan(tiles, fn=functions(HwConfig()).accum_add, rank=2, name="scan").out
    waddr = Source(g, StreamType(Tile("int32", 1, 1), (1, 3, 1)), name="waddr").out
    store = RandomOffChipStore(waddr, sums, g.tensor("c", (10, 4), "int16"), name="rst")
    g.set_queue_depth(store.out, ack_depth)
    acks = store.out
    if reader:
        acks = RepeatStatic(acks, 2, name="twice").out
        g.set_queue_depth(acks, 1)
    Sink(acks, name="acks")
    memory = {"a": np.arange(24, dtype=np.int16).reshape(2, 12), "c": np.zeros((10, 4), np.int16)}
    inputs = {"waddr": [[[np.full((1, 1), k, np.int32)] for k in (0, 3, 0)]]}
    return g, memory, inputs


@pytest.mark.parametrize(
    "memory_model",
    [MemoryModel(start_up=14), MemoryModel.paper(), MemoryModel.hbm()],
    ids=["start_up", "paper", "hbm"],
)
def test_random_store_done_follows_its_paced_acks(memory_model):
    """The done token of a RandomStore leaves after its acks, which leave in order and, into a
    queue of depth 2, every other cycle: when a start-up delays the first B response, the acks
    queue behind the first one and done leaves later than the last B alone would say. (Found by
    the random memory graphs: the rtl profile's done was 1 cycle early with the paper's memory,
    2 with a start-up of 14, where the memory's timing puts every port on the port model.)"""
    g, memory, inputs = _scatter_with_paced_acks()
    report = cosim.validate(
        g, memory, inputs=inputs, tier="fast", memory_model=memory_model, quiet=True,
        tag="paced_acks",
    )  # fmt: skip
    assert report.ok, str(report)
    assert report.rtl_profile_cycles == report.rtl_cycles, str(report)


@pytest.mark.parametrize(
    ("memory_model", "ack_depth"),
    [(None, 3), (MemoryModel.hbm(), 1), (MemoryModel.hbm(), 3), (MemoryModel.paper(), 1)],
    ids=["axi-3", "hbm-1", "hbm-3", "paper-1"],
)
def test_a_block_reads_the_acks_when_the_hardware_offers_them(memory_model, ack_depth):
    """A block that reads a RandomStore's acks (here a RepeatStatic) gets each when the RTL
    offers it, after its write's B response, while the store takes the next tiles meanwhile.
    The profile used to send each ack at once and time only the done token (on the AXI tier at
    depth 3: 39 cycles against the RTL's 48; with the HBM-like memory 287 and 286 against 289
    and 290; with the paper's memory 71 against 77)."""
    g, memory, inputs = _scatter_with_paced_acks(ack_depth, reader=True)
    tier = dict(tier="fast", memory_model=memory_model) if memory_model else dict(tier="axi")
    report = cosim.validate(g, memory, inputs=inputs, quiet=True, tag="read_acks", **tier)
    assert report.ok, str(report)
    assert report.rtl_profile_cycles == report.rtl_cycles, str(report)


def _block_scatter(shape: tuple[int, ...]) -> Graph:
    """Two 2 x 2 blocks of 4 x 4 tiles to blocks 1 and 0 of an int16 tensor of ``shape``."""
    g = Graph("block_scatter")
    t = g.tensor("t", shape, "int16")
    addr = Source(g, StreamType(Tile("int32", 1, 1), (2,)), name="addr").out
    data = Source(g, StreamType(Tile("int16", 4, 4), (2, 2, 2)), name="data").out
    Sink(RandomOffChipStore(addr, data, t, fetch=(2, 2), name="rs").out, name="acks")
    return g


@pytest.mark.parametrize("tier", ["fast", "axi"])
def test_a_shared_build_reads_back_each_graphs_tensor_shape(tier):
    """A [16, 8] and a [2, 8, 8] tensor give the same Verilog, so one build; each run reads its
    tensor back in its own graph's shape (the second came back as [16, 8], the first graph's,
    found by the random memory graphs)."""
    inputs = {
        "addr": [np.full((1, 1), k, np.int32) for k in (1, 0)],
        "data": [
            [[np.full((4, 4), 10 * b + 2 * i + j, np.int16) for j in range(2)] for i in range(2)]
            for b in range(2)
        ],
    }
    folders = set()
    for shape in ((16, 8), (2, 8, 8)):
        report = cosim.validate(
            _block_scatter(shape), {"t": np.zeros(shape, np.int16)}, inputs=inputs, tier=tier,
            quiet=True, tag="shapes",
        )  # fmt: skip
        assert report.ok, str(report)
        assert report.cosim.outputs["t"].shape == shape
        folders.add(report.cosim.folder.parent.parent)
    assert len(folders) == 1  # one build served both


def _up_at_depth_1() -> Graph:
    g = swiglu.hardware()
    g.queue_depths["up.out"] = 1
    return g


@pytest.mark.parametrize(
    ("make", "config"),
    [
        (swiglu.hardware, HwConfig(axi_ports=1)),  # shared ports: wider IDs
        (lambda: attention.hardware("dynamic"), HwConfig()),  # Sources and Sinks
        # run-time queue depths: the `queue_limits` input, queues of capacity 1 to 8
        (_up_at_depth_1, HwConfig(queue_capacity={"load_x.out": 8, "up.out": 1})),
    ],
    ids=["swiglu_shared", "attention", "swiglu_run_time_depths"],
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
