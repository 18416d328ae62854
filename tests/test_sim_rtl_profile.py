"""The simulator's ``rtl`` profile on hand-countable cases (``sim/profiles/rtl.py``).

The cycle numbers are those of the generated RTL (``step_hw.queue.Queue``, the MAC array, the
AXI load controller against cocotbext-axi's AxiRam), as measured in ``docs/validation.md``.

A run ends when the bench (``step_hw/cosim/bench.py``) sees ``done``: a Sink's done token taken
in cycle *t* sets its "done seen" register at the edge that ends *t*, ``done`` (the AND of those
registers, the stores' ``done`` and ``running``: ``step_hw.elaborate``) is high in *t + 1*, and
the bench, which reads ``done`` after each edge with the value of the cycle that edge ends,
counts *t + 2* edges (``RtlProfile.sink_done``).

A Source's bench offers a token every cycle; the RTL holds its queues in reset in the ``start``
cycle 0 and keeps the Source's ``ready`` low there (``step_hw.elaborate``), so its first token
enters the queue in cycle 1, one per cycle after that. Every count below that has a Source was
checked against an Amaranth simulation of the elaborated graph with such a bench.
"""

from __future__ import annotations

import numpy as np
import pytest

from sim import simulate
from sim.profiles import PROFILES, RtlProfile
from step_hw.config import HwConfig
from step_lang import (
    EagerMerge,
    Feedback,
    Graph,
    LinearOffChipLoad,
    LinearOffChipStore,
    Map,
    Sink,
    Source,
    StreamType,
    Tile,
    numerics,
)
from step_lang.types import DTYPES

INT16 = DTYPES["int16"]
FX = numerics.functions(HwConfig())


def _tiles(n: int) -> list[list[np.ndarray]]:
    """A ``[1, n]`` stream of 4x4 tiles: n data tokens, S1, done."""
    return [[np.full((4, 4), i, np.int16) for i in range(n)]]


def chain(depth: int | None, n: int) -> Graph:
    """Source -> queue -> Map (element-wise: latency 1, II 1) -> queue -> Sink."""
    g = Graph("chain")
    src = Source(g, StreamType(Tile(INT16, 4, 4), (1, n)), name="src").out
    y = Map(src, fn=FX.silu, name="silu").out
    if depth is not None:
        g.set_queue_depth(src, depth)
    Sink(y, name="sink")
    return g


def test_registered():
    assert PROFILES["rtl"] is RtlProfile
    assert RtlProfile().channel_depth == HwConfig().queue_depth


@pytest.mark.parametrize("n", [1, 5])
def test_queue_sustains_one_token_per_cycle_from_depth_3(n):
    # m = n data + S1 + done tokens, queued at 1 + i. The Map takes token i at 3 + i (queue
    # latency 2) and offers it at 4 + i; the sink takes it two cycles later, the done token
    # (i = m - 1) at m + 5, and the bench counts done at m + 7 (done-seen register, bench edge).
    m = n + 2
    r = simulate(chain(None, n), inputs={"src": _tiles(n)}, profile=RtlProfile())
    assert r.cycles == m + 7
    assert r.queue_high_water["src.out"] == 3


@pytest.mark.parametrize("n", [1, 5])
def test_queue_of_depth_1_moves_a_token_every_other_cycle(n):
    # A single register: latency 1, and a slot refills only the cycle after it was emptied, so
    # the Map takes token i at 2 + 2i; the last (done) leaves the Map at 2m + 1, the sink takes it
    # at 2m + 3 (its queue has depth 3) and the bench counts done at 2m + 5.
    m = n + 2
    r = simulate(chain(1, n), inputs={"src": _tiles(n)}, profile=RtlProfile())
    assert r.cycles == 2 * m + 5


@pytest.mark.parametrize(("lanes", "steps"), [(16, 4), (64, 1), (5, 13)])
def test_matmul_initiation_interval(lanes, steps):
    # 4x4 @ 4x4 = 64 products: ceil(64 / lanes) cycles per tile pair. Pair i is valid from
    # 3 + steps*i, taken in its last step and offered at 3 + steps*(i + 1); then S1 and done
    # take a cycle each, the sink takes done 2 cycles later and the bench counts it 2 after that.
    n = 3
    g = Graph("mm")
    t = StreamType(Tile(INT16, 4, 4), (1, n))
    a = Source(g, t, name="a").out
    b = Source(g, t, name="b").out
    Sink(Map(a, b, fn=FX.matmul_out("int16"), name="mm").out, name="sink")
    profile = RtlProfile(HwConfig(lanes=lanes))
    r = simulate(g, inputs={"a": _tiles(n), "b": _tiles(n)}, profile=profile)
    assert r.cycles == 3 + steps * n + 2 + 2 + 2


@pytest.mark.parametrize("n", [1, 5])
def test_feedback_is_a_wire(n):
    # The hardware aliases a Feedback's output to its input (step_hw.elaborate): the chain
    # Source -> Map -> Feedback -> Sink has one queue after the Map, as `chain` has, and takes
    # the same m + 7 cycles (a queue of its own on the Feedback's input would add 2).
    m = n + 2
    g = Graph("fb")
    t = StreamType(Tile(INT16, 4, 4), (1, n))
    fb = Feedback(g, t, name="fb")
    Sink(fb.out, name="sink")
    fb.bind(Map(Source(g, t, name="src").out, fn=FX.silu, name="silu").out)
    r = simulate(g, inputs={"src": _tiles(n)}, profile=RtlProfile())
    assert r.cycles == m + 7
    assert r.queue_curves["fb.out"].first_in == r.queue_curves["silu.out"].first_in == 4


def test_eager_merge_sends_the_selector_with_the_chunk():
    # EagerMerge (step_hw.router, latency 0) offers a chunk's selector and first token in the
    # same cycle. Five single-tile chunks queued at 1..5: the merge takes d0..d4 at 3..7, each
    # with its selector; the input's done (queued at 6) is taken at 8, both outputs' done tokens
    # leave at 9, the sinks take them at 11 and the bench counts done at 13. Measured on the
    # dynamic attention layer: the `merge_free` data and selector queues take every token in the
    # same cycle.
    g = Graph("merge")
    src = Source(g, StreamType(Tile(INT16, 4, 4), (5,)), name="src").out
    merge = EagerMerge([src], name="merge")
    Sink(merge.output("data"), name="data")
    Sink(merge.output("sel"), name="sel")
    tiles = [np.full((4, 4), i, np.int16) for i in range(5)]
    r = simulate(g, inputs={"src": tiles}, profile=RtlProfile())
    data, sel = r.queue_curves["merge.data"], r.queue_curves["merge.sel"]
    assert (data.first_in, data.last_in) == (sel.first_in, sel.last_in) == (3, 9)
    assert r.cycles == 13


def load(shape: tuple[int, int]) -> Graph:
    g = Graph("load")
    x = g.tensor("x", shape, "int16")
    Sink(LinearOffChipLoad(x, tile=(4, 4), name="load").out, name="sink")
    return g


def test_load_one_burst():
    # A 4x4 int16 tile spanning the tensor's width is one burst of four 64-bit beats: entry at
    # 2, AR at 5, R beats 7..10 (AxiRam answers 2 cycles after AR), the tile leaves 2 cycles
    # after its last beat (12), S2 at 13, done at 14; the sink takes done at 16 (AR, beats and
    # tile as on the co-simulated SwiGLU layer's `load_x`), `done` is high in 17 and the bench
    # counts 18.
    mem = {"x": np.arange(16, dtype=np.int16).reshape(4, 4)}
    r = simulate(load((4, 4)), mem, profile=RtlProfile())
    assert r.cycles == 18


def test_load_outstanding_bursts():
    # Tiles of a wider tensor are one 1-beat burst per row. Two bursts in flight: ARs at 5, 6,
    # 8, 9, ... (a slot is reused the cycle after its beat), beats at 7, 8, 10, 11, ...; tile 0
    # leaves at 13 and tile 1 at 19 (as measured on the SwiGLU layer's weight loads). With four
    # in flight the ARs follow one per cycle: beats 7..14, tiles at 12 and 16.
    mem = {"x": np.arange(32, dtype=np.int16).reshape(4, 8)}
    two = simulate(load((4, 8)), mem, profile=RtlProfile())
    four = simulate(load((4, 8)), mem, profile=RtlProfile(HwConfig(max_outstanding=4)))
    # tile 1, then S2 and done one per cycle; the sink takes done 2 cycles later, the bench
    # counts it 2 after that
    assert two.cycles == 19 + 2 + 2 + 2
    assert four.cycles == 16 + 2 + 2 + 2


def test_done_waits_for_the_last_sink():
    # `done` is the AND of every Sink's done-seen register (step_hw.elaborate): the run ends 2
    # cycles after the later Sink takes its done token. The loads (own AXI ports) are those of
    # the two tests above: `sa` takes done at 16, `sb` at 23; the bench counts done at 25.
    g = Graph("two")
    a, b = g.tensor("a", (4, 4), "int16"), g.tensor("b", (4, 8), "int16")
    Sink(LinearOffChipLoad(a, tile=(4, 4), name="la").out, name="sa")
    Sink(LinearOffChipLoad(b, tile=(4, 4), name="lb").out, name="sb")
    mem = {"a": np.zeros((4, 4), np.int16), "b": np.zeros((4, 8), np.int16)}
    r = simulate(g, mem, profile=RtlProfile())
    # each sink takes its done token 2 cycles (the queue) after it entered the sink's queue
    assert (r.queue_curves["la.out"].last_in + 2, r.queue_curves["lb.out"].last_in + 2) == (16, 23)
    assert r.cycles == 23 + RtlProfile().sink_done == 25


def test_load_counts_off_chip_bytes_per_tile():
    # Two 4x4 int16 tiles: 64 bytes read, as the paper profile (and the cost model) counts them.
    mem = {"x": np.arange(32, dtype=np.int16).reshape(4, 8)}
    r = simulate(load((4, 8)), mem, profile=RtlProfile())
    assert (r.offchip_read_bytes, r.offchip_write_bytes) == (64, 0)


@pytest.mark.parametrize(
    ("example", "schedule"), [("swiglu", "mn_mk"), ("moe", "dynamic"), ("attention", "dynamic")]
)
def test_off_chip_bytes_agree_with_the_paper_profile(example, schedule):
    from stepcli.sizing import hardware_case

    graph, (memory,) = hardware_case(example, schedule)
    rtl = simulate(graph, memory, profile=RtlProfile())
    paper = simulate(graph, memory)
    assert rtl.offchip_write_bytes > 0 and rtl.offchip_read_bytes > rtl.offchip_write_bytes
    assert (rtl.offchip_read_bytes, rtl.offchip_write_bytes) == (
        paper.offchip_read_bytes,
        paper.offchip_write_bytes,
    )


# -- shared AXI ports (HwConfig.axi_ports) ------------------------------------------------------
#
# Loads on one read port are an AxiReadArbiter (step_hw/memory/arbiter.py: round-robin on AR from
# the manager granted last, combinational, a request not taken stays granted) in front of one
# cocotbext-axi AxiRamRead: R beats in AR order, one per cycle for the port, the first 2 cycles
# after its AR; the RAM's AR queue holds 2 requests and its process takes one burst at a time,
# so AR j is taken in cycle c only if the RAM took burst j - 2 by c - 2 (it takes a burst once the
# previous one's last beat is in its R queue of 2, i.e. two cycles before that beat's
# predecessor is offered). Stores on one write port likewise: W in AW order, one beat per cycle.
# The counts below were checked against Verilator co-simulations (docs/validation.md).


def loads(n: int) -> Graph:
    """``n`` loads of one 4x4 int16 tile (one 4-beat burst) each, into sinks."""
    g = Graph("loads")
    for i in range(n):
        t = g.tensor(f"t{i}", (4, 4), "int16")
        Sink(LinearOffChipLoad(t, tile=(4, 4), name=f"l{i}").out, name=f"s{i}")
    return g


def test_two_loads_share_a_read_port():
    # Own ports: both as test_load_one_burst (AR 5, beats 7..10, done taken at 16, 18 cycles).
    # One port: both ARs are valid at 5; l0 is granted first (AR 5, beats 7..10), l1 the cycle
    # after (AR 6); its beats wait for the R channel: 11..14. l1's tile leaves at 16, S2 at 17,
    # done at 18; its sink takes done at 20 and the bench counts 22.
    mem = {"t0": np.zeros((4, 4), np.int16), "t1": np.zeros((4, 4), np.int16)}
    own = simulate(loads(2), mem, profile=RtlProfile())
    profile = RtlProfile(HwConfig(axi_ports=1))
    shared = simulate(loads(2), mem, profile=profile)
    assert own.cycles == 18
    assert profile.shared_ports() == {"m_axi_rd0": ["l0", "l1"]}
    assert profile.axi_trace() == {"m_axi_rd0.ar": [5, 6], "m_axi_rd0.r": list(range(7, 15))}
    assert [shared.queue_curves[f"l{i}.out"].last_in for i in range(2)] == [14, 18]
    assert shared.cycles == 22


def test_the_ram_takes_two_waiting_reads():
    # Four loads, ARs valid at 5: granted in turn at 5, 6, 7; the fourth waits for room in the
    # RAM's AR queue. The RAM took burst 0 at 5 and burst 1 at 7, once burst 0's last beat (10)
    # was in its R queue, two cycles before beat 8 was offered: AR 3 in 9 = 7 + 2 (as the SwiGLU
    # layer's load_down on one port). Beats: 7..10, 11..14, 15..18, 19..22; the last tile leaves
    # at 24, its done token at 26, the bench counts 30.
    mem = {f"t{i}": np.zeros((4, 4), np.int16) for i in range(4)}
    profile = RtlProfile(HwConfig(axi_ports=1))
    r = simulate(loads(4), mem, profile=profile)
    assert profile.axi_trace() == {"m_axi_rd0.ar": [5, 6, 7, 9], "m_axi_rd0.r": list(range(7, 23))}
    assert [r.queue_curves[f"l{i}.out"].last_in for i in range(4)] == [14, 18, 22, 26]
    assert r.cycles == 30


def fanout() -> Graph:
    """One load of two 4x4 tiles (one 4-beat burst each), broadcast to four stores."""
    g = Graph("fanout")
    x = LinearOffChipLoad(g.tensor("a", (8, 4), "int16"), tile=(4, 4), name="la").out
    for i in range(4):
        LinearOffChipStore(x, g.tensor(f"o{i}", (8, 4), "int16"), name=f"s{i}")
    return g


def test_stores_share_a_write_port():
    # Measured on Verilator (58 cycles, every AW, W and B handshake as below). The load's
    # tiles leave at 12 and 16; the Broadcast passes each on at once and all four stores take
    # tile 0 at 16 and tile 1 at 20, so their AWs are valid from 19 and 23. AW: s0, s1, s2 at
    # 19, 20, 21; s3 waits for the RAM's AW queue: it took burst 1 at 24, after burst 0's last
    # W beat (W 21..24), so 26. W beats follow in AW order, 4 per burst, from 21 without a gap;
    # B 2 cycles after each burst's last beat. Tile 1's AWs wait for the RAM the same way (30,
    # 34, 38, 42: 2 cycles after the RAM took the burst two before). The last B (54) plus the
    # store's 4 cycles to `done`: 58.
    mem = {"a": np.arange(32, dtype=np.int16).reshape(8, 4)}
    profile = RtlProfile(HwConfig(axi_ports=1))
    r = simulate(fanout(), mem, profile=profile)
    assert profile.shared_ports() == {"m_axi_wr0": ["s0", "s1", "s2", "s3"]}
    trace = profile.axi_trace()
    assert trace["m_axi_wr0.aw"] == [19, 20, 21, 26, 30, 34, 38, 42]
    assert trace["m_axi_wr0.w"] == list(range(21, 53))
    assert trace["m_axi_wr0.b"] == [26, 30, 34, 38, 42, 46, 50, 54]
    assert all(np.array_equal(r.memory[f"o{i}"], mem["a"]) for i in range(4))
    assert r.cycles == 58
    assert simulate(fanout(), mem, profile=RtlProfile()).cycles == 34  # four write ports


@pytest.mark.parametrize(("ports", "cycles"), [(None, 66), (1, 106), (2, 80)])
def test_swiglu_on_shared_ports(ports, cycles):
    # The hardware-size SwiGLU layer against Verilator (docs/validation.md): 66 cycles with a
    # port per operator, 106 with its four loads on one read port, 80 on two; every AR and R
    # handshake on the shared ports as in the co-simulation.
    from examples import swiglu

    for seed in (1, 3):
        mem = swiglu.inputs(swiglu.HW_CONFIG, seed=seed)
        r = simulate(swiglu.hardware(), mem, profile=RtlProfile(HwConfig(axi_ports=ports)))
        assert r.cycles == cycles


def test_head_of_line_blocking_deadlocks_like_the_rtl():
    # The validation sweep's SwiGLU with 1x1 tiles on one read port: load_down reads ahead until
    # its output and tile queues are full; its next tile's last R beat then waits for the
    # down-projection, which waits for gate and up, whose loads' beats are behind that beat on
    # the port. The co-simulation stalls with the same four full queues.
    from examples import swiglu
    from sim import SimDeadlock

    size = swiglu.SwiGLUConfig(batch=16, hidden=4, intermediate=32, dtype="int16")
    hw = HwConfig(tile_rows=16, tile_cols=4)
    graph = swiglu.hardware(1, 1, hw, size)
    profile = RtlProfile(HwConfig(tile_rows=16, tile_cols=4, axi_ports=1))
    with pytest.raises(SimDeadlock, match="shared AXI port m_axi_rd0") as err:
        simulate(graph, swiglu.inputs(size, seed=0), profile=profile)
    full = {q for q, n in err.value.queues.items() if n == 3}
    assert full == {"load_down.out", "load_x.out", "load_x_out_bc.out0", "load_x_out_bc.out1"}


def test_a_load_may_wait_on_an_idle_port():
    # lb's reference comes out of two 64-cycle MAC-array steps (lanes=1): the shared port is idle
    # from cycle 11 (la's beats are 7..10) to 138 and, while lb waits for its tile, nothing else
    # is scheduled. That is not a deadlock: lb's AR (139: the reference enters its queue at 133,
    # is seen at 135, the walk starts at 136) and beats follow, as on a port of its own.
    g = Graph("late_ref")
    t = StreamType(Tile(INT16, 4, 4), (1, 1))
    a, b, c = (Source(g, t, name=n).out for n in "abc")
    mm = Map(a, b, fn=FX.matmul_out("int16"), name="mm").out
    ref = Map(mm, c, fn=FX.matmul_out("int16"), name="mm2").out
    x, y = g.tensor("x", (4, 4), "int16"), g.tensor("y", (4, 4), "int16")
    Sink(LinearOffChipLoad(x, tile=(4, 4), name="la").out, name="sa")
    Sink(LinearOffChipLoad(y, tile=(4, 4), ref=ref, name="lb").out, name="sb")
    inputs = {n: [[np.ones((4, 4), np.int16)]] for n in "abc"}
    mem = {"x": np.zeros((4, 4), np.int16), "y": np.zeros((4, 4), np.int16)}
    own = simulate(g, mem, inputs=inputs, profile=RtlProfile(HwConfig(lanes=1)))
    profile = RtlProfile(HwConfig(lanes=1, axi_ports=1))
    shared = simulate(g, mem, inputs=inputs, profile=profile)
    assert profile.axi_trace()["m_axi_rd0.ar"] == [5, 139]
    assert shared.cycles == own.cycles


@pytest.mark.parametrize(
    ("example", "schedule"),
    [("swiglu", "mn_mk"), ("moe", "static"), ("moe", "dynamic"), ("attention", "dynamic")],
)
@pytest.mark.parametrize("ports", [1, 2, 3])
def test_ports_are_the_elaborators(example, schedule, ports):
    # The profile takes the port assignment from step_hw.elaborate.axi_managers, as the
    # elaborator does: the same operators on the same ports, in arbiter (ID prefix) order.
    from step_hw.elaborate import ElaboratedGraph
    from stepcli.sizing import hardware_case

    graph, (memory,) = hardware_case(example, schedule)
    config = HwConfig(axi_ports=ports)
    top = ElaboratedGraph(graph, config)
    for block in [top, *top.blocks.values(), *top._arbiters.values()]:
        block._MustUse__silence = True  # built to inspect, never elaborated
    profile = RtlProfile(config)
    simulate(graph, memory, profile=profile)
    shared = {port: names for port, names in top.axi_managers.items() if len(names) > 1}
    assert shared and profile.shared_ports() == shared


@pytest.mark.parametrize(
    ("example", "schedule"),
    [("swiglu", "mn_mk"), ("moe", "static"), ("moe", "time-mux"), ("attention", "dynamic")],
)
def test_port_model_of_one_operator_is_the_per_operator_model(example, schedule, monkeypatch):
    # The cycle-by-cycle port model with one manager per port (loads with and without
    # references, random loads and stores) gives every stream the per-operator model's times.
    from stepcli.sizing import hardware_case

    graph, (memory,) = hardware_case(example, schedule)
    own = simulate(graph, memory, profile=RtlProfile())
    monkeypatch.setattr(RtlProfile, "_port_model_from", 1)
    graph, (memory,) = hardware_case(example, schedule)
    profile = RtlProfile()
    modelled = simulate(graph, memory, profile=profile)
    assert len(profile.shared_ports()) > 3
    assert modelled.cycles == own.cycles
    assert modelled.queue_curves == own.queue_curves


def test_a_profile_runs_twice():
    mem = {f"t{i}": np.zeros((4, 4), np.int16) for i in range(4)}
    profile = RtlProfile(HwConfig(axi_ports=1))
    graph = loads(4)
    assert simulate(graph, mem, profile=profile).cycles == 30
    assert simulate(graph, mem, profile=profile).cycles == 30
    assert profile.axi_trace()["m_axi_rd0.ar"] == [5, 6, 7, 9]
